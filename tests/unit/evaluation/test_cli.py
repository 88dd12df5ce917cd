"""`hyrl eval`'s command line: hyrl train's flag names, a bare held-out FILE, and every bad input
refused with exit 2 and one message naming the flag, before any process group or model
(tests/e2e/test_eval.py evaluates real checkpoints)."""

from __future__ import annotations

import pytest
from testpaths import DATA

from hyrl.config import ConfigError
from hyrl.evaluation.cli import main, parse_eval_flags
from hyrl.models.qwen3_moe.config import TINY


def test_a_single_eval_prompt_data_value_is_a_file_named_after_it():
    given = parse_eval_flags(["--eval-prompt-data", "sets/aime_2024.jsonl", "--n-samples", "4"])
    assert given == {
        "eval_prompt_data": ["aime_2024", "sets/aime_2024.jsonl"],
        "n_samples_per_eval_prompt": 4,  # --n-samples is --n-samples-per-eval-prompt
    }
    pairs = ["aime", "a.jsonl", "gpqa", "g.parquet"]  # train's own form is kept as given
    assert parse_eval_flags(["--eval-prompt-data", *pairs])["eval_prompt_data"] == pairs
    with pytest.raises(ConfigError, match="a single value is a FILE"):
        parse_eval_flags(["--eval-prompt-data", "aime"])


def test_flags_not_given_are_absent_so_the_run_keeps_its_own():
    assert parse_eval_flags(["--load", "ck"]) == {"load": "ck"}
    assert parse_eval_flags(["--json", "--no-apply-chat-template"]) == {
        "json": True,
        "apply_chat_template": False,
    }


@pytest.fixture
def tiny_hf_dir(tmp_path):
    """A directory with the tiny model's config.json (no weights: refused before they load)."""
    directory = tmp_path / "hf"
    directory.mkdir()
    TINY.to_hf_config().to_json_file(str(directory / "config.json"))
    return directory


def _refusal(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("hyrl eval: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].removeprefix("hyrl eval: error: ")


def test_without_a_model_it_asks_for_load_or_hf_checkpoint(capsys):
    message = _refusal(capsys, ["--n-samples", "4"])
    assert message.startswith("--load: no model to evaluate; allowed: --load CKPT")


def test_a_missing_load_path_and_a_directory_without_a_checkpoint_name_load(capsys, tmp_path):
    missing = tmp_path / "nothing"
    assert _refusal(capsys, ["--load", str(missing)]).startswith(
        f"--load={missing}: no such directory"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _refusal(capsys, ["--load", str(empty)])
    assert message.startswith(f"--load={empty}: neither a checkpoint (trainer_state.json)")


def test_hf_checkpoint_without_a_held_out_set_or_reward_is_refused(capsys, tiny_hf_dir):
    message = _refusal(capsys, ["--hf-checkpoint", str(tiny_hf_dir)])
    assert message.startswith(f"--eval-prompt-data: --hf-checkpoint {tiny_hf_dir} has no run")
    data = str(DATA / "tiny_arith.jsonl")
    message = _refusal(capsys, ["--hf-checkpoint", str(tiny_hf_dir), "--eval-prompt-data", data])
    assert message.startswith("--rm-type: the held-out sets need a reward function")
    missing = tiny_hf_dir.parent / "nothing"
    assert _refusal(capsys, ["--hf-checkpoint", str(missing), "--task", "arith_mod10"]).startswith(
        f"--hf-checkpoint={missing}: no such directory"
    )


def test_hf_checkpoint_without_weights_is_refused_by_the_preflight(capsys, tiny_hf_dir):
    # the model flags come from config.json; the weights are checked against them
    message = _refusal(capsys, ["--hf-checkpoint", str(tiny_hf_dir), "--task", "arith_mod10"])
    assert message.startswith(f"--hf-checkpoint={tiny_hf_dir}: ") and "no weights" in message


def test_load_with_hf_checkpoint_training_flags_and_typos_are_refused(capsys, tiny_hf_dir):
    message = _refusal(capsys, ["--load", "ck", "--hf-checkpoint", str(tiny_hf_dir)])
    assert message.startswith(f"--hf-checkpoint={tiny_hf_dir}: given with --load")
    message = _refusal(capsys, ["--load", "ck", "--lr", "1e-3"])
    assert message.startswith("--lr: a flag of hyrl train that does not change an evaluation")
    message = _refusal(capsys, ["--load", "ck", "--n-sample", "4"])
    assert message.startswith("--n-sample: unknown flag; allowed: did you mean --n-samples")
    message = _refusal(capsys, ["--load", "ck", "--eval-temperature", "hot"])
    assert message.startswith("--eval-temperature=hot: not a number")


def test_help_lists_train_flag_names_and_no_training_flag(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--load", "--hf-checkpoint", "--n-samples-per-eval-prompt INT, --n-samples"):
        assert flag in out
    for flag in ("--eval-prompt-data", "--eval-pass-k", "--seed", "--json", "--out"):
        assert flag in out
    assert "--lr " not in out and "--global-batch-size" not in out
