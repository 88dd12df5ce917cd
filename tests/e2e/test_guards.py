"""Numerical guards: a non-finite loss or gradient norm skips the update, is counted, and
--max-skipped-steps skipped steps in a row stop the run with exit 1."""

import json
import stat
import sys

import pytest
import torch
from recipe_runs import records, run_recipe

from hyrl.algorithms.batch import pack
from hyrl.models.qwen3_moe.config import TINY


@pytest.fixture(scope="module")
def actor():
    from hyrl.backends.megatron.actor import ActorSettings, MegatronActor
    from hyrl.backends.megatron.ddp_optimizer import OptimizerSettings
    from hyrl.backends.megatron.model import ParallelLayout, destroy_distributed, init_distributed

    init_distributed(ParallelLayout(), seed=3)
    torch.manual_seed(0)
    settings = ActorSettings(optim=OptimizerSettings(micro_batch_size=4))
    yield MegatronActor(TINY, ParallelLayout(), settings)
    destroy_distributed()


def _batch(actor, advantage: float):
    generator = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 15, (5,), generator=generator).tolist() for _ in range(8)]
    responses = [torch.randint(3, 15, (2,), generator=generator).tolist() for _ in range(8)]
    batch = pack(prompts, responses, torch.zeros(8), pad_id=0)
    batch.old_log_probs, _ = actor.log_probs(batch)
    batch.advantages = torch.linspace(-1, 1, 8)[:, None].expand_as(batch.old_log_probs) * advantage
    return batch


def _adam_exp_avgs(actor) -> list[torch.Tensor]:
    """Adam's first moments in megatron's optimizer (one torch optimizer per chained part)."""
    return [
        state["exp_avg"]
        for sub in actor.optimizer.chained_optimizers
        for state in sub.optimizer.state.values()
    ]


def test_a_nan_loss_skips_the_update_and_leaves_weights_optimizer_and_schedule_untouched(actor):
    finite = _batch(actor, 1.0)
    actor.train_step(finite, finite.num_response_tokens, lr=1e-3)  # AdamW has state from here
    weights = {n: p.detach().clone() for n, p in actor.model.named_parameters()}
    exp_avg = [m.clone() for m in _adam_exp_avgs(actor)]
    assert exp_avg  # Adam has moments to compare
    steps, noise_steps = actor.optimizer_steps, actor.noise_scale.step

    poisoned = _batch(actor, float("nan"))
    for in_a_row in (1, 2):
        metrics = actor.train_step(poisoned, poisoned.num_response_tokens, lr=1e-3)
        assert metrics["actor/skipped"] == 1.0
        assert (actor.skipped_steps, actor.consecutive_skips) == (in_a_row, in_a_row)
    assert actor.optimizer_steps == steps and metrics["actor/optimizer_steps"] == steps
    assert actor.noise_scale.step == noise_steps and "actor/noise_scale" not in metrics
    assert all(torch.equal(p, weights[n]) for n, p in actor.model.named_parameters())
    assert all(torch.equal(m, before) for m, before in zip(_adam_exp_avgs(actor), exp_avg))

    metrics = actor.train_step(finite, finite.num_response_tokens, lr=1e-3)
    assert metrics["actor/skipped"] == 0.0 and actor.optimizer_steps == steps + 1
    assert torch.isfinite(torch.tensor(metrics["actor/grad_norm"]))  # no NaN grad left behind
    assert all(torch.isfinite(p).all() for p in actor.model.parameters())
    assert (actor.skipped_steps, actor.consecutive_skips) == (2, 0)  # the run of skips ended


NAN_FROM_SECOND_STEP = """
import sys
import hyrl.algorithms.actor_loss as loss_module
import hyrl.backends.megatron.actor as actor_module
calls = [0]
original = loss_module.grpo_loss  # what the actor's loss (ActorLoss) calls
def poisoned(*args, **kwargs):  # every actor micro-batch loss from the 2nd optimizer step on
    loss, stats = original(*args, **kwargs)
    return (loss * float("nan") if calls[0] >= 1 else loss), stats
original_step = actor_module.MegatronActor._train  # under train_step and train_step_on_policy
def counted(self, *args, **kwargs):
    try:
        return original_step(self, *args, **kwargs)
    finally:
        calls[0] += 1
actor_module.MegatronActor._train = counted
loss_module.grpo_loss = poisoned
from hyrl.cli import main
sys.exit(main(["train", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_skipped_steps_are_logged_and_the_run_stops_after_max_skipped_steps_in_a_row(
    tmp_path, monkeypatch
):
    script = tmp_path / "nan_train.py"
    script.write_text(NAN_FROM_SECOND_STEP)
    python = tmp_path / "python"  # launch/torchrun.sh runs "$PYTHON -m hyrl train FLAGS"
    python.write_text(f'#!/bin/bash\nexec {sys.executable} {script} "${{@:4}}"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    run_dir = tmp_path / "run"
    monkeypatch.setenv("PYTHON", str(python))
    proc = run_recipe(run_dir, "--num-steps", "6", "--max-skipped-steps", "2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "--max-skipped-steps=2" in proc.stderr and "2 optimizer steps in a row" in proc.stderr
    rows = records(run_dir)  # every step has its record, the skipped ones included
    assert [r["rollout_step"] for r in rows] == [1, 2, 3]
    assert [r["actor/skipped"] for r in rows] == [0.0, 1.0, 1.0]
    assert [r["train/skipped_steps"] for r in rows] == [0, 1, 2]
    assert [r["step"] for r in rows] == [1, 1, 1]  # the optimizer step counter did not advance
    assert [r["samples"] for r in rows] == [128, 128, 128]  # no update consumed those responses
    assert rows[1]["train/loss"] is None and "train/loss" in rows[1]["nonfinite"]
    assert (run_dir / "summary.json").is_file()
    assert json.loads((run_dir / "summary.json").read_text())["ended"] == "error"
