"""First on PYTHONPATH of a run a test started with subprocess_hooks.hook_env: Python imports
this at the start of every process of the run (the launcher, the ranks, their workers), and it
installs the test hooks the environment asks for (tests/helpers/subprocess_hooks.py, loaded by
its path: nothing else of tests/helpers becomes importable in the run)."""

import importlib.util
import sys
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "subprocess_hooks.py"
_spec = importlib.util.spec_from_file_location("subprocess_hooks", _path)
assert _spec is not None and _spec.loader is not None, _path
_hooks = importlib.util.module_from_spec(_spec)
sys.modules["subprocess_hooks"] = _hooks
_spec.loader.exec_module(_hooks)
_hooks.install()
