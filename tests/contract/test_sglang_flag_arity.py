"""hyrl's tables of SGLang's server flags (hyrl.config.foreign.sglang), which let `hyrl train`
pass `--sglang-NAME VALUE...` through without SGLang installed, against SGLang 0.5.23's own
launch_server parser (`ServerArgs.add_cli_args`): the flags that take a list, and the old names
hyrl renames."""

from __future__ import annotations

import argparse
import shlex

import pytest
from sglang.srt.server_args import ServerArgs

from hyrl.config import parse_args
from hyrl.config.foreign.sglang import MULTI_VALUE_FLAGS, RENAMED_FLAGS
from hyrl.rollout.sglang.preflight import SGLangArgsRefused, parse_sglang_cli


def sglang_actions() -> dict[str, argparse.Action]:
    """Every option string of SGLang's launch_server parser -> its action."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return {option: action for action in parser._actions for option in action.option_strings}


def test_the_list_flags_are_exactly_sglangs():
    actions = sglang_actions()
    listed = {option for option, action in actions.items() if action.nargs in ("+", "*")}
    assert listed - MULTI_VALUE_FLAGS == set(), "SGLang takes a list there: add it to the table"
    assert MULTI_VALUE_FLAGS - listed == set(), "SGLang takes one value (or none) there"


@pytest.mark.parametrize("old", sorted(RENAMED_FLAGS))
def test_a_renamed_flag_is_refused_by_sglang_and_its_new_name_taken(old):
    actions = sglang_actions()
    new, _ = RENAMED_FLAGS[old]
    assert old not in actions and new in actions
    with pytest.raises(SGLangArgsRefused):
        parse_sglang_cli(["--model-path", "m", old, "1", "2"])


def test_slimes_sglang_flags_reach_sglang_with_every_value():
    """What slime's scripts/run-qwen3-30B-A3B.sh gives (its SGLANG_ARGS), through hyrl's
    pass-through into SGLang's parser."""
    batch_sizes = ["1", "2", "4", "8", *(str(n) for n in range(16, 257, 8))]
    cfg = parse_args(["--sglang-cuda-graph-bs", *batch_sizes, "--sglang-log-level", "warning"])
    args = parse_sglang_cli(["--model-path", "m", *shlex.split(cfg.sglang_server_args or "")])
    assert args.cuda_graph_bs_decode == [int(n) for n in batch_sizes]
    assert args.log_level == "warning"
