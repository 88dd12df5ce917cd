"""TensorWeightSync's payloads against SGLang 0.5.23's receiving side at tp_size 2.

Every TP rank of a server receives the whole list and opens only entry ``tp_rank``
(sglang/srt/managers/tp_worker.py:194-201, ``TpModelWorker.deserialize_own_rank``, whose
docstring says that opening another rank's copy breaks the producer's CUDA-IPC refcounts). A
handle is good for one opening: torch counts one consumer per serialization of a CUDA storage
(torch/multiprocessing/reductions.py, ``rebuild_cuda_tensor``), and a CPU tensor's file
descriptor is handed over once (multiprocessing/resource_sharer.py). So SGLang's own engine
serializes the tensors once per rank (sglang/srt/entrypoints/engine.py:1743-1759,
``Engine._serialize_tensors_per_rank``). hyrl posted ``[payload] * tp_size``, one
serialization shared by every rank: rank 1 could not open it.

Here each rank is a process of its own (forked, as a server's ranks share the trainer's
multiprocessing auth key in the rest of the tier: sglang_scheduler.py), publishing its tp_rank
as SGLang's scheduler does, and running SGLang's ``deserialize_own_rank`` and its model-runner
``WeightUpdater.update_weights_from_tensor`` into a stand-in model (stubs.py) that records what
it was handed. CPU tensors; file descriptors stand for the GPU's IPC handles.
"""

from __future__ import annotations

import multiprocessing
import threading
import types

import pytest
import torch

from hyrl.rollout.sglang.receive.payload import sglang_serializer
from hyrl.rollout.sglang.receive.tensor import TensorWeightSync

TP_SIZE = 2


def _tp_rank_process(model_dir, serialized_named_tensors, load_format, tp_rank, connection) -> None:
    """One TP rank of a server: what SGLang's scheduler runs for /update_weights_from_tensor
    (managers/scheduler_components/weight_updater.py, ``update_weights_from_tensor``)."""
    try:
        from sglang.srt.managers.tp_worker import TpModelWorker
        from sglang.srt.runtime_context import get_parallel
        from stubs import RecordingModel, StandInModelRunner, scheduler_process

        scheduler_process(model_dir)
        get_parallel().override_permanently(  # rank tp_rank of a tp_size 2 server
            tp_group=types.SimpleNamespace(cpu_group=None, world_size=TP_SIZE),
            tp_size=TP_SIZE,
            tp_rank=tp_rank,
            attn_tp_size=TP_SIZE,
            attn_tp_rank=tp_rank,
            moe_tp_size=TP_SIZE,
            moe_tp_rank=tp_rank,
        )
        runner = StandInModelRunner(RecordingModel())
        worker = types.SimpleNamespace(model_runner=runner)  # the method reads no more of it
        named = TpModelWorker.deserialize_own_rank(worker, serialized_named_tensors)
        success, message = runner.weight_updater.update_weights_from_tensor(
            named_tensors=named, load_format=load_format
        )
        connection.send({"success": success, "message": message, "loaded": runner.model.loaded})
    except Exception as err:  # noqa: BLE001 - the test reads it
        connection.send({"success": False, "message": repr(err), "loaded": []})


def run_tp_ranks(model_dir, serialized_named_tensors, load_format) -> list[dict]:
    """Every TP rank of one server handles the request; each answers what its model loaded."""
    from sglang.srt.utils.common import normalize_serialized_named_tensor_payloads

    # the tokenizer manager's step: the posted base64 strings -> bytes
    payloads = normalize_serialized_named_tensor_payloads(list(serialized_named_tensors))
    context = multiprocessing.get_context("fork")
    answers = []
    for tp_rank in range(TP_SIZE):
        receiving, sending = context.Pipe(duplex=False)
        rank = context.Process(
            target=_tp_rank_process,
            args=(model_dir, payloads, load_format, tp_rank, sending),
            daemon=True,
        )
        rank.start()
        if not receiving.poll(120):
            rank.kill()
            raise RuntimeError(f"TP rank {tp_rank} did not answer")
        answers.append(receiving.recv())
        rank.join(30)
    return answers


class TwoRankServer:
    """Stands in for an SGLangClient of a tp_size 2 server: the post runs SGLang's ranks."""

    _forking = threading.Lock()  # post_to_all posts from threads; one fork at a time

    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir
        self.posted: list[list[str]] = []
        self.answers: list[list[dict]] = []

    def update_weights_from_tensor(
        self, serialized_named_tensors, load_format=None, flush_cache=False, weight_version=None
    ) -> dict:
        self.posted.append(list(serialized_named_tensors))
        with self._forking:
            self.answers.append(run_tp_ranks(self.model_dir, serialized_named_tensors, load_format))
        return {"success": all(a["success"] for a in self.answers[-1])}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """What --model-path names (SGLang publishes its ServerArgs from it); no weights load."""
    from hyrl.models.qwen3_moe.config import TINY

    directory = tmp_path_factory.mktemp("tiny-qwen3-moe")
    config = TINY.to_hf_config()
    config.architectures = ["Qwen3MoeForCausalLM"]
    config.save_pretrained(directory)
    return str(directory)


def mixed_bucket() -> list:
    return [
        ("model.layers.0.input_layernorm.weight", torch.arange(3, dtype=torch.bfloat16)),
        ("model.norm.weight", torch.full((5,), 0.5, dtype=torch.float32)),
        ("model.embed_tokens.weight", torch.arange(6, dtype=torch.float32).view(2, 3)),
    ]


@pytest.mark.parametrize("flattened", [True, False], ids=["flattened_bucket", "named_tensors"])
def test_every_tp_rank_of_every_server_loads_the_bucket_from_a_payload_of_its_own(
    model_dir, flattened
):
    bucket = mixed_bucket()
    servers = [TwoRankServer(model_dir), TwoRankServer(model_dir)]
    serializer = sglang_serializer(cuda=False, flattened=flattened)
    sync = TensorWeightSync(servers, 1 << 20, tp_size=TP_SIZE, serializer=serializer)  # type: ignore[arg-type]
    sync._send(bucket, weight_version="1")  # one bucket, as send() inside a session
    posted = [payload for server in servers for payload in server.posted[0]]
    assert [len(server.posted[0]) for server in servers] == [TP_SIZE, TP_SIZE]
    assert len(set(posted)) == 2 * TP_SIZE  # four serializations: each opened by one rank only
    expected = {
        "names": [n for n, _ in bucket],
        "shapes": [list(t.shape) for _, t in bucket],
        "sums": [float(t.double().sum()) for _, t in bucket],
    }
    for server in servers:
        for tp_rank, answer in enumerate(server.answers[0]):
            assert answer["success"], f"TP rank {tp_rank}: {answer['message']}"
            assert answer["loaded"] == [expected]
    assert serializer.held is None  # the one flat copy went once every server had loaded it


def test_one_payload_shared_by_two_tp_ranks_is_opened_by_the_first_rank_only(model_dir):
    """Why hyrl's ``[payload] * tp_size`` broke: the handle is gone once rank 0 opened it."""
    payload = sglang_serializer(cuda=False)(mixed_bucket())
    rank0, rank1 = run_tp_ranks(model_dir, [payload, payload], "flattened_bucket")
    assert rank0["success"] and len(rank0["loaded"]) == 1
    assert not rank1["success"] and rank1["loaded"] == []
    # the descriptor's sharer in this process handed it to rank 0 and forgot it: rank 1's
    # request for it finds the connection closed
    assert rank1["message"] == "EOFError()"
