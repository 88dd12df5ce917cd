"""tools/bench.py (`make bench`): the .venv-bench pins and the one table, from given results.
No venv is built and nothing is trained here."""

import importlib.util
import re
import sys

import pytest
from testpaths import ROOT
from trl_runs import comparison_run


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load("bench")
bench_floor = _load("bench_floor")
bench_vs_trl = sys.modules["bench_vs_trl"]  # imported by bench_floor

REQUIREMENTS = """\
# a comment
--extra-index-url https://example.org/simple
torch==2.13.0+cpu
megatron-core==0.16.1
transformers==5.24.0
tokenizers==0.23.3
safetensors==0.8.0
numpy==2.4.6
ray[default]==2.60.0
rich==15.0.0
psutil==7.2.2  # why it is here
"""
PYPROJECT = """\
[project]
name = "x"
[project.optional-dependencies]
bench = ["trl==1.16.0"]
"""


def test_pins_come_from_requirements_and_the_bench_extra():
    assert bench.bench_requirements(REQUIREMENTS, PYPROJECT) == [
        "--extra-index-url",
        "https://example.org/simple",
        "torch==2.13.0+cpu",
        "transformers==5.24.0",
        "tokenizers==0.23.3",
        "safetensors==0.8.0",
        "numpy==2.4.6",
        "rich==15.0.0",
        "psutil==7.2.2",
        "trl==1.16.0",
    ]


def test_a_missing_pin_or_extra_is_named():
    with pytest.raises(ValueError, match="pins no rich"):
        bench.bench_requirements(REQUIREMENTS.replace("rich==15.0.0\n", ""), PYPROJECT)
    with pytest.raises(ValueError, match="bench"):
        bench.bench_requirements(REQUIREMENTS, '[project]\nname = "x"\n')


def test_requirement_names_are_normalised():
    assert bench.requirement_name("ray[default]==2.60.0") == "ray"
    assert bench.requirement_name("Megatron_Core>=0.16") == "megatron-core"
    assert bench.requirement_name("torch==2.13.0+cpu") == "torch"


def test_the_repositorys_pins_are_the_ones_bench_vs_trl_documents():
    pins = bench.bench_requirements(
        (ROOT / "requirements-cpu.txt").read_text(), (ROOT / "pyproject.toml").read_text()
    )
    documented = re.findall(r"'?([A-Za-z0-9_.-]+==[^\s']+)'?", bench_vs_trl.SETUP_HINT)
    assert sorted(p for p in pins if "==" in p) == sorted(documented)
    assert "torch==2.13.0+cpu" in pins  # the +cpu local version: never the CUDA wheel


def _vs_trl_report():
    return bench_vs_trl.build_report(
        seeds=[1, 2],
        runs=[
            comparison_run("hyrl", 1, 10.0, 1000.0),
            comparison_run("trl", 1, 40.0, 250.0),
            comparison_run("hyrl", 2, None, 1000.0),
            comparison_run("trl", 2, 30.0, 500.0),
        ],
        machine={},
        settings=bench_vs_trl.GrpoSettings(),
        target=0.7,
        window=10,
        max_steps=800,
        threads=1,
        command="c",
    )


def _floor_report():
    def run(side, step_s, last):
        return {
            "side": side,
            "repeat": 0,
            "steps": 300,
            "step_s": step_s,
            "stage_s": {},
            "cpu_s": 0.060 if side == "hyrl" else 0.040,
            "reward_first_10pct": 0.02,
            "reward_last_10pct": last,
            "load_average_1min": 1.0 if side == "hyrl" else 3.0,
        }

    return bench_floor.build_report(
        [run("hyrl", 0.072, 0.61), run("floor", 0.048, 0.55)], machine="m", settings={}, command="c"
    )


def test_table_has_one_row_per_metric_with_its_command():
    results = {
        "vs_trl": _vs_trl_report(),
        "floor": _floor_report(),
        "overhead": {"median_share": {"actor_train": 0.8, "rollout": 0.15, "overhead": 0.05}},
    }
    commands = {"vs_trl": "A", "floor": "B", "overhead": "C"}
    rows = {
        metric: (value, command) for metric, value, command in bench.table_rows(results, commands)
    }
    time_row = next(m for m in rows if m.startswith("time to train/reward_mean >= 0.7"))
    # seed 2's hyrl run did not reach the target: one ratio, 10 / 40
    # seed 2, which only TRL reached, is hyrl's loss: the median of 0.25 and inf is inf
    assert rows[time_row] == (
        "inf (min 0.25x, max inf, 2 seeds); inf: hyrl did not reach the target in --max-steps",
        "A",
    )
    assert rows["time to target, hyrl (per seed)"][0] == "10.0 s, not reached (1/2 reached)"
    assert rows["responses per second, hyrl / TRL"][0].startswith("3.00x (min 2.00x, max 4.00x")
    assert rows["step time, hyrl tiny recipe (median)"] == ("72.0 ms", "B")
    assert rows["step time, plain-PyTorch floor (median)"][0] == "48.0 ms"
    assert rows["step time, hyrl / floor"][0] == "1.50x (per repeat: 1.50x); load average 1.0-3.0"
    assert rows["CPU time per step (process tree), hyrl / floor"][0] == "1.50x (60.0 ms / 40.0 ms)"
    assert rows["reward, first -> last 10% of steps: hyrl | floor"][0] == (
        "0.02 -> 0.61 | 0.02 -> 0.55"
    )
    assert rows["hyrl step time outside every timed stage (perf/overhead_s)"] == (
        "5.0% of the step",
        "C",
    )
    assert (
        rows["hyrl step by stage (median shares)"][0] == "actor_train 80%, rollout 15%, overhead 5%"
    )
    table = bench.render_table(bench.table_rows(results, commands), ["# title"])
    assert table.startswith("# title\n\n| metric | value | command |\n|---|---|---|\n")
    assert "\\|" in table  # a "|" inside a cell is escaped, the row keeps three cells


def test_a_failed_part_is_a_row_and_a_part_not_run_is_absent():
    rows = bench.table_rows({"floor": {"error": "RuntimeError: hyrl exited\nmore"}}, {"floor": "B"})
    assert rows == [("floor: failed", "RuntimeError: hyrl exited", "B")]


@pytest.mark.parametrize(
    "flags", [["--parts", "floor,nope"], ["--parts", ""], ["--seeds", "0"], ["--threads", "0"]]
)
def test_bad_flags_are_refused(flags, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(flags)
    assert "allowed" in capsys.readouterr().err


def test_parts_are_read_in_order():
    assert bench.parse_args(["--parts", "overhead, floor"]).parts == ["overhead", "floor"]
    assert bench.parse_args([]).parts == ["vs_trl", "floor", "overhead"]
