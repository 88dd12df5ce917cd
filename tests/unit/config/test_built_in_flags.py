"""hyrl.config.foreign.built_in: a slime or Megatron-LM flag whose value asks for what hyrl
always does is accepted with one note and changes nothing; another value, or the flag beside
hyrl flags that make it ask for something else, is refused with the table's answer and what
would be accepted."""

from __future__ import annotations

import re

import pytest

from hyrl.config import ConfigError, build_parser, parse_args
from hyrl.config.foreign import FOREIGN_FLAGS
from hyrl.config.foreign.built_in import BUILT_IN

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")


def refusal(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_args(argv)
    return str(info.value)


@pytest.mark.parametrize(
    "argv",
    [
        ["--swiglu"],
        ["--attention-dropout", "0.0"],
        ["--hidden-dropout=0"],
        ["--moe-aux-loss-coeff", "0"],
        ["--context-parallel-size", "1"],
        ["--optimizer", "adam"],
        ["--rotary-percent", "1"],
        ["--moe-layer-freq", "[1,1,1,1]"],
        ["--moe-layer-freq", "1"],
        ["--moe-router-dtype", "fp32"],
        ["--attention-backend", "auto"],
        ["--rollout-shuffle"],
    ],
)
def test_a_flag_asking_for_what_hyrl_does_is_accepted_and_changes_nothing(argv, capsys):
    assert parse_args(argv) == parse_args([])
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 1 and notes[0].startswith(f"hyrl: {argv[0].split('=')[0]}")
    assert notes[0].endswith("; accepted")


def test_the_note_is_printed_once_however_often_the_flag_is_given(capsys):
    parse_args(["--swiglu", "--lr", "1e-3", "--swiglu", "--optimizer", "adam"])
    assert capsys.readouterr().err.splitlines() == [
        "hyrl: --swiglu: hyrl's Qwen3-MoE always uses SwiGLU; accepted",
        "hyrl: --optimizer adam: hyrl's optimizer is always Adam with decoupled weight decay; "
        "accepted",
    ]


def test_notes_come_from_rank_0_only(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "3")
    parse_args(["--swiglu"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "argv, answer, accepted",
    [
        (
            ["--attention-dropout", "0.1"],
            "hyrl always trains without dropout",
            "--attention-dropout 0",
        ),
        (["--context-parallel-size", "2"], "no context parallelism", "--context-parallel-size 1"),
        (["--optimizer", "sgd"], "always Adam", "--optimizer adam"),
        (["--moe-aux-loss-coeff", "0.01"], "auxiliary loss", "--moe-aux-loss-coeff 0"),
        (
            ["--moe-layer-freq", "[1,0,1,0]"],
            "every hyrl layer is an MoE layer",
            "--moe-layer-freq 1, or a list of 1s",
        ),
        (["--attention-backend", "flash"], "Transformer Engine", "--attention-backend auto"),
        (["--swiglu=true"], "SwiGLU", "--swiglu"),
    ],
)
def test_another_value_is_refused_with_the_hyrl_answer_and_what_is_accepted(argv, answer, accepted):
    text = refusal(argv)
    assert answer in text and f"accepted only as {accepted}" in text


def test_a_flag_accepted_only_beside_hyrl_flags_that_make_it_hyrls(capsys):
    assert parse_args(["--use-kl-loss", "--kl-loss-coef", "0.01"]).kl_loss_coef == 0.01
    assert "hyrl: --use-kl-loss: " in capsys.readouterr().err
    assert "with --kl-loss-coef above 0" in refusal(["--use-kl-loss", "--kl-loss-coef", "0"])
    assert parse_args(["--eval-top-p", "0.9", "--rollout-top-p", "0.9"]).rollout_top_p == 0.9
    assert "equal to --rollout-top-p" in refusal(["--eval-top-p", "0.9"])
    assert parse_args(["--moe-grouped-gemm"]) == parse_args([])
    local = refusal(["--moe-grouped-gemm", "--transformer-impl", "local"])
    assert "without --transformer-impl local" in local


def test_refusals_of_every_kind_are_named_in_one_message(capsys):
    text = refusal(
        ["--swiglu", "--use-kl-loss", "--attention-dropout", "0.1", "--train-iters", "5", "--zzz"]
    )
    assert "4 unknown flags:" in text
    for line in (
        "\n  --attention-dropout 0.1: Megatron-LM's flag; not supported",
        "\n  --train-iters: Megatron-LM's flag; use --num-steps",
        "\n  --zzz: not a hyrl flag",
        "\n  --use-kl-loss: slime's flag; use --kl-loss-coef",
    ):
        assert line in text
    assert "hyrl: --swiglu: " in capsys.readouterr().err


def test_every_accepted_flag_is_in_the_table_and_names_only_flags_that_exist():
    declared = {s for a in build_parser()._actions for s in a.option_strings}
    wrong = []
    for flag, entry in BUILT_IN.items():
        if flag not in FOREIGN_FLAGS:
            wrong.append(f"{flag}: not in FOREIGN_FLAGS, which answers its other values")
        if not entry.wanted.startswith(flag):
            wrong.append(f"{flag}: wanted {entry.wanted!r} does not start with the flag")
        if entry.note.endswith(".") or ". " in entry.note:
            wrong.append(f"{flag}: the note is more than one sentence: {entry.note}")
        for named in FLAG.findall(entry.note + " " + entry.wanted):
            if named != flag and named not in declared:
                wrong.append(f"{flag}: names {named}, which hyrl train does not declare")
    assert wrong == []
