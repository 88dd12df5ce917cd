"""Fault 6 on GPUs: tensor weight sync into an SGLang server at --tp-size 2, three times.
Needs 2 GPUs and sglang; skipped without them.

A serialized CUDA IPC handle is good for one opening, and each TP rank of a server opens its
own payload (SGLang 0.5.23's TpModelWorker.deserialize_own_rank indexes them by tp_rank), so
TensorWeightSync serializes every bucket once per TP rank
(hyrl/rollout/sglang/receive/payload.py serialize_per_rank). The contract tier checks that
through SGLang's own code on CPU (tests/contract/test_tensor_sync_per_rank.py); what needs the
GPUs is real CUDA IPC: both ranks opening their handles, and the reference counts of the shared
memory staying right over repeated syncs (one payload shared by the ranks breaks those).

The server is launched as an engine actor launches it (`sglang_server_process`: a config-only
model directory, --load-format dummy) at --tp-size 2 on GPUs 0 and 1, fed from this process's
cuda:0 as `make_sglang_engine` feeds it (TensorWeightSync, device cuda:0, tp_size 2), with the
actor's weights as CUDA tensors. Three syncs: weights that count up by 1, then by 2, then the
first set again (its very tensors, sent a second time); greedy output must follow each.

Run on a machine with 2 GPUs and requirements.txt installed: `bash tools/gpu_tests.sh` or
`python -m pytest tests/gpu/test_sglang_tp2_tensor_sync.py -q`.
"""

from __future__ import annotations

from sglang_gpu import (
    BUFFER_BYTES,
    EOS,
    MEM_FRACTION_STATIC,
    REQUEST_TIMEOUT_S,
    SERVER_ARGS,
    STARTUP_TIMEOUT_S,
    counted,
    counting_weights,
    needs,
    tiny_hf_state_dict,
)

pytestmark = needs(2, "SGLang at --tp-size 2 needs two", ray=False)

PROMPTS = [[c] for c in range(2, 14)]
MAX_NEW_TOKENS = 4


def test_tensor_sync_reaches_both_tp_ranks_of_a_server_sync_after_sync(tmp_path):
    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.base import SamplingParams
    from hyrl.rollout.sglang.engine import SGLangEngine
    from hyrl.rollout.sglang.launch import sglang_server_process, write_rollout_model
    from hyrl.rollout.sglang.server import free_port

    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    server = sglang_server_process(
        write_rollout_model(TINY, tmp_path / "rollout_model", [EOS]),
        concurrency=4,
        gpus_per_engine=2,
        colocated=False,
        mem_fraction_static=MEM_FRACTION_STATIC,
        server_args=SERVER_ARGS,
        log_dir=str(tmp_path / "logs"),
        seed=0,
        port=free_port(),
    )
    engine = SGLangEngine.launch(
        server,
        STARTUP_TIMEOUT_S,
        concurrency=4,
        stop_token_ids=[EOS],
        weight_sync="tensor",
        buffer_bytes=BUFFER_BYTES,
        weight_sync_options={"device": "cuda:0", "tp_size": 2},
        timeout_s=REQUEST_TIMEOUT_S,
    )
    try:
        hf_state_dict = tiny_hf_state_dict()

        def on_gpu(step: int) -> dict:  # the trainer's weights are on its GPU
            weights = counting_weights(hf_state_dict, TINY.vocab_size, step)
            return {name: tensor.to("cuda:0") for name, tensor in weights.items()}

        by_one, by_two = on_gpu(1), on_gpu(2)
        for sync, (weights, step) in enumerate([(by_one, 1), (by_two, 2), (by_one, 1)], 1):
            engine.update_weights(weights)
            stats = engine.last_sync_stats
            assert stats is not None and stats.buckets > 1, f"sync {sync}: {stats}"
            assert stats.tensor_bytes == sum(t.numel() * t.element_size() for t in weights.values())
            print(f"sync {sync}: {stats.buckets} buckets in {stats.elapsed_s:.2f} s")
            generations = engine.generate(PROMPTS, params)
            assert [g.response_ids for g in generations] == [
                counted(p, step, MAX_NEW_TOKENS, TINY.vocab_size) for p in PROMPTS
            ], f"sync {sync} (weights counting by {step})"
    finally:
        engine.shutdown()
