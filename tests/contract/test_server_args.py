"""SGLang 0.5.23's own launch_server parser on the server command hyrl builds."""

from __future__ import annotations

import pytest
from sglang.srt.server_args import prepare_server_args

from hyrl.config import resolve
from hyrl.config.rollout_layout import rollout_layout
from hyrl.models.qwen3_moe.config import QWEN3_30B_A3B
from hyrl.plan.cli import config_from_dry_run, recipe_dry_run
from hyrl.rollout.sglang.build import sglang_server_options
from hyrl.rollout.sglang.launch import sglang_server_process, write_rollout_model
from hyrl.rollout.sglang.preflight import SGLangArgsRefused, parse_sglang_cli

RECIPES = ("recipes/qwen3_30b_a3b/grpo.sh", "recipes/qwen3_30b_a3b/ppo.sh")
QWEN_EOS = [151645, 151643]


def server_argv(recipe: str, tmp_path, *extra: str) -> tuple[list[str], object, object]:
    """The argv of engine 1's server for the recipe's resolved flags (its dry run)."""
    dry_run, world_size = config_from_dry_run(recipe_dry_run(recipe, list(extra)))
    cfg = resolve(dry_run)
    layout = rollout_layout(cfg, world_size)
    model = write_rollout_model(QWEN3_30B_A3B, tmp_path / "model", QWEN_EOS)
    options = sglang_server_options(
        cfg.rollout,
        layout,
        model,
        str(tmp_path / "logs"),
        seed=cfg.seed,
        return_routed_experts=cfg.mismatch.engine_returns_routing,
    )
    command = sglang_server_process(**options, engine_index=1, host="10.0.0.2", port=31001)
    argv = command.command()
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    return argv[3:], cfg, layout


@pytest.mark.parametrize(
    ("recipe", "tp_size", "in_flight", "colocated"),
    [(RECIPES[0], 8, 256, True), (RECIPES[1], 4, 192, False)],  # the recipes' own numbers
)
def test_sglang_parses_the_server_command_of_each_30b_recipe(
    recipe, tp_size, in_flight, colocated, tmp_path
):
    argv, cfg, layout = server_argv(recipe, tmp_path)
    args = prepare_server_args(argv)  # what `python -m sglang.launch_server` runs first
    assert args.model_path == str(tmp_path / "model")
    assert (args.host, args.port) == ("10.0.0.2", 31001)
    assert args.tp_size == layout.gpus_per_engine == tp_size
    assert args.max_running_requests == layout.concurrency_per_engine == in_flight
    assert args.mem_fraction_static == cfg.sglang_mem_fraction_static == 0.85
    assert (args.dtype, args.load_format) == ("bfloat16", "dummy")
    assert args.skip_tokenizer_init and args.skip_server_warmup
    # --colocate: release/resume_memory_occupation need the memory saver
    assert args.enable_memory_saver == colocated == cfg.colocate
    assert args.random_seed == cfg.seed + 1
    assert not args.enable_return_routed_experts


def test_routing_replay_and_pass_through_flags_parse(tmp_path):
    argv, _, _ = server_argv(
        RECIPES[0],
        tmp_path,
        "--use-rollout-routing-replay",
        "--sglang-attention-backend",
        "triton",
        "--sglang-server-args",
        "--chunked-prefill-size 4096",
    )
    args = prepare_server_args(argv)
    assert args.enable_return_routed_experts
    assert args.attention_backend == "triton" and args.chunked_prefill_size == 4096


def test_the_cli_check_accepts_sglangs_flags_and_refuses_others():
    args = parse_sglang_cli(["--model-path", "m", "--attention-backend", "triton"])
    assert args.attention_backend == "triton"
    with pytest.raises(SGLangArgsRefused, match="unrecognized arguments: --no-such-flag"):
        parse_sglang_cli(["--model-path", "m", "--no-such-flag", "1"])
    with pytest.raises(SGLangArgsRefused, match="invalid choice"):
        parse_sglang_cli(["--model-path", "m", "--attention-backend", "no-such-backend"])
