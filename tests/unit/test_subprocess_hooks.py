"""The test hooks of tests/helpers/subprocess_hooks.py: a run started with hook_env(...) has the
hooked hyrl function patched as soon as its module is imported, and a run without the variable
runs hyrl's own."""

import os
import subprocess
import sys

import pytest
from subprocess_hooks import hook_env
from testpaths import ROOT

# each hooked function, printed as "patched" or "hyrl's own" by a fresh interpreter
PROBE = """
from hyrl.backends.megatron import train_checkpoint
from hyrl.rollout import manager
for hooked in (train_checkpoint.save_mcore, manager.RolloutManager._engine_call):
    print("patched" if hasattr(hooked, "__wrapped__") else "hyrl's own")
"""


def _probe(env: dict[str, str]) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split("\n")[:-1]


def test_a_hook_patches_its_function_when_its_variable_is_set_and_only_then():
    # each run has the hooks' site on its path; only the hook whose variable is set patches
    assert _probe(hook_env(HYRL_TEST_CRASH_IN_SAVE="2")) == ["patched", "hyrl's own"]
    assert _probe(hook_env(HYRL_TEST_GENERATION_DELAY_S="0.5")) == ["hyrl's own", "patched"]


def test_hook_env_puts_the_hook_site_first_and_refuses_a_name_that_is_no_hook():
    env = hook_env(HYRL_TEST_GENERATION_DELAY_S="1")
    assert env["PYTHONPATH"].split(os.pathsep)[0].endswith("hook_site")
    assert env == {"PYTHONPATH": env["PYTHONPATH"], "HYRL_TEST_GENERATION_DELAY_S": "1"}
    with pytest.raises(ValueError, match="HYRL_TEST_NO_SUCH_HOOK"):
        hook_env(HYRL_TEST_NO_SUCH_HOOK="1")
