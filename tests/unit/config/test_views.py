"""Each concern's settings view (`ResolvedConfig.batch`, `.optimizer`, ...): every flag is in
exactly one view, under its own name or a rename written here, and a view holds the resolved
value its flag stands for."""

import dataclasses

import pytest

from hyrl.config import RunConfig, parse_args, resolve
from hyrl.config.concerns.batch import batch_view
from hyrl.config.concerns.critic import critic_view
from hyrl.config.kinds import view

VIEWS = (
    "model",
    "parallel",
    "batch",
    "autopilot",
    "optimizer",
    "rollout",
    "algorithm",
    "critic",
    "evaluation",
    "mismatch",
    "data",
    "run",
    "checkpoint",
    "logs",
)
# A view field named otherwise than its flag's field: (view, field) -> the flag's field.
RENAMED = {
    ("batch", "responses_per_step"): "global_batch_size",
    ("critic", "responses_per_step"): "critic_global_batch_size",
    ("critic", "micro_batch_size"): "critic_micro_batch_size",
    ("critic", "autopilot_min"): "critic_autopilot_min",
    ("critic", "autopilot_max"): "critic_autopilot_max",
    ("critic", "weight_decay"): "critic_weight_decay",
    ("critic", "clip_grad"): "critic_clip_grad",
    ("critic", "load"): "critic_load",
}
# The critic's learning-rate flags are read through its schedule, as the actor's.
SCHEDULE_FLAGS = ("lr", "lr_scaling", "base_lr", "base_global_batch_size", "min_lr")
SCHEDULE_FLAGS += ("lr_warmup_steps", "lr_decay_style")
IN_SCHEDULE = {("critic", "lr_schedule"): tuple("critic_" + n for n in SCHEDULE_FLAGS)}
# Values a view derives from its flags (not flags themselves).
DERIVED = {("parallel", "virtual_pipeline_model_parallel_size"), ("optimizer", "lr_schedule")}


def _gae():
    return resolve(parse_args(["--advantage-estimator", "gae"]))


def test_every_flag_is_in_exactly_one_view():
    cfg = _gae()
    owners: dict[str, list[str]] = {}
    for name in VIEWS:
        for f in dataclasses.fields(getattr(cfg, name)):
            if (name, f.name) in DERIVED:
                continue
            flags = IN_SCHEDULE.get((name, f.name), (RENAMED.get((name, f.name), f.name),))
            for flag in flags:
                owners.setdefault(flag, []).append(name)
    flags = [f.name for f in dataclasses.fields(RunConfig)]
    assert sorted(n for n in owners if n not in flags) == []  # a view field that is no flag
    assert [n for n in flags if n not in owners] == []  # a flag in no view
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}  # a flag in two views


def test_a_view_holds_the_resolved_values():
    cfg = resolve(parse_args(["--rollout-batch-size", "4", "--n-samples-per-prompt", "4"]))
    batch = cfg.batch
    assert (batch.responses_per_step, batch.responses_per_rollout) == (16, 16)
    assert batch.optimizer_steps_per_rollout == 1 and batch.batch_schedule == "fixed"
    assert cfg.optimizer.lr_schedule.lr == cfg.lr == 3e-4
    assert cfg.critic is None  # grpo: no critic
    flags = ["--advantage-estimator", "gae", "--num-steps-per-rollout", "2"]
    gae = resolve(parse_args([*flags, "--critic-lr", "1e-5"]))  # P x G = 16 x 8
    critic = gae.critic
    assert critic is not None
    assert (critic.responses_per_step, critic.lr_schedule.lr, critic.value_clip) == (64, 1e-5, 0.2)
    assert gae.batch.optimizer_steps_per_rollout == 2


def test_a_view_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _gae().batch.responses_per_step = 3  # type: ignore[misc]


def test_a_view_of_a_config_not_resolved_is_refused():
    given = parse_args([])  # a RunConfig: --global-batch-size and --lr still None
    with pytest.raises(ValueError, match="--global-batch-size still none"):
        batch_view(given, micro_batch=given)
    with pytest.raises(ValueError, match="--critic-global-batch-size"):
        gae = parse_args(["--advantage-estimator", "gae"])
        critic_view(gae, algorithm=gae)


def test_a_value_for_no_field_is_refused():
    @dataclasses.dataclass(frozen=True)
    class One:
        seed: int

    assert view(One, parse_args([])).seed == 1234
    with pytest.raises(TypeError, match="no field sed"):
        view(One, parse_args([]), sed=1)
