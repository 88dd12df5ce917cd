"""Train-inference mismatch on the real pair (transformers engine, megatron-core actor) and
rollout routing replay: the metrics catch a broken weight sync, the actor's own routing
matches the engine's when the weights agree, replay makes megatron dispatch every response
token to the engine's experts, and replay shrinks the log-prob gap a perturbed router opens."""

import pytest
import torch
from recipe_runs import records, run_recipe

from hyrl.algorithms.batch import pack
from hyrl.algorithms.mismatch import mismatch_metrics
from hyrl.models.qwen3_moe.config import TINY
from hyrl.rollout.base import SamplingParams

EOS = 1
ROUTER = "decoder.layers.{i}.mlp.router.weight"


@pytest.fixture(scope="module")
def pair():
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed
    from hyrl.rollout.hf_engine import HFRolloutEngine

    init_distributed(ParallelLayout(), seed=5)
    torch.manual_seed(0)
    settings = ActorSettings(optim=OptimizerSettings(micro_batch_size=16), routing_replay=True)
    actor = MegatronActor(TINY, ParallelLayout(), settings)
    engine = HFRolloutEngine(TINY, concurrency=64, pad_id=0, eos_id=EOS, return_routed_experts=True)
    hf_state = actor.export_hf_state_dict()
    engine.update_weights(hf_state)
    yield actor, engine, hf_state
    destroy_distributed()


def _rollout(engine, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(2, 16, (int(n),), generator=generator).tolist()
        for n in torch.randint(3, 7, (48,), generator=generator)
    ]
    torch.manual_seed(seed)
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=1.0))
    return pack(
        [g.prompt_ids for g in generations],
        [g.response_ids for g in generations],
        torch.zeros(len(generations)),
        pad_id=0,
        rollout_log_probs=[g.response_log_probs for g in generations],
        routed_experts=[g.routed_experts for g in generations],
    )


def _measure(actor, batch, replay: bool):
    if not replay:
        batch = batch.select(slice(None))
        batch.routed_experts = None
    old, _ = actor.log_probs(batch)
    routing = actor.routing_metrics()
    return mismatch_metrics(old, batch.rollout_log_probs, batch.loss_mask), routing


def test_engine_returns_the_routing_of_every_token_that_went_through_the_model(pair):
    _, engine, _ = pair
    generations = engine.generate(
        [[5, 6, 7], [5, 6, 7, 8, 9]], SamplingParams(max_new_tokens=4, temperature=1.0)
    )
    for g in generations:
        assert g.routed_experts.shape == (
            len(g.prompt_ids) + len(g.response_ids) - 1,
            TINY.num_layers,
            TINY.moe_router_topk,
        )
        assert g.routed_experts.dtype == torch.int32
        assert ((g.routed_experts >= 0) & (g.routed_experts < TINY.num_experts)).all()
        # top-k ids of one token in one layer are distinct experts
        assert (g.routed_experts.sort(dim=-1).values.diff(dim=-1) > 0).all()


def test_after_a_sync_the_mismatch_is_float_noise_and_a_corrupted_expert_jumps_it(pair):
    actor, engine, hf_state = pair
    clean, routing = _measure(actor, _rollout(engine), replay=True)
    assert clean["mismatch/logprob_abs_diff_mean"] < 1e-5
    assert clean["mismatch/kl"] < 1e-9
    assert (
        routing["mismatch/routing_compared"] > 0 and routing["mismatch/routing_replay_errors"] == 0
    )
    # the actor's own routing equals the engine's (a flipped near-tie at rounding is allowed)
    assert routing["mismatch/routing_diff_frac"] <= 0.01

    corrupted = dict(hf_state)
    key = "model.layers.0.mlp.experts.gate_up_proj"
    corrupted[key] = hf_state[key].clone()
    corrupted[key][1] += torch.randn_like(corrupted[key][1])  # expert 1 of layer 0 only
    engine.update_weights(corrupted)
    try:
        broken, _ = _measure(actor, _rollout(engine), replay=True)
    finally:
        engine.update_weights(hf_state)
    assert broken["mismatch/logprob_abs_diff_mean"] > 1000 * clean["mismatch/logprob_abs_diff_mean"]
    assert broken["mismatch/kl"] > 1e4 * max(clean["mismatch/kl"], 1e-12)
    assert broken["mismatch/is_ratio_max"] / broken["mismatch/is_ratio_min"] > 1.5


