"""Specification of the length checks: a prompt and its response fit --max-position-embeddings,
--max-tokens-per-gpu holds the longest sequence, and an evaluation's response fits beside the
prompts kept. Each is refused by validation (so also by `hyrl train --dry-run`), before anything
starts, naming the flag, the values it was checked against and what would fit."""

from __future__ import annotations

import pytest

from hyrl.config import ConfigError, parse_args, resolve, validate
from hyrl.train.cli import main as train_main


@pytest.fixture
def prompt_data(tmp_path) -> tuple[str, ...]:
    """The flags of a --prompt-data task whose files exist (a one-prompt file, a tokenizer
    directory) and the max positions 64: only the lengths are left to check."""
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    return (
        *("--run-dir", str(tmp_path / "run"), "--prompt-data", str(data)),
        *("--tokenizer-path", str(tmp_path), "--rm-type", "math"),
        *("--max-position-embeddings", "64"),
    )


@pytest.fixture
def arith(tmp_path) -> tuple[str, ...]:
    """The built-in arithmetic task (5-token prompts) with max positions 64."""
    return ("--run-dir", str(tmp_path / "run"), "--max-position-embeddings", "64")


@pytest.fixture
def held_out(prompt_data) -> tuple[str, ...]:
    """prompt_data, evaluated every step on a held-out set (the same file)."""
    return (*prompt_data, "--eval-interval", "1", "--eval-prompt-data", "held", prompt_data[3])


def refused(argv: tuple[str, ...], world_size: int = 1) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(parse_args(list(argv)), world_size)
    return info.value


@pytest.mark.parametrize(
    ("task", "extra", "flag", "value", "problem", "allowed"),
    [
        # a --prompt-data prompt needs at least one position: 64 - 100 left -36 for it (the
        # ranks then died in hyrl.data.prompt_data: "max_prompt_len must be >= 1 token, got -36")
        (
            "prompt_data",
            ("--rollout-max-response-len", "100"),
            "--rollout-max-response-len",
            100,
            ["--max-position-embeddings=64", "at least 1 token"],
            ["at most 63", "--max-position-embeddings - 1"],
        ),
        (
            "prompt_data",
            ("--rollout-max-response-len", "64"),
            "--rollout-max-response-len",
            64,
            ["--max-position-embeddings=64"],
            ["at most 63"],
        ),
        (
            "prompt_data",
            ("--rollout-max-response-len", "16", "--rollout-max-prompt-len", "49"),
            "--rollout-max-prompt-len",
            49,
            ["--rollout-max-response-len=16", "--max-position-embeddings=64"],
            ["at most 48", "--max-position-embeddings - --rollout-max-response-len"],
        ),
        # 5 + 60 = 65 > 64
        (
            "arith",
            ("--rollout-max-response-len", "60"),
            "--rollout-max-response-len",
            60,
            ["5-token prompt", "--max-position-embeddings=64"],
            ["at most 59", "--max-position-embeddings - 5"],
        ),
    ],
)
def test_a_prompt_and_its_response_must_fit_the_positions(
    request, task, extra, flag, value, problem, allowed
):
    err = refused((*request.getfixturevalue(task), *extra))
    assert (err.flag, err.value) == (flag, value), str(err)
    for text in problem:
        assert text in err.problem, str(err)
    for text in allowed:
        assert text in err.allowed, str(err)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_rollout_max_prompt_len_must_be_a_positive_token_count(prompt_data, value):
    err = refused((*prompt_data, "--rollout-max-prompt-len", value))
    assert (err.flag, err.value) == ("--rollout-max-prompt-len", int(value))
    assert err.allowed == "an integer >= 1"


@pytest.mark.parametrize(
    ("task", "extra", "problem", "allowed"),
    [
        # the kept prompts fill what the response leaves: 48 + 16 = 64 > 40
        (
            "prompt_data",
            ("--rollout-max-response-len", "16"),
            [
                "a prompt of up to 48 tokens",
                "--max-position-embeddings=64",
                "--rollout-max-response-len=16 = 64 tokens",
            ],
            ["at least 64", "--rollout-max-prompt-len at most 24"],
        ),
        # 40 + 16 = 56 > 40
        (
            "prompt_data",
            ("--rollout-max-response-len", "16", "--rollout-max-prompt-len", "40"),
            ["--rollout-max-prompt-len=40 + --rollout-max-response-len=16 = 56 tokens"],
            ["at least 56", "--rollout-max-prompt-len at most 24"],
        ),
        # 5 + 36 = 41 > 40
        (
            "arith",
            ("--rollout-max-response-len", "36"),
            ["5-token arithmetic prompt + --rollout-max-response-len=36 = 41 tokens"],
            ["at least 41"],
        ),
    ],
)
def test_max_tokens_per_gpu_must_hold_the_longest_sequence_and_names_what_makes_it(
    request, task, extra, problem, allowed
):
    budget = ("--use-dynamic-batch-size", "--max-tokens-per-gpu", "40")
    err = refused((*request.getfixturevalue(task), *extra, *budget))
    assert (err.flag, err.value) == ("--max-tokens-per-gpu", 40), str(err)
    for text in problem:
        assert text in err.problem, str(err)
    for text in allowed:
        assert text in err.allowed, str(err)


