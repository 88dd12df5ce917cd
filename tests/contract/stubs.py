"""Every stand-in of the contract tier, in one place: only what needs a GPU.

SGLang's own code runs everywhere else (its request types and their HTTP decoding, the
scheduler's weight-update session, TpModelWorker's and the model runner's weight methods, its
serializer, its process-group rendezvous, its ServerArgs parser, ModelConfig, Qwen3-MoE's
load_weights). What stands in, and why:

* ``scheduler_process``: the server's TP process group (NCCL across its GPUs) is a gloo group
  of one rank, made from an in-memory store. (The ServerArgs it publishes are SGLang's own,
  parsed and resolved for ``--device cpu``.)
* In ``sglang_model.py`` (SGLang's real Qwen3-MoE model, built on CPU to run its
  ``load_weights``): the world of SGLang's process groups is a gloo world of one rank, and
  ``vllm._custom_ops.rotary_embedding``, the forward kernel RoPE imports at construction on a
  platform that is neither CUDA nor SGLang's CPU engine, is a function that raises (no forward
  pass runs).
* ``RecordingModel``: the model a GPU model runner holds. Its ``load_weights`` records what
  SGLang's weight updater hands it (names, shapes, values) instead of copying into GPU memory.
  tests/contract/test_qwen3_moe_load_weights.py runs SGLang's real Qwen3-MoE ``load_weights``.
* ``StandInModelRunner``: the GPU model runner around the weight updater: the model, the
  device ("cpu") and the GPU id.
* ``DiskLoadingWeightUpdater.update_weights_from_disk``: SGLang's disk loader builds the model
  from its full config on the GPU; the stand-in reads the safetensors shards the index names
  and hands them to the model's ``load_weights``. Everything else of the class is SGLang's.
* ``StandInScheduler``: the scheduler's weight-version bookkeeping (a list).
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import torch
import torch.distributed as dist
from sglang.srt.model_executor.model_runner_components.weight_updater import WeightUpdater


def scheduler_process(model_dir: str):
    """A scheduler process's setup on CPU: SGLang's own ServerArgs for the model directory
    (``--device cpu``) published as SGLang publishes them, and, standing in for the TP group, a
    gloo world of one rank (SGLang's barriers need a group)."""
    from sglang.srt.runtime_context import get_parallel, publish
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(
        ["--model-path", model_dir, "--device", "cpu", "--skip-tokenizer-init"]
    )
    server_args.resolve_once()
    publish(server_args, role="scheduler")
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    get_parallel().override_permanently(
        tp_group=types.SimpleNamespace(cpu_group=dist.group.WORLD, world_size=1), tp_rank=0
    )


class RecordingModel(torch.nn.Module):
    """Stands in for the GPU model: records each load_weights call, or refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[dict] = []
        self.refuse_next = False

    def load_weights(self, weights) -> None:
        weights = list(weights)
        if self.refuse_next:
            self.refuse_next = False
            raise RuntimeError("the stand-in model refused this load")
        self.loaded.append(
            {
                "names": [name for name, _ in weights],
                "shapes": [list(t.shape) for _, t in weights],
                "sums": [float(t.double().sum()) for _, t in weights],
            }
        )


class DiskLoadingWeightUpdater(WeightUpdater):
    """SGLang's model-runner WeightUpdater; only the disk loading itself stands in."""

    def update_weights_from_disk(
        self, model_path, load_format, weight_name_filter=None, recapture_cuda_graph=False
    ):
        from safetensors.torch import load_file

        index = Path(model_path) / "model.safetensors.index.json"
        if not index.is_file():
            return False, f"Failed to get weights iterator: no index in {model_path}."
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        named = [kv for shard in shards for kv in load_file(Path(model_path) / shard).items()]
        try:
            self.get_model().load_weights(named)
        except RuntimeError as err:
            return False, f"Failed to update weights: {err}."
        return True, "Succeeded to update model weights."


class StandInModelRunner:
    def __init__(self, model: RecordingModel):
        self.model = model
        self.weight_updater = DiskLoadingWeightUpdater(
            tp_rank=0,
            device="cpu",
            gpu_id=0,
            model_config=None,
            custom_weight_loaders={},
            get_model=lambda: self.model,
            update_model_fields=lambda *args, **kwargs: None,
            recapture_cuda_graph=lambda: None,
            get_model_runner=lambda: self,
        )


class StandInScheduler:
    def __init__(self) -> None:
        self.weight_versions: list[str | None] = []

    def record_weight_version_change(self, new_version=None) -> None:
        self.weight_versions.append(new_version)
