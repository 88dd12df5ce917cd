"""The run (hyrl.config.concerns.run): --save-interval needs --save, the checkpoint retention
and --max-skipped-steps are range-checked, and --run-dir may not be a file. Resuming into a
run directory that holds a run is in test_resume_flags.py."""

from __future__ import annotations

from config_errors import assert_rejected

from hyrl.config import parse_args


def test_save_interval_without_save_is_rejected(run_dir):
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--save-interval", "2"]), "--save-interval", 2
    )
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--save", "ck", "--save-interval", "0"]),
        "--save-interval",
        0,
    )
    assert_rejected(
        parse_args(["--run-dir", run_dir, "--max-skipped-steps", "0"]), "--max-skipped-steps", 0
    )
    for flag, value in (("--keep-last-checkpoints", -1), ("--keep-checkpoint-every", 0)):
        assert_rejected(
            parse_args(["--run-dir", run_dir, "--save", "ck", flag, str(value)]), flag, value
        )


def test_run_dir_that_is_a_file_is_rejected(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    assert_rejected(parse_args(["--run-dir", str(path)]), "--run-dir", str(path))
