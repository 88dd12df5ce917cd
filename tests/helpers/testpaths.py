"""Where things are, for tests wherever they sit under tests/ (this folder is on sys.path: see
tests/conftest.py)."""

from pathlib import Path

HELPERS = Path(__file__).resolve().parent  # workers run under torchrun, test doubles
TESTS = HELPERS.parent
ROOT = TESTS.parent  # the repository
DATA = TESTS / "data"  # small data files and the tiny tokenizer (the tiny recipes read them)
