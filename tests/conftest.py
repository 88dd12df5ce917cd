"""Shared by every test: tests/helpers on sys.path (the torchrun workers, the SGLang protocol
double, the recipe runner and `testpaths`), so a test imports them by module name wherever it
sits. The tree mirrors the package: unit/<package part>/, e2e/ (a recipe run end to end through
the launcher), gpu/ (skipped without CUDA), helpers/, data/."""

import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent / "helpers"
if str(HELPERS) not in sys.path:
    sys.path.insert(0, str(HELPERS))
