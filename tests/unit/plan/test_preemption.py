"""The preemption lead time (hyrl/plan/preemption.py, hyrl/plan/template_check.py): Slurm's
--signal and time formats read by hand, launch/sbatch.template's lead against the plan's
step + save estimate on both sides of the decision, and the shipped template against the
shipped 30B recipes."""

import json
import re

import pytest
from testpaths import ROOT

from hyrl import plan as hplan
from hyrl.plan import template_check
from hyrl.plan.preemption import (
    TEMPLATE,
    lead_problems,
    signal_lead_s,
    slurm_time_s,
    template_lead,
)

RECIPES = ROOT / "recipes" / "qwen3_30b_a3b"
STEP = {"step_s": 611.3, "save_s": 106.9, "margin": 0.25, "lead_s": 898}


@pytest.mark.parametrize(
    "spec, seconds",
    [("B:USR1@300", 300), ("USR1@1800", 1800), ("R:10@90", 90), ("B:USR1", 60), ("10", 60)],
)
def test_signal_lead_is_the_time_after_at_and_slurms_60_s_without_one(spec, seconds):
    assert signal_lead_s(spec) == seconds


def test_a_signal_time_that_is_not_whole_seconds_is_refused():
    with pytest.raises(ValueError, match="B:USR1@5m"):
        signal_lead_s("B:USR1@5m")


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("20", 1200),  # minutes
        ("20:00", 1200),  # minutes:seconds
        ("1:00:00", 3600),
        ("2-00:00:00", 172800),
        ("1-2", 93600),  # days-hours
        ("1-2:3", 93780),  # days-hours:minutes
        ("UNLIMITED", None),
        ("", None),
    ],
)
def test_slurm_time_limits_by_hand(text, seconds):
    assert slurm_time_s(text) == seconds


