"""megatron-core backend: model build, log-probs, gradient reduction, the actor."""

import warnings

# megatron-core announces every optional accelerator it lacks (Transformer Engine, Apex) at
# import; hyrl picks its layer spec explicitly and logs which one, so these only add noise.
for _message in (r"Transformer Engine and Apex are not installed",
                 r"Apex is not installed\. Falling back to Torch Norm",
                 r"full scope is deprecated"):
    warnings.filterwarnings("ignore", message=_message, category=UserWarning)