def test_misaligned_routing_is_seen_by_the_routing_comparison(pair):
    actor, engine, _ = pair
    batch = _rollout(engine, seed=1)
    shifted = batch.select(slice(None))
    shifted.routed_experts = torch.roll(batch.routed_experts.dense(), shifts=1, dims=1)
    shifted.routed_experts[:, 0] = -1
    old, _ = actor.log_probs(shifted)
    assert actor.routing_metrics()["mismatch/routing_diff_frac"] > 0.2


def test_replay_dispatches_to_the_engines_experts_and_shrinks_a_perturbed_routers_gap(pair):
    actor, engine, _ = pair
    batch = _rollout(engine, seed=2)
    routers = [p for n, p in actor.model.named_parameters() if n.endswith("mlp.router.weight")]
    assert len(routers) == TINY.num_layers
    saved = [p.detach().clone() for p in routers]
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # the trainer's routers only; the engine keeps the synced weights
        for p in routers:
            p.add_(torch.randn(p.shape, generator=generator) * 0.5 * p.std())
    try:
        off, _ = _measure(actor, batch, replay=False)
        on, routing = _measure(actor, batch, replay=True)
    finally:
        with torch.no_grad():
            for p, s in zip(routers, saved):
                p.copy_(s)
    assert routing["mismatch/routing_diff_frac"] > 0.05  # the perturbation changed its routing
    assert routing["mismatch/routing_replay_errors"] == 0  # ... and replay overrode it
    assert on["mismatch/logprob_abs_diff_mean"] < 0.5 * off["mismatch/logprob_abs_diff_mean"]


def test_training_replays_in_forward_and_recompute_with_equal_gradients():
    """Training with replay: every router call of train_step (forward, and the recomputed
    forward under full recompute) dispatches to the given experts, and the gradient with full
    recompute equals the one without."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _RECOMPUTE_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grads equal" in proc.stdout and "router calls replayed: 4, 8" in proc.stdout


_RECOMPUTE_SCRIPT = r"""
import torch
from hyrl.algorithms.batch import pack
from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
from hyrl.backends.megatron.model import ParallelLayout, init_distributed
from hyrl.backends.megatron.routing_replay import local_rows, moe_routers
from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
from hyrl.models.qwen3_moe.config import TINY

init_distributed(ParallelLayout(), seed=5)
grads, calls = [], []
for layout in (ParallelLayout(), ParallelLayout(recompute_granularity="full")):
    torch.manual_seed(0)
    actor = MegatronActor(TINY, layout, ActorSettings(
        optim=OptimizerSettings(micro_batch_size=4, noise_scale_beta=None), routing_replay=True))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(2, 16, (4,), generator=g).tolist() for _ in range(8)]
    responses = [torch.randint(2, 16, (3,), generator=g).tolist() for _ in range(8)]
    routed = [torch.randint(0, TINY.num_experts, (6, TINY.num_layers, 1), generator=g)
              for _ in range(8)]
    routed = [torch.cat([r, (r + 1) % TINY.num_experts], dim=-1).int() for r in routed]
    batch = pack(prompts, responses, torch.linspace(-1, 1, 8), pad_id=0, routed_experts=routed)
    batch.old_log_probs, _ = actor.log_probs(batch)
    maps = []
    hooks = [router.register_forward_hook(lambda m, i, o, layer=layer: maps.append((layer, o[1])))
             for layer, router in enumerate(moe_routers(actor.model))]
    actor.train_step(batch, batch.num_response_tokens, lr=0.0)
    for hook in hooks:
        hook.remove()
    # micro-batches of 4 rows: calls come layer 0, layer 1 per forward pass, micro-batch order
    per_pass = len(maps) // 2
    for index, (layer, routing_map) in enumerate(maps):
        micro = index // per_pass
        target = local_rows(batch.routed_experts.dense()[4 * micro:4 * micro + 4])[:, layer].long()
        given = (target >= 0).all(dim=-1)
        expected = torch.zeros_like(routing_map).scatter_(1, target.clamp(min=0), True)
        assert given.sum() > 0 and torch.equal(routing_map[given], expected[given]), index
    calls.append(len(maps))
    named = actor.model.named_parameters()
    grads.append({n: p.grad.clone() for n, p in named if p.grad is not None})
