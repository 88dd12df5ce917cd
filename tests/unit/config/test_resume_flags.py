"""Resuming (hyrl.config.resume): a --run-dir that holds a run is refused, unless resumed with
--load and the flags its config.json records, but for RESUME_MAY_CHANGE (length, checkpoints,
reporting, the parallel layout, --offload-train, --distributed-timeout-minutes); a run written
before a flag existed resumes while that flag is at its default."""

from __future__ import annotations

import dataclasses
import json

from config_errors import assert_rejected

from hyrl.config import RESUME_MAY_CHANGE, RunConfig, parse_args, resolve, validate


def test_run_dir_holding_a_run_is_rejected(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    cfg = parse_args(["--run-dir", str(run)])
    validate(cfg, 1)  # an existing directory without a run is fine
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    err = assert_rejected(cfg, "--run-dir", str(run))
    assert "already holds a run; choose a new directory" in str(err) and "--load" in str(err)


def _a_run_in(run_dir, *flags: str) -> None:
    """What hyrl train leaves in a run directory: config.json and metrics.jsonl."""
    (run_dir / "config.json").write_text(
        json.dumps(resolve(parse_args(["--run-dir", str(run_dir), *flags])).to_dict(1))
    )
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')


def test_run_dir_holding_a_run_is_resumed_only_with_load_and_the_same_configuration(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3", "--lr", "1e-4")
    same = ["--run-dir", str(run), "--lr", "1e-4", "--load", str(tmp_path / "ckpt")]
    # the length, checkpoint and reporting flags may change on resume
    validate(
        parse_args(
            [
                *same,
                "--num-steps",
                "6",
                "--save",
                "ck",
                "--save-interval",
                "2",
                "--no-progress",
                "--max-skipped-steps",
                "5",
            ]
        ),
        1,
    )
    err = assert_rejected(parse_args([*same, "--lr", "2e-4"]), "--run-dir", str(run))
    assert "--lr: 0.0001 in config.json, 0.0002 now" in str(err)
    # the parallel layout and world size may change too: weights and optimizer states reshard
    validate(parse_args([*same, "--expert-model-parallel-size", "2"]), 2)
    err = assert_rejected(parse_args([*same, "--bf16"]), "--run-dir", str(run))
    assert "--bf16: False in config.json, True now" in str(err)


def test_a_run_written_before_a_flag_existed_resumes_when_that_flag_is_at_its_default(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3")
    saved = json.loads((run / "config.json").read_text())
    # an older hyrl had neither field (nor the derived loss-aggregation default it resolves to)
    for key in ("loss_agg_mode", "dynamic_sampling", "eval_pass_threshold"):
        del saved[key]
    (run / "config.json").write_text(json.dumps(saved))
    resumed = ["--run-dir", str(run), "--load", str(tmp_path / "ckpt")]
    validate(parse_args([*resumed, "--num-steps", "6"]), 1)
    validate(parse_args([*resumed, "--loss-agg-mode", "token-mean"]), 1)  # the default, given
    # the older run ran without dynamic sampling and with token-mean: anything else differs
    err = assert_rejected(parse_args([*resumed, "--dynamic-sampling"]), "--run-dir", str(run))
    assert "--dynamic-sampling: False (its default: not in config.json), True now" in str(err)
    err = assert_rejected(
        parse_args([*resumed, "--loss-agg-mode", "seq-mean-token-mean"]), "--run-dir", str(run)
    )
    assert "--loss-agg-mode: 'token-mean' (its default: not in config.json)" in str(err)


def test_offload_train_may_change_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    colocated = ("--rollout-engine", "sglang", "--colocate")
    _a_run_in(run, *colocated, "--num-steps", "3")  # offloaded (on by default with --colocate)
    resumed = ["--run-dir", str(run), "--load", str(tmp_path / "ckpt"), *colocated]
    validate(parse_args([*resumed, "--num-steps", "3", "--no-offload-train"]), 1)
    # a flag outside RESUME_MAY_CHANGE still counts
    err = assert_rejected(parse_args([*resumed, "--lr", "2e-4"]), "--run-dir", str(run))
    assert "--lr: 0.0003 in config.json, 0.0002 now" in str(err)


def test_distributed_timeout_may_change_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _a_run_in(run, "--num-steps", "3")
    validate(
        parse_args(
            [
                "--run-dir",
                str(run),
                "--load",
                str(tmp_path / "ckpt"),
                "--distributed-timeout-minutes",
                "60",
            ]
        ),
        1,
    )


def test_whether_a_resume_may_change_a_flag_and_whether_it_is_a_run_output_sit_beside_it():
    from hyrl.config.fields import RUN_OUTPUTS

    declared = {f.name: f.metadata for f in dataclasses.fields(RunConfig)}
    flagged = {n for n, m in declared.items() if m.get("resume_may_change")}
    derived = {"old_log_probs_from_update", "world_size", "data_parallel_size"}
    assert set(RESUME_MAY_CHANGE) == flagged | derived  # gathered, not listed again
    assert {"tensorboard_dir", "wandb_tags", "sequence_parallel", "run_dir"} <= flagged
    assert "seed" not in flagged and "lr" not in flagged
    outputs = {n for n, m in declared.items() if m.get("run_output")}
    assert set(RUN_OUTPUTS) == outputs and {"save", "wandb_mode", "target"} <= outputs
    assert "load" not in outputs  # what an evaluation loads is no output of the run
