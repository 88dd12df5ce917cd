"""tests/gpu: the checks that need CUDA, some also SGLang, Ray and several GPUs. Each skips
without what it needs, and its reason says what that is. A skipped check has not run.

`bash tools/gpu_tests.sh` runs them with HYRL_GPU_CHECKS=1, which ends the run with one line
per check: whether it ran (passed, failed) or not (skipped, and why), and the GPUs it needs
(the `gpus(n)` mark; 1 where a check has none).
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMMARY = os.environ.get("HYRL_GPU_CHECKS") == "1"

_gpus: dict[str, int] = {}  # nodeid -> GPUs the check needs
_outcomes: dict[str, tuple[bool, str]] = {}  # nodeid -> (ran, what happened)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpus(n): a tests/gpu check that needs n GPUs")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in item.path.parents:
            mark = item.get_closest_marker("gpus")
            _gpus[item.nodeid] = int(mark.args[0]) if mark is not None else 1


def pytest_runtest_logreport(report):
    if report.nodeid not in _gpus:
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else "skipped"
        _outcomes[report.nodeid] = (False, f"not run: {reason.removeprefix('Skipped: ')}")
    elif report.failed:
        _outcomes[report.nodeid] = (True, "FAILED" if report.when == "call" else "ERROR")
    elif report.when == "call":
        _outcomes[report.nodeid] = (True, "passed")


def pytest_terminal_summary(terminalreporter):
    if not SUMMARY or not _gpus:
        return
    write = terminalreporter.write_line
    terminalreporter.section("GPU checks: what ran, and the GPUs each needs")
    ran = 0
    for nodeid, gpus in _gpus.items():
        did_run, what = _outcomes.get(nodeid, (False, "not run"))
        ran += did_run
        name = nodeid.split("tests/gpu/", 1)[-1]
        write(f"{gpus} GPU{'s' if gpus > 1 else ' '}  {name}: {what}")
    write(
        f"{ran} ran, {len(_gpus) - ran} not run. A check that did not run here has not been "
        "checked: run it where it gets what its line says it needs."
    )