assert grads[0].keys() == grads[1].keys()
assert all(torch.equal(grads[0][n], grads[1][n]) for n in grads[0]), "grads differ"
print("grads equal")
print("router calls replayed: %d, %d" % tuple(calls))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout, nproc",
    [
        ([], 1),
        (["--expert-model-parallel-size", "2"], 2),
        (["--tensor-model-parallel-size", "2", "--sequence-parallel"], 2),  # each rank a slice
        # token-packed micro-batches trimmed to their longest row; two optimizer steps per rollout,
        # whose rows differ from each DP rank's log-prob share (each rank receives both)
        (
            [
                "--expert-model-parallel-size",
                "2",
                "--use-dynamic-batch-size",
                "--max-tokens-per-gpu",
                "64",
                "--global-batch-size",
                "64",
            ],
            2,
        ),
    ],
)
def test_two_step_run_with_replay_uses_the_engines_experts_for_every_response_token(
    tmp_path, layout, nproc
):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--use-tis",
        "--use-mis",
        "--use-rollout-routing-replay",
        *layout,
        nproc=nproc,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rollout_records = [r for r in records(run_dir) if "train/reward_mean" in r]
    assert len(rollout_records) == 2  # the mismatch is measured once per rollout
    for record in rollout_records:
        assert record["mismatch/routing_compared"] > 0
        assert record["mismatch/routing_replay_errors"] == 0
        assert record["mismatch/logprob_abs_diff_mean"] < 1e-5
        for key in (
            "mismatch/logprob_abs_diff_max",
            "mismatch/kl",
            "mismatch/is_ratio_max",
            "mismatch/is_ratio_min",
            "mismatch/tis_clipped_frac",
            "mismatch/mis_masked_frac",
        ):
            assert key in record


@pytest.mark.slow
def test_ppo_takes_the_same_corrections_and_replay(tmp_path):
    from recipe_runs import ROOT

    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--num-critic-only-steps",
        "0",
        "--use-tis",
        "--use-mis",
        "--mis-level",
        "sequence",
        "--use-rollout-routing-replay",
        recipe=ROOT / "recipes" / "tiny" / "ppo.sh",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert len(rows) == 2
    for record in rows:
        assert record["mismatch/routing_compared"] > 0
        assert record["mismatch/routing_replay_errors"] == 0
        assert record["mismatch/mis_masked_frac"] == 0.0  # float-noise ratios are all kept
        assert "critic/value_loss" in record and "actor/pg_loss" in record


def test_measuring_only_reports_the_routing_difference_and_leaves_the_forward_alone(pair):
    """--measure-routing-mismatch: the same comparison, but the routers route on their own, so
    the log-probs are exactly those of a pass without any routing ids."""
    import dataclasses

    actor, engine, _ = pair
    batch = _rollout(engine, seed=3)
    routers = [p for n, p in actor.model.named_parameters() if n.endswith("mlp.router.weight")]
    saved = [p.detach().clone() for p in routers]
    settings = actor.settings
    generator = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for p in routers:
            p.add_(torch.randn(p.shape, generator=generator) * 0.5 * p.std())
    try:
        plain = batch.select(slice(None))
        plain.routed_experts = None
        expected, _ = actor.log_probs(plain)
        actor.settings = dataclasses.replace(settings, routing_replay=False, routing_measure=True)
        measured, _ = actor.log_probs(batch)
        routing = actor.routing_metrics()
    finally:
        actor.settings = settings
        with torch.no_grad():
            for p, s in zip(routers, saved):
                p.copy_(s)
    assert torch.equal(measured, expected)
    assert routing["mismatch/routing_diff_frac"] > 0.05 and routing["mismatch/routing_compared"] > 0
    assert "mismatch/routing_replay_errors" not in routing  # nothing was replayed
