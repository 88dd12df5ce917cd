"""hyrl.plan.disk: the size of one checkpoint and the disk a run needs, by hand."""

from __future__ import annotations

import pytest

from hyrl.config import ResolvedConfig, RunConfig, resolve
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan.disk import checkpoint_plan, format_checkpoints, peak_kept, save_steps
from hyrl.plan.make import make_plan


def qwen(**changes) -> ResolvedConfig:
    """Qwen3-30B-A3B as the 30B recipe trains it (bf16, TP 4, EP 8, sequence parallel)."""
    base = dict(
        tensor_model_parallel_size=4, expert_model_parallel_size=8, sequence_parallel=True,
        bf16=True, transformer_impl="transformer_engine",
    )  # fmt: skip
    return resolve(RunConfig(**{**QWEN3_30B_A3B.as_dict(), **base, **changes}))


def one_save(c: ResolvedConfig, counts: dict) -> dict:
    """checkpoint_plan with c's settings."""
    return checkpoint_plan(c.parallel, c.checkpoint, c.run, c.critic, counts)


def test_save_steps_and_the_most_kept_at_once_by_hand():
    assert save_steps(3000, 50)[:3] == [50, 100, 150] and len(save_steps(3000, 50)) == 60
    assert save_steps(10, 4) == [4, 8, 10] and save_steps(10, None) == [10]
    # keep the last 3: after the 4th save is written, 3 older and the new one exist
    assert peak_kept(save_steps(3000, 50), 3, None) == 4
    assert peak_kept(save_steps(3000, 50), 0, None) == 60  # keep all
    # milestones every 1000: steps 1000 and 2000 stay besides the last 3 (3000 is among them)
    assert peak_kept(save_steps(3000, 50), 3, 1000) == 6
    assert peak_kept([10], 3, None) == 1


def test_a_30b_save_is_14_bytes_a_parameter_under_bf16_and_ppo_saves_the_critic_too():
    grpo = qwen(save="ck", save_interval=50, num_steps=3000)
    plan = one_save(grpo, {"total": 30_532_122_624})
    assert plan["per_param_bytes"] == 14  # bf16 weight 2 + fp32 main param 4 + Adam m 4 + v 4
    assert plan["save_bytes"] == 14 * 30_532_122_624  # 0.427 TB: the 0.43 TB
    assert plan["disk_bytes"] == 4 * plan["save_bytes"]
    ppo = qwen(save="ck", advantage_estimator="gae")
    assert one_save(ppo, {"total": 30_532_122_624})["save_bytes"] == 2 * plan["save_bytes"]
    without = format_checkpoints(make_plan(qwen(), 16)["checkpoints"])
    assert without[0].startswith("  checkpoints  none (no --save; launch/sbatch.template adds")
    assert "one save would be 0.427 TB" in without[0] and len(without) == 1
    lines = format_checkpoints(make_plan(grpo, 16)["checkpoints"])
    assert lines[0].startswith(
        "  checkpoints  one save 0.427 TB = 1 model(s) x 30.5B params x 14 B"
    )
    assert "60 saves (every 50 of 3000 rollout steps and the last" in lines[0]
    assert (
        "disk for the run 1.71 TB = 4 saves at once at most (--keep-last-checkpoints 3"
        in (lines[1])
    )


@pytest.mark.parametrize("bf16, per_param", [(True, 14), (False, 12)])
def test_bytes_per_parameter_follow_the_precision(bf16, per_param):
    plan = one_save(qwen(save="ck", bf16=bf16), {"total": 1000})
    assert plan["per_param_bytes"] == per_param and plan["save_bytes"] == per_param * 1000
