"""Other names of hyrl's flags (hyrl.config.names): old hyrl names still accepted with a note,
slime's spelling of a value, config.json and checkpoints written under the old names, and every
unknown flag reported at once."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hyrl.config import ConfigError, parse_args, resolve, resume_differences
from hyrl.config.names import RENAMED, canonical_config, renamed_notes
from hyrl.config.parser import build_parser
from hyrl.config.resume import check_resume

SGLANG = ["--rollout-engine", "sglang", "--rollout-num-gpus", "1"]


@pytest.mark.parametrize(
    "old, new, value",
    [
        ("--ref-lr", "--base-lr", "0.001"),
        ("--ref-global-batch-size", "--base-global-batch-size", "64"),
        ("--critic-ref-lr", "--critic-base-lr", "0.002"),
        ("--critic-ref-global-batch-size", "--critic-base-global-batch-size", "32"),
        ("--partial-rollout-segment-tokens", "--inflight-segment-tokens", "16"),
        ("--update-weight-mode", "--update-weight-transport", "disk"),
    ],
)
def test_an_old_name_sets_the_same_field_as_the_new(old, new, value):
    assert parse_args([old, value]) == parse_args([new, value])
    assert parse_args([old, value]) != parse_args([])


@pytest.mark.parametrize(
    "old, new",
    [
        ("--use-routing-replay", "--use-rollout-routing-replay"),
        ("--partial-rollout", "--inflight-weight-updates"),
    ],
)
def test_an_old_boolean_name_keeps_its_no_form(old, new):
    field = new[2:].replace("-", "_")
    assert getattr(parse_args([old]), field) is True
    assert getattr(parse_args(["--no-" + old[2:]]), field) is False
    assert parse_args([old]) == parse_args([new])


def test_using_an_old_name_says_the_new_one_and_what_slime_means_by_it(capsys):
    parse_args(["--use-routing-replay", "--ref-lr", "1e-3", "--lr-scaling", "sqrt"])
    err = capsys.readouterr().err
    assert "--use-routing-replay is the old name of --use-rollout-routing-replay" in err
    assert "R2" in err and "this run gets R3" in err
    assert "--ref-lr is the old name of --base-lr" in err
    assert renamed_notes(["--base-lr", "1e-3"]) == []  # the new name: no note


def test_slimes_nccl_is_the_distributed_transport():
    cfg = parse_args([*SGLANG, "--update-weight-transport", "nccl"])
    assert cfg.update_weight_transport == "distributed"
    with pytest.raises(ConfigError, match="tensor, distributed, disk"):
        parse_args(["--update-weight-transport", "full"])  # slime's --update-weight-mode value


def test_every_renamed_field_exists_under_its_new_name_only():
    fields = {f.name for f in dataclasses.fields(parse_args([]))}
    for old, (new, _) in RENAMED.items():
        assert new in fields and old not in fields


def test_a_config_json_written_before_the_rename_resumes_without_differences(tmp_path):
    cfg = resolve(
        parse_args(
            [
                "--run-dir",
                str(tmp_path / "r"),
                "--base-lr",
                "1e-3",
                "--lr-scaling",
                "sqrt",
                "--base-global-batch-size",
                "64",
            ]
        )
    )
    saved = json.loads(json.dumps(cfg.to_dict(1)))
    for old, (new, _) in RENAMED.items():  # as a hyrl before the rename wrote it
        if new in saved:
            saved[old] = saved.pop(new)
    assert "ref_lr" in saved and "base_lr" not in saved
    assert resume_differences(saved, cfg, 1, "in config.json") == []
    saved["ref_lr"] = 2e-3
    differs = resume_differences(saved, cfg, 1, "in config.json")
    assert len(differs) == 1 and differs[0].startswith("--base-lr: 0.002 in config.json")


def test_canonical_config_keeps_the_new_key_when_both_are_there():
    assert canonical_config({"ref_lr": 1.0, "base_lr": 2.0, "lr": 3.0}) == {
        "base_lr": 2.0,
        "lr": 3.0,
    }


def _saved_as_before_the_layout_rename(cfg) -> dict:
    """cfg's config.json as a hyrl before issue 47 wrote it: the resolved layout's transport
    under rollout_layout.update_weight_mode (tests/golden/resume_async_ckpt has one)."""
    saved = json.loads(json.dumps(cfg.to_dict(1)))
    layout = saved["rollout_layout"]
    layout["update_weight_mode"] = layout.pop("update_weight_transport")
    return saved


def test_a_rollout_layout_written_before_its_rename_compares_equal():
    cfg = resolve(parse_args([*SGLANG, "--run-dir", "r"]))
    saved = _saved_as_before_the_layout_rename(cfg)
    assert canonical_config(saved)["rollout_layout"]["update_weight_transport"] == "distributed"
    assert resume_differences(saved, cfg, 1, "in the checkpoint") == []
    # ... and a different transport under the old key is still a difference
    saved["rollout_layout"]["update_weight_mode"] = "disk"
    (differs,) = resume_differences(saved, cfg, 1, "in the checkpoint")
    assert differs.startswith("rollout_layout: ") and "'update_weight_transport': 'disk'" in differs


def test_a_run_directory_written_before_the_layout_rename_resumes(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["--run-dir", str(run_dir), "--load", str(tmp_path / "ckpt")]
    cfg = resolve(parse_args(argv))
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("{}\n")
    config_json = run_dir / "config.json"
    config_json.write_text(json.dumps(_saved_as_before_the_layout_rename(cfg)))
    check_resume(cfg, 1)  # the same run: accepted
    saved = json.loads(config_json.read_text())
    saved["rollout_layout"]["update_weight_mode"] = "disk"
    config_json.write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match="another configuration"):
        check_resume(cfg, 1)


def test_every_unknown_flag_is_named_at_once():
    with pytest.raises(ConfigError) as info:
        parse_args(["--frobnicate", "3", "--global-batch-sise", "8", "--lr", "1e-3", "--zzz"])
    text = str(info.value)
    assert "3 unknown flags" in text
    for flag in ("--frobnicate", "--global-batch-sise", "--zzz"):
        assert f"\n  {flag}: " in text
    assert "did you mean --global-batch-size" in text
    assert "--lr" not in info.value.flag


def test_one_unknown_flag_keeps_the_single_message():
    with pytest.raises(ConfigError) as info:
        parse_args(["--global-batch-sise", "8"])
    assert info.value.flag == "--global-batch-sise"
    assert info.value.problem == "unknown flag"
    assert "did you mean --global-batch-size" in info.value.allowed


def test_a_stray_value_is_still_a_stray_argument():
    with pytest.raises(ConfigError) as info:
        parse_args(["--colocate", "true"])
    assert info.value.flag == "<positional>" and "boolean flag" in info.value.problem


def test_help_lists_the_old_names():
    help_text = build_parser().format_help()
    assert "--base-lr FLOAT|none, --ref-lr FLOAT|none" in help_text
    assert (
        "--use-rollout-routing-replay, --no-use-rollout-routing-replay, --use-routing-replay"
        in (" ".join(help_text.split()))
    )


def test_slimes_own_sglang_flags_are_answered_not_passed_to_sglang():
    with pytest.raises(ConfigError) as info:
        parse_args(["--sglang-router-ip", "10.0.0.1", "--sglang-router-port", "3000"])
    text = str(info.value)
    assert "2 unknown flags" in text and "--sglang-router-url" in text
    cfg = parse_args(["--sglang-chunked-prefill-size", "4096"])  # SGLang's own: passed on
    assert cfg.sglang_server_args == "--chunked-prefill-size 4096"


def test_an_unknown_slime_or_megatron_flag_gets_the_tables_answer():
    with pytest.raises(ConfigError) as info:
        parse_args(["--train-iters", "100", "--use-kl-loss", "--lr", "1e-3"])
    text = str(info.value)
    assert "2 unknown flags" in text
    assert "\n  --train-iters: Megatron-LM's flag; use --num-steps" in text
    assert "\n  --use-kl-loss: slime's flag; " in text


def test_slimes_num_rollout_is_the_number_of_rollout_steps():
    assert parse_args(["--num-rollout", "7"]).num_steps == 7
    assert parse_args(["--use-wandb"]).log_wandb is True
    assert parse_args(["--wandb-team", "t"]).wandb_entity == "t"  # slime's name, kept


def test_a_wandb_project_without_log_wandb_is_refused_not_ignored(tmp_path):
    from hyrl.config import validate

    with pytest.raises(ConfigError) as info:
        validate(parse_args(["--run-dir", str(tmp_path / "r"), "--wandb-project", "p"]), 1)
    assert info.value.flag == "--wandb-project" and "--log-wandb" in info.value.allowed
    validate(
        parse_args(["--run-dir", str(tmp_path / "r"), "--wandb-project", "p", "--log-wandb"]), 1
    )
