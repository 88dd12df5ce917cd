"""hyrl.config.recipe_dry_run: the one way `hyrl plan` and `hyrl sweep` ask a recipe for its
configuration."""

from __future__ import annotations

import os

from hyrl.config.recipe_dry_run import dry_run, error_lines


def recipe(tmp_path, body: str):
    path = tmp_path / "recipe.sh"
    path.write_text("#!/bin/bash\n" + body + "\n")
    return path


def test_the_json_object_after_other_output_is_the_resolved_config(tmp_path):
    path = recipe(tmp_path, 'echo "starting"; echo \'{"lr": 1e-6, "args": "$*"}\'; echo done')
    done = dry_run(path, ["--seed", "3"], dict(os.environ), timeout_s=60)
    assert done.returncode == 0
    assert done.config == {"lr": 1e-6, "args": "$*"}
    assert done.command == ["bash", str(path), "--dry-run", "--seed", "3"]


def test_the_recipe_receives_dry_run_first_then_the_arguments(tmp_path):
    path = recipe(tmp_path, 'printf \'{"argv": "%s"}\' "$*"')
    done = dry_run(path, ["--seed", "3"], dict(os.environ), timeout_s=60)
    assert done.config == {"argv": "--dry-run --seed 3"}


def test_a_failing_recipe_gives_no_config_and_keeps_its_stderr(tmp_path):
    path = recipe(tmp_path, 'echo "+ python -m hyrl train" >&2; echo "error: --lr bad" >&2; exit 2')
    done = dry_run(path, [], dict(os.environ), timeout_s=60)
    assert (done.returncode, done.config) == (2, None)
    assert error_lines(done.stderr, 5) == "error: --lr bad"


def test_output_without_a_json_object_gives_no_config(tmp_path):
    done = dry_run(recipe(tmp_path, "echo hello"), [], dict(os.environ), timeout_s=60)
    assert (done.returncode, done.config, done.json_error) == (0, None, "")
    broken = dry_run(recipe(tmp_path, "echo '{\"lr\": '"), [], dict(os.environ), timeout_s=60)
    assert broken.config is None and broken.json_error.startswith("Expecting value")


def test_error_lines_prefer_the_last_three_error_lines_else_the_last_n_lines():
    stderr = "\n".join(
        ["+ bash echo", "a", "b", "c", "Error 1", "error 2", "x", "ERROR 3", "error 4"]
    )
    assert error_lines(stderr, 5) == "error 2\nERROR 3\nerror 4"
    assert error_lines("+ echo\none\ntwo\nthree\n", 2) == "two\nthree"
    assert error_lines("+ echo only\n", 2) == ""
