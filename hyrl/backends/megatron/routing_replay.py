"""Rollout routing replay (R3, arXiv 2510.23027) through megatron-core's own router replay.

With `moe_enable_routing_replay=True` every megatron-core `TopKRouter` holds a `RouterReplay`
whose `get_replay_topk` replaces its top-k selection. hyrl installs a subclass per router of
one model (the actor), because the engine does not give ids for every position a micro-batch
holds: padding and the last response token never went through the engine, and an engine may
give the response's routing only. Under REPLAY_FORWARD the subclass computes the router's own
top-k, then takes the engine's ids on every token that has them; the gate probabilities are
the router's own scores gathered at those ids (megatron's replay does the same), so the
gate weights still train.

Positions: megatron routes the [s, b] activations flattened s-major (token s * b + b_idx);
under sequence parallelism each TP rank routes its own contiguous s / TP slice. Expert ids
are global, so the same ids hold under TP and EP.

The targets stay set for the whole forward and backward of one micro-batch, so a forward
recomputed in backward (--recompute-granularity) replays the same experts.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


def _replay_class():
    from megatron.core.transformer.moe.router_replay import RouterReplay, RouterReplayAction

    class PartialRouterReplay(RouterReplay):
        """RouterReplay that replays only tokens whose target row is >= 0, and can record the
        router's own choice next to the one used (for the mismatch metrics)."""

        def __init__(self):
            super().__init__()
            RouterReplay.global_router_replay_instances.remove(self)  # hyrl drives it per model
            self.keep_own = False
            self.measure_only = False  # route on its own; only keep its choice for comparison
            self.own_topk_idx: torch.Tensor | None = None

        def get_replay_topk(
            self, scores, topk, num_groups=None, group_topk=None, default_compute_topk=None
        ):
            if self.router_replay_action != RouterReplayAction.REPLAY_FORWARD:
                return super().get_replay_topk(
                    scores, topk, num_groups, group_topk, default_compute_topk
                )
            own_scores, own = default_compute_topk(
                scores, topk, num_groups=num_groups, group_topk=group_topk
            )
            target = self.target_topk_idx.to(scores.device)
            if target.shape != own.shape:
                raise RuntimeError(
                    f"routing replay: {tuple(target.shape)} target ids for a router "
                    f"that routes {tuple(own.shape)} (tokens, top-k)"
                )
            if self.keep_own:
                self.own_topk_idx = own.detach()
            if self.measure_only:
                return own_scores, own
            given = (target >= 0).all(dim=-1, keepdim=True)
            used = torch.where(given, target.long(), own)
            return scores.gather(1, used), used

    return PartialRouterReplay, RouterReplayAction


def moe_routers(model: torch.nn.Module) -> list:
    """The model's megatron-core TopKRouters in layer order."""
    from megatron.core.transformer.moe.router import TopKRouter

    return [m for m in model.modules() if isinstance(m, TopKRouter)]


def local_rows(per_position: torch.Tensor) -> torch.Tensor:
    """[b, s, ...] per-position values -> [(s_local x b), ...] in the order this rank's routers
    see the tokens: s-major, and under sequence parallelism this TP rank's s / TP slice."""
    from megatron.core import parallel_state

    seq_first = per_position.transpose(0, 1)  # [s, b, ...]
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if tp > 1:  # TP > 1 with MoE requires sequence parallelism (hyrl.config)
        chunk = seq_first.shape[0] // tp
        rank = parallel_state.get_tensor_model_parallel_rank()
        seq_first = seq_first[rank * chunk : (rank + 1) * chunk]
    return seq_first.reshape(-1, *per_position.shape[2:])


class RoutingReplay:
    """Replays engine routing on one model's routers; see the module docstring."""

    def __init__(self, model: torch.nn.Module):
        replay_class, self._actions = _replay_class()
        self.routers = moe_routers(model)
        if not self.routers:
            raise ValueError("routing replay needs MoE layers; the model has none")
        for router in self.routers:
            if router.router_replay is None:
                raise ValueError(
                    "routing replay: the model was built without moe_enable_routing_replay=True"
                )
            if router.config.moe_router_fusion:  # the fused top-k never asks RouterReplay
                raise ValueError("routing replay does not work with moe_router_fusion=True")
            router.router_replay = replay_class()
        self._used: list[torch.Tensor | None] = [None] * len(self.routers)
        self._hooks = [
            router.register_forward_hook(self._record_used(i))
            for i, router in enumerate(self.routers)
        ]
        self._recording = False

    def _record_used(self, index: int):
        def hook(module, inputs, outputs):
            if self._recording:
                self._used[index] = outputs[1].detach()  # routing_map [tokens, experts], bool

        return hook

    @contextmanager
    def replaying(
        self, routed_experts: torch.Tensor | None, record: bool = False, replay: bool = True
    ):
        """Within the block the routers replay `routed_experts` ([b, s, layers, k], -1 where
        none) of the micro-batch being run. record=True keeps, per layer, the router's own
        top-k and the routing map it dispatched with (read them with `comparison`).
        replay=False (--measure-routing-mismatch) routes as usual and only records."""
        if routed_experts is None:
            yield self
            return
        if routed_experts.shape[2] != len(self.routers):
            raise ValueError(
                f"routing replay: ids for {routed_experts.shape[2]} MoE layers, the "
                f"model has {len(self.routers)}"
            )
        rows = local_rows(routed_experts)  # [tokens, layers, k]
        for layer, router in enumerate(self.routers):
            replayer = router.router_replay
            replayer.set_target_indices(rows[:, layer].contiguous())
            replayer.set_router_replay_action(self._actions.REPLAY_FORWARD)
            replayer.keep_own = record
            replayer.measure_only = not replay
        self._recording = record
        try:
            yield self
        finally:
            self._recording = False
            for router in self.routers:
                router.router_replay.clear_indices()
                router.router_replay.clear_router_replay_action()
                router.router_replay.keep_own = False
                router.router_replay.measure_only = False
                router.router_replay.own_topk_idx = None

    def comparison(self, routed_experts: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """After a recorded forward: float64 counts [compared, own differs, used differs] over
        the (position, layer) pairs where `positions` ([b, s] bool) is set and the engine gave
        ids. "own differs": the router's own top-k set is not the engine's; "used differs": the
        experts megatron dispatched the token to are not the engine's (0 when replay works)."""
        rows = local_rows(routed_experts)  # [tokens, layers, k]
        where = local_rows(positions.to(torch.bool))  # [tokens]
        counts = torch.zeros(3, dtype=torch.float64)
        for layer, router in enumerate(self.routers):
            engine_ids = rows[:, layer].to(torch.long)
            pick = where & (engine_ids >= 0).all(dim=-1)
            if not bool(pick.any()):
                continue
            used_map = self._used[layer]
            own_ids = router.router_replay.own_topk_idx
            if used_map is None or own_ids is None:
                raise RuntimeError("routing replay: comparison without a recorded forward")
            engine_map = torch.zeros_like(used_map).scatter_(
                1, engine_ids.clamp(min=0).to(used_map.device), True
            )
            own_map = torch.zeros_like(used_map).scatter_(1, own_ids, True)
            pick = pick.to(used_map.device)
            counts[0] += float(pick.sum())
            counts[1] += float((own_map != engine_map).any(dim=1)[pick].sum())
            counts[2] += float((used_map != engine_map).any(dim=1)[pick].sum())
        self._used = [None] * len(self.routers)
        return counts
