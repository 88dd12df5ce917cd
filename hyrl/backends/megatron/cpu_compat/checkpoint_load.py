"""A checkpoint's optimizer states loaded into torch's Adam, the optimizer megatron-core 0.16.1
falls back to without Transformer Engine or Apex (on a CPU, and on a GPU without them)."""

from __future__ import annotations

import functools

import torch


def skip_torch_adam_step_in_reshardable_load() -> None:
    """Two fixes to megatron-core 0.16.1's distributed-optimizer load for torch's Adam (the
    fallback without TE/Apex). Loading a "fully_reshardable" checkpoint copies every per-param
    state from the checkpoint, `step` included, which megatron restores separately and does not
    pass: the copy skips it here."""
    from megatron.core.optimizer import distrib_optimizer

    cls = distrib_optimizer.DistributedOptimizer
    original = cls._set_main_param_and_optimizer_states
    if getattr(original, "_hyrl_skips_step", False):
        return

    @functools.wraps(original)
    def set_states(self, model_param, tensors):
        if "step" in tensors or self.config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
            return original(self, model_param, tensors)
        group_index, group_order = self.model_param_group_index_map[model_param]
        state = self.optimizer.state[
            self.optimizer.param_groups[group_index]["params"][group_order]
        ]
        step = state.pop("step", None)
        try:
            return original(self, model_param, tensors)
        finally:
            if step is not None:
                state["step"] = step

    # a function takes attributes; typeshed's functools._Wrapped declares none
    set_states._hyrl_skips_step = True  # type: ignore[attr-defined]
    cls._set_main_param_and_optimizer_states = set_states

    # ... and gives every parameter's state the *same* `step` tensor, which torch's Adam then
    # increments once per parameter per step (measured: 11 instead of 3 after one resumed
    # step, hence wrong bias corrections): each state gets its own copy.
    load = cls.load_state_dict

    @functools.wraps(load)
    def load_state_dict(self, state_dict):
        load(self, state_dict)
        for state in self.optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].clone()

    cls.load_state_dict = load_state_dict


def prepare_optimizer_states_for_load(optimizer) -> None:
    """Give a fresh megatron optimizer the per-parameter states a checkpoint load expects.

    Without Transformer Engine or Apex (CPU), megatron-core 0.16.1 falls back to torch's Adam,
    which creates its states (and their `step`) at the first step; the distributed optimizer's
    sharded_state_dict(is_loading=True) reads that `step` and fails on a fresh optimizer. With
    TE's FusedAdam (GPU) the step lives in the param groups and this does nothing."""
    from megatron.core.optimizer import distrib_optimizer

    if distrib_optimizer.HAVE_APEX_OR_TE:
        return
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = getattr(sub, "optimizer", None)
        if inner is None or getattr(sub, "init_state_fn", None) is None:
            continue
        sub.init_state_fn(inner, sub.config)
        for state in inner.state.values():
            state.setdefault("step", torch.tensor(0.0))
