"""The contract tier: SGLang 0.5.23's own code, on CPU, run on exactly what hyrl produces.

`make contract` runs it in .venv-contract (requirements-contract.txt: SGLang's own torch and
the packages its modules import; sglang itself with --no-deps) with HYRL_CONTRACT=1. There a
missing sglang is an error and a skipped test fails the run: in CI a skip is a failure. In the
main suite (`make test`, no sglang installed) the tier is not collected.

No SGLang module is stubbed. What stands in for the GPU side of a server (its model runners and
the TP process group) is in stubs.py, the one place that names every stand-in.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)  # stubs.py, sglang_scheduler.py by module name
if HERE not in sys.path:
    sys.path.insert(0, HERE)

CONTRACT = os.environ.get("HYRL_CONTRACT") == "1"

if importlib.util.find_spec("sglang") is None:
    if CONTRACT:
        raise RuntimeError(
            "HYRL_CONTRACT=1 but sglang is not importable: run the tier with `make contract`, "
            "which builds .venv-contract"
        )
    collect_ignore_glob = ["test_*.py"]
# With HYRL_CONTRACT=1 a skipped test fails the run: tests/conftest.py (STRICT_TIERS).


@pytest.fixture(scope="module")
def server():
    """SGLang 0.5.23's scheduler code behind its HTTP routes, for a test module
    (sglang_scheduler.SchedulerServer)."""
    from sglang_scheduler import SchedulerServer

    with SchedulerServer() as running:
        yield running


@pytest.fixture
def client(server):
    """A client of `server`; a test that leaves a weight-update session open fails."""
    from hyrl.rollout.sglang.client import SGLangClient

    yield SGLangClient(server.url, timeout_s=60.0)
    assert not server.recorded()["session_open"], "a test left a session open"