def test_sbatch_signal_wins_over_the_scripts_line_and_the_last_line_counts(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --signal=B:USR1@300\n#SBATCH --signal=B:USR1@700\n")
    assert template_lead({}, script) == {"seconds": 700, "source": "#SBATCH --signal=B:USR1@700"}
    env = {"SBATCH_SIGNAL": "B:USR1@1200"}
    assert template_lead(env, script) == {"seconds": 1200, "source": "SBATCH_SIGNAL=B:USR1@1200"}
    script.write_text("#!/bin/bash\n#SBATCH --time=10\n")
    assert template_lead({}, script)["seconds"] is None


def test_a_lead_shorter_than_step_plus_save_is_refused_naming_setting_value_and_need():
    (problem,) = lead_problems(STEP, {"seconds": 897, "source": "SBATCH_SIGNAL=B:USR1@897"})
    assert problem.startswith("SBATCH_SIGNAL=B:USR1@897: a preemption lead time of 897 s is ")
    assert "shorter than the 898 s one rollout step and one save need" in problem
    assert "(step 611 s + save 107 s) x 1.25 margin" in problem
    assert "allowed: SBATCH_SIGNAL=B:USR1@898 or longer" in problem
    assert lead_problems(STEP, {"seconds": 898, "source": "x"}) == []


def test_a_lead_not_shorter_than_the_time_limit_or_no_lead_is_refused():
    lead = {"seconds": 1800, "source": "#SBATCH --signal=B:USR1@1800"}
    assert lead_problems(STEP, lead, time_limit_s=1801) == []
    (problem,) = lead_problems(STEP, lead, time_limit_s=1200)
    assert "not shorter than the job's time limit of 1200 s (--time)" in problem
    (problem,) = lead_problems(STEP, {"seconds": None, "source": "job.sh asks no --signal"})
    assert "without a warning" in problem and "N >= 898 s" in problem


def _recipe_plan(capsys, recipe: str) -> dict:
    assert hplan.main(["--json", str(RECIPES / recipe)]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_shipped_template_covers_the_30b_recipes_and_states_their_estimates(
    capsys, monkeypatch
):
    monkeypatch.delenv("SBATCH_SIGNAL", raising=False)
    lead = template_lead({}, TEMPLATE)
    assert lead["source"] == f"#SBATCH --signal=B:USR1@{lead['seconds']}"
    comment = TEMPLATE.read_text()
    stated = re.search(r"grpo\.sh ([\d,]+) s, ppo\.sh ([\d,]+) s", comment)
    assert stated, "the template's comment states the recipes' estimates"
    for recipe, text in zip(("grpo.sh", "ppo.sh"), stated.groups()):
        plan = _recipe_plan(capsys, recipe)
        needed = plan["step_time"]["lead_s"]
        assert int(text.replace(",", "")) == needed, recipe
        assert lead["seconds"] >= needed, recipe
        assert plan["template_lead"] == lead


def test_hyrl_plan_prints_the_step_save_and_lead_lines_of_the_30b_grpo_recipe(capsys, monkeypatch):
    monkeypatch.delenv("SBATCH_SIGNAL", raising=False)
    assert hplan.main([str(RECIPES / "grpo.sh")]) == 0
    out = capsys.readouterr().out
    assert "\n  step time: 611 s predicted for the longest rollout step (an estimate" in out
    assert "\n  save time: 107 s predicted for one checkpoint (an estimate)" in out
    assert (
        "\n  preemption lead: needs >= 898 s = (step 611 s + save 107 s) x 1.25 margin (an "
        "estimate); launch/sbatch.template gives 1,800 s (#SBATCH --signal=B:USR1@1800): enough"
    ) in out
    assert "\n  host RAM per node: at least 203.7 GiB pinned for --offload-train" in out
    assert "up to 407.4 GiB (torch's caching host allocator rounds" in out


def test_hyrl_plan_reads_sbatch_signal_and_the_throughput_options(capsys, monkeypatch):
    monkeypatch.setenv("SBATCH_SIGNAL", "B:USR1@300")
    argv = [str(RECIPES / "grpo.sh"), "--decode-tokens-per-s-per-gpu", "2000", "--mfu=0.4"]
    assert hplan.main(argv) == 0
    out = capsys.readouterr().out
    assert "x 2000 tokens/s each, assumed)" in out and "MFU 0.4, assumed)" in out
    assert "gives 300 s (SBATCH_SIGNAL=B:USR1@300): too short: the template refuses" in out


@pytest.mark.parametrize(
    "option, message",
    [
        ("--mfu=1.5", "--mfu=1.5: a utilisation is at most 1"),
        ("--fs-write-gb-s=0", "--fs-write-gb-s=0: must be a finite number > 0"),
        ("--peak-tflops=fast", "--peak-tflops=fast: not a number"),
    ],
)
def test_a_bad_throughput_option_is_refused(capsys, option, message):
    assert hplan.main([str(RECIPES / "grpo.sh"), option]) == 2
    assert message in capsys.readouterr().err


def _resolved(tmp_path, recipe: str) -> str:
    """The recipe's dry-run JSON in a file, as launch/sbatch.template hands it over."""
    path = tmp_path / "resolved.json"
    path.write_text(json.dumps(hplan.recipe_dry_run(str(RECIPES / recipe), [])))
    return str(path)


def test_the_template_check_passes_a_long_lead_and_refuses_a_short_one(
    tmp_path, capsys, monkeypatch
):
    resolved = _resolved(tmp_path, "grpo.sh")
    monkeypatch.delenv("SBATCH_SIGNAL", raising=False)
    assert template_check.main([resolved, str(TEMPLATE), "--time-limit", "2-00:00:00"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("+ preemption lead 1800 s (#SBATCH --signal=B:USR1@1800) >= 898 s")
    monkeypatch.setenv("SBATCH_SIGNAL", "B:USR1@300")
    assert template_check.main([resolved, str(TEMPLATE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("launch/sbatch.template: error: SBATCH_SIGNAL=B:USR1@300: a preemption")
    # faster assumed throughputs shorten the need below the lead: then it starts
    faster = ["--decode-tokens-per-s-per-gpu", "8000", "--fs-write-gb-s", "20"]
    assert template_check.main([resolved, str(TEMPLATE), *faster]) == 0
    monkeypatch.delenv("SBATCH_SIGNAL")
    assert template_check.main([resolved, str(TEMPLATE), "--time-limit", "20:00"]) == 2
    assert "time limit of 1200 s" in capsys.readouterr().err
