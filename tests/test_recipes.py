"""Every runnable recipe plans at its intended world size through `hyrl plan RECIPE`; an
impossible edit exits non-zero naming the flag."""

import json
from pathlib import Path

import pytest

from hyrl import plan as hplan

ROOT = Path(__file__).resolve().parents[1]
# Runnable recipes: scripts with a shebang (model.sh, data.sh are sourced fragments); sweep
# scripts run `hyrl sweep`, which has no dry run of its own.
RECIPES = sorted(p for p in ROOT.glob("recipes/*/*.sh")
                 if p.read_text().startswith("#!") and not p.name.startswith("sweep"))
QWEN_GRPO = ROOT / "recipes/qwen3_30b_a3b/grpo.sh"


@pytest.fixture(autouse=True)
def _clean_layout_env(monkeypatch):
    for name in ("NNODES", "NPROC", "GPUS_PER_NODE", "GPU_MEMORY_GIB", "ROLLOUT_NODES",
                 "SLURM_JOB_ID", "DATA", "HF_CHECKPOINT", "EVAL_DATA", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def test_recipes_are_found():
    names = {f"{p.parent.name}/{p.name}" for p in RECIPES}
    assert {"tiny/grpo.sh", "tiny/ppo.sh", "qwen3_30b_a3b/grpo.sh",
            "qwen3_30b_a3b/ppo.sh"} <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recipe_plans_at_its_intended_world_size(recipe, capsys):
    assert hplan.main([str(recipe)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "layout  TP=" in out and "memory per GPU (GiB)" in out and "training peak" in out
    print(out)  # the table, for `pytest -s`


def test_qwen3_recipes_state_their_layout_and_fit():
    grpo = json.loads(_plan_json(QWEN_GRPO))
    assert grpo["world_size"] == 16  # NNODES 2 x GPUS_PER_NODE 8
    assert grpo["gpus"]["total"] == 16 and grpo["gpus"]["colocated"]
    assert grpo["problems"] == [] and grpo["gpu_memory_gib"] == 80
    ppo = json.loads(_plan_json(ROOT / "recipes/qwen3_30b_a3b/ppo.sh"))
    assert ppo["world_size"] == 32
    assert (ppo["gpus"]["rollout"], ppo["gpus"]["nodes"]) == (8, 5)
    assert ppo["problems"] == []


def _plan_json(recipe: Path, *extra: str) -> str:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert hplan.main([str(recipe), "--json", *extra]) == 0
    return buffer.getvalue()


def test_tiny_recipe_plans_the_world_size_of_nproc(monkeypatch):
    monkeypatch.setenv("NPROC", "2")
    plan = json.loads(_plan_json(ROOT / "recipes/tiny/grpo.sh", "--",
                                 "--expert-model-parallel-size", "2"))
    assert plan["world_size"] == 2 and plan["layout"]["ep"] == 2


def test_an_expert_split_the_model_refuses_names_the_flag(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--expert-model-parallel-size", "3"]) == 2
    assert "--expert-model-parallel-size=3" in capsys.readouterr().err


def test_tp_across_nodes_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("GPUS_PER_NODE", "2")
    monkeypatch.setenv("NNODES", "8")  # the same 16 GPUs as 8 nodes of 2
    assert hplan.main([str(QWEN_GRPO)]) == 1
    assert "--tensor-model-parallel-size=4" in capsys.readouterr().err


def test_a_layout_that_does_not_fit_names_the_flags(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--expert-model-parallel-size", "2"]) == 1
    err = capsys.readouterr().err
    assert "--gpu-memory-gib" in err and "--use-distributed-optimizer" in err


def test_more_rollout_gpus_than_the_colocated_world_is_refused(capsys):
    assert hplan.main([str(QWEN_GRPO), "--", "--rollout-num-gpus", "24"]) == 2
    assert "--rollout-num-gpus=24" in capsys.readouterr().err
