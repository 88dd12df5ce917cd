"""A dry run (`hyrl train --dry-run`, `hyrl plan -- FLAGS`) plans a run from any machine: the
data, tokenizer and checkpoint files it names need not exist there, and it says in one line which
it did not check. A run still refuses a missing one before it starts."""

from __future__ import annotations

import pytest

import hyrl.plan.cli
import hyrl.train.cli
from hyrl.config import ConfigError, load

FLAGS = [
    "--prompt-data",
    "/nowhere/prompts.jsonl",
    "--rm-type",
    "math",
    "--eval-prompt-data",
    "aime",
    "/nowhere/aime.jsonl",
    "--hf-checkpoint",
    "/nowhere/Qwen3-30B-A3B",
    "--rollout-max-response-len",
    "16",
]
NOT_CHECKED = (
    "--prompt-data /nowhere/prompts.jsonl, --eval-prompt-data /nowhere/aime.jsonl, "
    "--hf-checkpoint /nowhere/Qwen3-30B-A3B"
)


@pytest.fixture(autouse=True)
def fresh_dir(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # hyrl's default --run-dir, runs/latest, is relative
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)


def test_a_dry_run_needs_no_files_and_names_them_while_a_run_refuses_them(capsys):
    assert hyrl.train.cli.main([*FLAGS, "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert f"hyrl train: not checked under --dry-run: {NOT_CHECKED}\n" in err
    with pytest.raises(ConfigError, match="does not exist"):
        load(FLAGS, 1)
    assert hyrl.train.cli.main(FLAGS) == 2
    assert "--prompt-data=/nowhere/prompts.jsonl" in capsys.readouterr().err
    # what the paths say is still checked: a prompt file is .jsonl or .parquet
    assert hyrl.train.cli.main([*FLAGS, "--prompt-data", "/nowhere/p.txt", "--dry-run"]) == 2
    assert "is not a .jsonl or .parquet file" in capsys.readouterr().err


def test_hyrl_plan_of_flags_needs_no_files_either(capsys):
    assert hyrl.plan.cli.main(["--", *FLAGS]) == 0
    out, err = capsys.readouterr()
    assert "hyrl plan: world size 1" in out
    assert err == f"hyrl plan: not checked: {NOT_CHECKED}\n"
