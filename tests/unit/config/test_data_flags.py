"""The task and its data (hyrl.config.concerns.data): --prompt-data sets the task and needs a
tokenizer and a reward; data flags under the built-in task are refused; --eval-prompt-data takes
NAME FILE pairs; the built-in arithmetic task bounds --task-max-operand, the response length
(against the position embeddings) and the vocabulary; and --task-eval-fraction must leave
prompts both for training and for evaluation."""

from __future__ import annotations

import pytest
from config_errors import assert_rejected, rejected

from hyrl.config import resolve, validate


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"prompt": "1+1=", "label": "2"}\n')
    return str(path)


def test_prompt_data_sets_the_task_and_needs_a_tokenizer_and_a_reward(cfg_of, data_file, tmp_path):
    tok = str(tmp_path)
    resolved = resolve(
        cfg_of("--prompt-data", data_file, "--tokenizer-path", tok, "--rm-type", "math")
    )
    assert resolved.task == "prompt_data" and resolved.rm_type == "math"
    assert resolve(cfg_of()).task == "arith_mod10" and resolve(cfg_of()).rm_type == "exact_match"
    assert_rejected(
        cfg_of("--prompt-data", data_file, "--rm-type", "math"), "--tokenizer-path", "none"
    )
    assert_rejected(
        cfg_of("--prompt-data", data_file, "--tokenizer-path", tok), "--rm-type", "none"
    )
    assert_rejected(cfg_of("--task", "prompt_data"), "--task", "prompt_data")
    assert_rejected(
        cfg_of(
            "--prompt-data", str(tmp_path / "x.csv"), "--tokenizer-path", tok, "--rm-type", "math"
        ),
        "--prompt-data",
        str(tmp_path / "x.csv"),
    )
    assert_rejected(
        cfg_of("--rm-type", "math", "--custom-rm-path", "m:f"), "--custom-rm-path", "m:f"
    )
    assert_rejected(cfg_of("--custom-rm-path", "nocolon"), "--custom-rm-path", "nocolon")
    # data flags under the built-in task are refused, not ignored
    assert_rejected(cfg_of("--apply-chat-template"), "--apply-chat-template", True)


def test_eval_prompt_data_takes_name_file_pairs(cfg_of, data_file, tmp_path):
    base = ("--prompt-data", data_file, "--tokenizer-path", str(tmp_path), "--rm-type", "math")
    cfg = cfg_of(*base, "--eval-prompt-data", "aime", data_file, "gpqa", data_file)
    validate(cfg, 1)
    assert cfg.eval_prompt_data == ["aime", data_file, "gpqa", data_file]
    err = assert_rejected(cfg_of(*base, "--eval-prompt-data", "aime"), "--eval-prompt-data", "aime")
    assert "pair" in str(err)
    assert "twice" in str(
        rejected(cfg_of(*base, "--eval-prompt-data", "a", data_file, "a", data_file))
    )
    assert "is not a name" in str(rejected(cfg_of(*base, "--eval-prompt-data", data_file, "a")))


@pytest.mark.parametrize("operand", [0, 10])
def test_task_max_operand_outside_single_digits_is_rejected(cfg_of, operand):
    assert_rejected(cfg_of("--task-max-operand", str(operand)), "--task-max-operand", operand)


def test_response_longer_than_the_position_embeddings_allow_is_rejected(cfg_of):
    cfg = cfg_of("--max-position-embeddings", "8", "--rollout-max-response-len", "4")
    err = assert_rejected(cfg, "--rollout-max-response-len", 4)
    assert "at most 3" in str(err)
    validate(cfg_of("--max-position-embeddings", "9", "--rollout-max-response-len", "4"), 1)


def test_vocab_smaller_than_the_task_tokenizer_is_rejected(cfg_of):
    assert_rejected(cfg_of("--vocab-size", "8"), "--vocab-size", 8)


def test_task_eval_fraction_must_leave_prompts_for_training_and_evaluation(cfg_of):
    # --task-max-operand 1: 4 prompts; round(0.9 x 4) = 4 held out, none left to train on
    err = assert_rejected(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.9"),
        "--task-eval-fraction",
        0.9,
    )
    assert "4 of the 4 prompts" in str(err) and "0 for training" in str(err)
    # round(0.1 x 4) = 0 held out: nothing to evaluate on
    err = assert_rejected(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.1"),
        "--task-eval-fraction",
        0.1,
    )
    assert "0 of the 4 prompts" in str(err)
    # without evaluation nothing is held out, so any fraction in [0, 1) is fine
    validate(cfg_of("--task-max-operand", "1", "--task-eval-fraction", "0.9"), 1)
    validate(cfg_of("--task-eval-fraction", "0"), 1)
    # 0 with evaluation: evaluate on the training prompts (in-distribution), nothing held out
    validate(cfg_of("--eval-interval", "5", "--task-eval-fraction", "0"), 1)
    validate(
        cfg_of("--eval-interval", "5", "--task-max-operand", "1", "--task-eval-fraction", "0.25"), 1
    )
