"""megatron-core backend: model build, log-probs, gradient reduction, the actor."""

import functools
import sys
import warnings

# megatron-core announces every optional accelerator it lacks (Transformer Engine, Apex) at
# import; hyrl picks its layer spec explicitly and logs which one, so these only add noise.
for _message in (
    r"Transformer Engine and Apex are not installed",
    r"Apex is not installed\. Falling back to Torch Norm",
    r"full scope is deprecated",
):
    warnings.filterwarnings("ignore", message=_message, category=UserWarning)
# megatron-core 0.16.1's DDP and distributed optimizer call collectives torch 2.13 renamed.
for _message in (
    r"`torch\.distributed\.reduce_scatter_tensor` is deprecated",
    r"`torch\.distributed\.all_gather_into_tensor` is deprecated",
    r"`torch\.distributed\._all_gather_base` is deprecated",
    r"`torch\.distributed\._reduce_scatter_base` is deprecated",
):
    warnings.filterwarnings("ignore", message=_message, category=FutureWarning)


def _compile_deferred(compile_now):
    """torch.compile as megatron-core's import sees it: the same call, made at the wrapped
    function's first call instead of at import. megatron-core 0.16.1 wraps about 40 fused
    functions in torch.compile when imported (megatron.core.jit.jit_fuser); each call imports
    TorchDynamo and Inductor, 2 s of a 4.7 s import on the 2-core CPU machine, even though
    compiling waits for the first call in both cases. A run that never calls them (the CPU
    path) never imports the compiler."""

    def deferred(model=None, **options):
        if model is None:  # @torch.compile(options...) as a decorator factory
            return lambda fn: deferred(fn, **options)
        compiled = None

        @functools.wraps(model)
        def call(*args, **kwargs):
            nonlocal compiled
            if compiled is None:
                compiled = compile_now(model, **options)
            return compiled(*args, **kwargs)

        return call

    return deferred


def _import_megatron_core() -> None:
    """megatron.core, imported once here with torch.compile deferred (`_compile_deferred`):
    megatron's jit_fuser keeps the deferred form; torch.compile itself is restored."""
    if "megatron.core" in sys.modules:
        return
    import torch

    compile_now = torch.compile
    torch.compile = _compile_deferred(compile_now)
    try:
        import megatron.core  # noqa: F401
    finally:
        torch.compile = compile_now


_import_megatron_core()
