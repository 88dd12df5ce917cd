"""`--sglang-NAME VALUE...` pass-through with SGLang's arity (hyrl.config.foreign.sglang, checked
against SGLang 0.5.23's own parser in tests/contract/test_sglang_flag_arity.py), and a stray
argument named with the flag it follows and what to write instead, listed beside the unknown
flags rather than hiding them. An --sglang-NAME that hyrl does not declare passes through to
--sglang-server-args; a near miss of one it declares is a typo."""

from __future__ import annotations

import pytest

from hyrl.config import ConfigError, parse_args


def refused(argv: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_args(argv)
    return info.value


def test_a_list_flag_of_sglang_passes_with_every_value():
    cfg = parse_args(["--sglang-cuda-graph-bs-decode", "1", "2", "4", "8", "--seed", "3"])
    assert cfg.sglang_server_args == "--cuda-graph-bs-decode 1 2 4 8"
    assert cfg.seed == 3


def test_slimes_cuda_graph_bs_passes_under_sglangs_new_name_with_a_note(capsys):
    cfg = parse_args(
        ["--sglang-cuda-graph-bs", "1", "2", "4", "--sglang-mem-fraction-static", "0.7"]
    )
    assert cfg.sglang_server_args == "--cuda-graph-bs-decode 1 2 4"
    assert cfg.sglang_mem_fraction_static == 0.7
    assert capsys.readouterr().err == (
        "hyrl: --sglang-cuda-graph-bs: SGLang 0.5.23 has no --cuda-graph-bs; its "
        "--cuda-graph-bs-decode is the same setting (the batch sizes captured as CUDA graphs, "
        "which older SGLang captured for decoding only); passed as --cuda-graph-bs-decode\n"
    )


def test_a_one_value_flag_of_sglang_given_two_names_itself_and_the_fix():
    err = refused(["--sglang-chunked-prefill-size", "4096", "8192"])
    assert (err.flag, err.value) == ("<positional>", "8192")
    assert "it follows --sglang-chunked-prefill-size 4096" in err.problem
    assert "--sglang-server-args '--chunked-prefill-size 4096 8192'" in err.problem


def test_a_stray_names_the_hyrl_flag_it_follows():
    err = refused(["--lr", "1e-3", "oops"])
    assert (err.flag, err.value) == ("<positional>", "oops")
    assert "it follows --lr 1e-3: --lr takes one value" in err.problem
    err = refused(["--swiglu", "true"])  # a switch hyrl accepts takes no value either
    assert "it follows --swiglu, a boolean flag that takes no value" in err.problem


def test_a_stray_does_not_hide_the_unknown_flags():
    err = refused(["--frobnicate", "3", "4", "--lr", "1e-3", "--zzz"])
    assert "2 unknown flags and 1 stray argument:" in err.problem
    assert "\n  --frobnicate: " in err.problem and "\n  --zzz: not a hyrl flag" in err.problem
    assert (
        "\n  4: stray argument not attached to any flag (it follows --frobnicate 3" in err.problem
    )


def test_undeclared_sglang_flags_pass_through_and_near_misses_are_typos(cfg_of):
    cfg = cfg_of(
        "--rollout-engine",
        "sglang",
        "--colocate",
        "--sglang-server-args",
        "--log-level warning",
        "--sglang-attention-backend",
        "fa3",
        "--sglang-disable-radix-cache",
        "--sglang-chunked-prefill-size=4096",
    )
    assert cfg.sglang_server_args == (
        "--log-level warning --attention-backend fa3 "
        "--disable-radix-cache --chunked-prefill-size 4096"
    )
    with pytest.raises(ConfigError) as info:
        cfg_of("--rollout-engine", "sglang", "--sglang-router-ur", "http://h:1")
    assert info.value.flag == "--sglang-router-ur" and "--sglang-router-url" in info.value.allowed
