"""The copy-and-edit contract: flags appended to a recipe (after its `--` marker) win, also
against the recipe's flag of an exclusive pair; two conflicting flags given by the user
themselves are still refused, naming both."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testpaths import ROOT, training_recipes

from hyrl.config import ConfigError, appended_wins, load

# (recipe's side, appended side, the recipe flags left, the note on stderr)
PAIRS = [
    (
        ["--lr", "3e-4"],
        ["--base-lr", "3e-4", "--base-global-batch-size", "64", "--lr-scaling", "sqrt"],
        [],
        "--base-lr, --base-global-batch-size, --lr-scaling from the command line replace the "
        "recipe's --lr",
    ),
    (
        ["--base-lr", "1e-6", "--base-global-batch-size", "1024", "--lr-scaling", "sqrt"],
        ["--lr", "2e-4"],
        [],
        "--lr from the command line replaces the recipe's --base-lr, "
        "--base-global-batch-size, --lr-scaling",
    ),
    (
        ["--critic-lr", "1e-4"],
        ["--critic-base-lr", "1e-4", "--critic-lr-scaling", "sqrt"],
        [],
        "--critic-base-lr, --critic-lr-scaling from the command line replace the recipe's "
        "--critic-lr",
    ),
    (
        ["--critic-base-lr", "1e-4", "--critic-lr-scaling", "sqrt"],
        ["--critic-lr", "2e-4"],
        [],
        "--critic-lr from the command line replaces the recipe's --critic-base-lr, "
        "--critic-lr-scaling",
    ),
    (
        ["--global-batch-size", "128"],
        ["--num-steps-per-rollout", "2"],
        [],
        "--num-steps-per-rollout from the command line replaces the recipe's --global-batch-size",
    ),
    (
        ["--num-steps-per-rollout", "2"],
        ["--global-batch-size", "32"],
        [],
        "--global-batch-size from the command line replaces the recipe's --num-steps-per-rollout",
    ),
    (
        ["--rm-type", "math"],
        ["--custom-rm-path", "my_rewards:score"],
        [],
        "--custom-rm-path from the command line replaces the recipe's --rm-type",
    ),
    (
        ["--custom-rm-path=my_rewards:score"],
        ["--rm-type", "exact_match"],
        [],
        "--rm-type from the command line replaces the recipe's --custom-rm-path",
    ),
]
KEPT = ["--seed", "7", "--no-progress", "--eval-prompt-data", "a", "a.jsonl", "b", "b.jsonl"]


@pytest.mark.parametrize(
    "recipe_side, appended, left, note", PAIRS, ids=[" vs ".join((p[0][0], p[1][0])) for p in PAIRS]
)
def test_an_appended_flag_replaces_the_recipes_flag_of_an_exclusive_pair(
    recipe_side, appended, left, note
):
    argv, notes = appended_wins([*KEPT[:2], *recipe_side, *KEPT[2:], "--", *appended])
    assert argv == [*KEPT, *left, *appended]  # the recipe's other flags stay, in order
    assert notes == [note]


def test_without_the_marker_or_a_conflict_nothing_changes():
    argv = ["--lr", "3e-4", "--seed", "1"]
    assert appended_wins(argv) == (argv, [])
    # same side of a pair: argparse's last-one-wins does it, no note
    assert appended_wins(["--lr", "3e-4", "--", "--lr", "1e-4"]) == (
        ["--lr", "3e-4", "--lr", "1e-4"],
        [],
    )
    # changing the scaling rule keeps the recipe's reference rate
    assert appended_wins(["--base-lr", "1e-6", "--", "--lr-scaling", "linear"])[1] == []


def test_the_issue_repro_resolves_to_the_appended_rule():
    """recipes/tiny/grpo.sh sets --lr 3e-4; appending the scaling rule used to stop with
    '--lr=0.0003: given together with --base-lr=0.0003'."""
    cfg = load(
        [
            "--lr",
            "3e-4",
            "--global-batch-size",
            "128",
            "--run-dir",
            "/tmp/never-made",
            "--",
            "--base-lr",
            "3e-4",
            "--base-global-batch-size",
            "64",
            "--lr-scaling",
            "sqrt",
        ],
        1,
    )
    assert cfg.base_lr == 3e-4 and cfg.lr == pytest.approx(3e-4 * (128 / 64) ** 0.5)


@pytest.mark.parametrize(
    "mine",
    [
        ["--lr", "1e-4", "--base-lr", "1e-4"],
        ["--critic-lr", "1e-4", "--critic-base-lr", "1e-4", "--advantage-estimator", "gae"],
    ],
)
def test_two_conflicting_flags_given_by_the_user_are_refused_naming_both(mine):
    with pytest.raises(ConfigError) as info:
        load(["--seed", "1", "--run-dir", "/tmp/never-made", "--", *mine], 1)
    first, second = mine[0], mine[2]
    assert info.value.flag == first and second in str(info.value)


def test_the_user_giving_disagreeing_batch_and_steps_is_refused_naming_both():
    with pytest.raises(ConfigError) as info:
        load(
            [
                "--run-dir",
                "/tmp/never-made",
                "--",
                "--global-batch-size",
                "64",
                "--num-steps-per-rollout",
                "4",
            ],
            1,
        )
    assert info.value.flag == "--num-steps-per-rollout" and "--global-batch-size" in str(info.value)


def test_a_second_marker_is_refused():
    with pytest.raises(ConfigError, match="given twice"):
        appended_wins(["--seed", "1", "--", "--lr", "1", "--", "--seed", "2"])


def _dry_run(recipe: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "NNODES", "RANK")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        ["bash", str(recipe), *flags, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_every_shipped_recipe_passes_its_flags_before_the_marker():
    recipes = training_recipes()
    assert len(recipes) >= 5
    for recipe in recipes:
        assert '-- "$@"' in recipe.read_text(), recipe


@pytest.mark.parametrize(
    "recipe, flags, expected_lr, note",
    [
        (
            "recipes/tiny/grpo.sh",
            ("--base-lr", "3e-4", "--base-global-batch-size", "64", "--lr-scaling", "sqrt"),
            3e-4 * 2**0.5,
            "replace the recipe's --lr",
        ),
        (
            "recipes/qwen3_30b_a3b/grpo.sh",
            ("--lr", "2e-6"),
            2e-6,
            "--lr from the command line replaces the recipe's --base-lr",
        ),
    ],
    ids=["tiny grpo: a scaling rule", "30B grpo: a fixed rate"],
)
def test_a_recipe_takes_the_appended_side_of_the_lr_pair(recipe, flags, expected_lr, note):
    proc = _dry_run(ROOT / recipe, *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    resolved = json.loads(proc.stdout)
    config = resolved.get("config", resolved)
    assert config["lr"] == pytest.approx(expected_lr)
    assert note in proc.stderr
