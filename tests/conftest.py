"""Shared by every test: tests/helpers on sys.path (the torchrun workers, the SGLang protocol
double, the recipe runner and `testpaths`), so a test imports them by module name wherever it
sits. The tree mirrors the package: unit/<package part>/, e2e/ (a recipe run end to end through
the launcher), gpu/ (skipped without CUDA), helpers/, data/.

The Slurm tier (tests marked `slurm`: a one-node Slurm of its own, tools/slurm_local.sh) runs
only when asked, with HYRL_SLURM=1 (`make slurm-test`); otherwise it is skipped before any of
its fixtures runs, so `make test` installs, writes and starts nothing. With HYRL_SLURM=1 a
skipped test of the tier fails the run, as a skipped test of the contract tier does with
HYRL_CONTRACT=1 (`make contract`).
"""

import os
import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))

SLURM_TIER = os.environ.get("HYRL_SLURM") == "1"
# The tiers where a skipped test fails the run (asked for by their variable): name, whether it
# is asked for, which reports are its tests'.
STRICT_TIERS = (
    ("Slurm tier", SLURM_TIER, lambda report: "slurm" in report.keywords),
    (
        "contract tier",  # make contract (tests/contract/conftest.py)
        os.environ.get("HYRL_CONTRACT") == "1",
        lambda report: report.nodeid.startswith("tests/contract/"),
    ),
)
_skipped_in_tier: dict[str, list[str]] = {name: [] for name, _, _ in STRICT_TIERS}


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="the Slurm tier runs only when asked: make slurm-test")
    for item in items:
        if not SLURM_TIER and item.get_closest_marker("slurm"):
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    for name, asked, in_tier in STRICT_TIERS:
        if asked and report.skipped and in_tier(report):
            _skipped_in_tier[name].append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    for name, skipped in _skipped_in_tier.items():
        if skipped:
            print(f"\n{name}: {len(skipped)} test(s) skipped, which fails it:")
            for nodeid in skipped:
                print(f"  {nodeid}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
