"""SGLang 0.5.23's own Qwen3-MoE model, built on CPU in this process, to run its load_weights.

    with sglang_runtime():
        model = build_sglang_qwen3_moe(hf_config)
        model.load_weights(checkpoint_named_tensors(hf_state_dict))

Real SGLang code: the runtime context (a ServerArgs published into a context of its own,
``create_context`` / ``use_context``, so the process's context is left as it was), the process
groups (``init_distributed_environment``, ``initialize_model_parallel`` and SGLang's teardown of
them), ``Qwen3MoeForCausalLM`` built as SGLang's model loader builds it, and every layer,
parameter and weight loader it has. No platform is selected: SGLang's CPU engine
(``SGLANG_USE_CPU_ENGINE=1``) needs sgl_kernel's CPU build and zero-pads a weight shorter than
its parameter, which would hide a shape error; without it the weight loaders run the code they
run on CUDA, which copies exactly (a shape mismatch raises).

What stands in for the GPU:

* the world (NCCL across the server's GPUs) is a gloo world of one rank over an in-memory store;
* ``vllm._custom_ops.rotary_embedding``: on a platform that is neither CUDA nor SGLang's CPU
  engine, ``RotaryEmbedding.__init__`` imports it as its forward kernel. Only a forward pass
  calls it (the stand-in raises); it is in ``sys.modules`` only while the model is built.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist


@contextmanager
def sglang_runtime() -> Iterator[None]:
    """SGLang's runtime for one tensor-parallel rank of one, on CPU; torn down on exit.

    Uses the process's default process group when one exists (a gloo world of one rank) and
    otherwise makes one, destroyed on exit. Build and load the model inside the block.
    """
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs

    if ps._WORLD is not None or ps.model_parallel_is_initialized():
        raise RuntimeError("SGLang's process groups are already initialised in this process")
    context = create_context(
        ServerArgs(model_path="dummy", device="cpu"),
        role="test",
        ranks=SpawnRanks(world_rank=0),
    )
    own_world = not dist.is_initialized()
    if own_world:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    with use_context(context):
        try:
            ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
            ps.initialize_model_parallel(backend="gloo")
            yield
        finally:
            ps.destroy_model_parallel()
            if own_world:
                ps.destroy_distributed_environment()
            elif ps._WORLD is not None:  # SGLang's teardown less the default group it did not make
                ps._WORLD.destroy()
                ps._WORLD = None


def build_sglang_qwen3_moe(hf_config, dtype: torch.dtype = torch.float32):
    """SGLang's ``Qwen3MoeForCausalLM`` (unquantised) on CPU, ready for ``load_weights``: built
    the way SGLang's model loader (``model_loader/loader.py: _initialize_model``) builds it.
    Call inside ``sglang_runtime()``."""
    from sglang.srt.layers.moe.utils import resolve_shared_experts_config
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM
    from sglang.srt.runtime_context import get_model

    shared_experts = resolve_shared_experts_config(Qwen3MoeForCausalLM, hf_config, None)
    with (
        _rotary_kernel_stand_in(),
        set_default_torch_dtype(dtype),
        torch.device("cpu"),
        get_model().override(shared_experts=shared_experts),
    ):
        model = Qwen3MoeForCausalLM(config=hf_config, quant_config=None)
    model.shared_experts_config = shared_experts
    return model


@contextmanager
def _rotary_kernel_stand_in() -> Iterator[None]:
    """``vllm._custom_ops.rotary_embedding`` while the model is built, unless vllm is there."""
    if "vllm" in sys.modules or _importable("vllm"):
        yield
        return

    def rotary_embedding(*args, **kwargs):
        raise NotImplementedError("the contract tier's rotary kernel stand-in runs no forward")

    ops = types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = rotary_embedding  # type: ignore[attr-defined]
    vllm = types.ModuleType("vllm")
    vllm._custom_ops = ops  # type: ignore[attr-defined]
    sys.modules.update({"vllm": vllm, "vllm._custom_ops": ops})
    try:
        yield
    finally:
        del sys.modules["vllm"], sys.modules["vllm._custom_ops"]


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