def test_max_tokens_per_gpu_counts_the_longest_sequence_padded_to_a_multiple_of_tp(arith):
    """Under TP 2 a row of 5 + 2 = 7 tokens is padded to 8 (sequence parallel splits it), and
    hyrl.algorithms.batch.token_budget_ranges refuses a row whose padded length exceeds it."""
    tp2 = (*arith, "--tensor-model-parallel-size", "2", "--sequence-parallel")
    tp2 = (*tp2, "--rollout-max-response-len", "2", "--use-dynamic-batch-size")
    err = refused((*tp2, "--max-tokens-per-gpu", "7"), world_size=2)
    assert (err.flag, err.value) == ("--max-tokens-per-gpu", 7), str(err)
    assert "= 7 tokens, padded to 8" in err.problem
    assert "--tensor-model-parallel-size=2" in err.problem
    assert err.allowed == "at least 8"
    validate(parse_args([*tp2, "--max-tokens-per-gpu", "8"]), 2)


def test_an_evaluation_response_beside_the_kept_prompts_names_the_values_and_the_fix(held_out):
    """Prompts of up to 64 - 16 = 48 tokens are kept; 48 + 20 > 64."""
    err = refused((*held_out, "--rollout-max-response-len", "16", "--eval-max-response-len", "20"))
    assert (err.flag, err.value) == ("--eval-max-response-len", 20), str(err)
    assert "a prompt of up to 48 tokens" in err.problem
    assert "--max-position-embeddings=64 - --rollout-max-response-len=16" in err.problem
    assert "at most 16" in err.allowed
    assert "--rollout-max-prompt-len at most 44" in err.allowed  # 44 + 20 = 64


def test_a_response_too_long_for_any_prompt_is_named_before_the_evaluation_length(held_out):
    """The evaluation check once spoke of 'a prompt of up to -36 tokens'."""
    err = refused((*held_out, "--rollout-max-response-len", "100", "--eval-max-response-len", "8"))
    assert (err.flag, err.value) == ("--rollout-max-response-len", 100), str(err)
    assert "at most 63" in err.allowed


def test_a_validated_config_never_reaches_the_loaders_own_length_guard(prompt_data):
    """hyrl.data.prompt_data refuses max_prompt_len < 1 as a last guard: every config that
    validates gives the loader at least one token of prompt, and room for the response."""
    from hyrl.rollout.manager import max_prompt_len

    validated = []
    for response in (1, 16, 63, 64, 100):
        for prompt in (None, 1, 48, 49, 64):
            argv = [*prompt_data, "--rollout-max-response-len", str(response)]
            if prompt is not None:
                argv += ["--rollout-max-prompt-len", str(prompt)]
            cfg = parse_args(argv)
            try:
                validate(cfg, 1)
            except ConfigError:
                continue
            resolved = resolve(cfg)
            longest = max_prompt_len(resolved.data, resolved.model, resolved.rollout)
            validated.append((response, prompt, longest))
    assert [v for v in validated if not (1 <= v[2] and v[2] + v[0] <= 64)] == []
    assert len(validated) == 4 + 3 + 2  # responses 1, 16, 63: none, or a prompt that fits


def test_hyrl_train_dry_run_refuses_a_response_that_leaves_no_room_for_a_prompt(
    prompt_data, capsys
):
    """`hyrl train --dry-run` starts nothing and validates as the ranks do: it exits 2 naming
    the flag, where it once printed the configuration and the ranks crashed."""
    assert train_main(["--dry-run", *prompt_data, "--rollout-max-response-len", "100"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "hyrl train: error: --rollout-max-response-len=100:" in out.err
    assert "--max-position-embeddings=64" in out.err and "at most 63" in out.err
    assert train_main(["--dry-run", *prompt_data, "--rollout-max-response-len", "63"]) == 0
