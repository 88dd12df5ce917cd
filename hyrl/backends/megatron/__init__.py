"""megatron-core backend: model build, log-probs, gradient reduction, the actor."""

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
