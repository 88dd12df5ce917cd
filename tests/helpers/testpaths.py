"""Where things are, for tests wherever they sit under tests/ (this folder is on sys.path: see
tests/conftest.py)."""

from pathlib import Path

HELPERS = Path(__file__).resolve().parent  # workers run under torchrun, test doubles
TESTS = HELPERS.parent
ROOT = TESTS.parent  # the repository
DATA = TESTS / "data"  # small data files and the tiny tokenizer (the tiny recipes read them)

# Scripts under recipes/ that run a study of several runs (hyrl sweep, hyrl tune, the autopilot
# against a fixed batch), not one training configuration.
STUDY_SCRIPT_PREFIXES = ("sweep", "tune", "autopilot")


def training_recipes() -> list[Path]:
    """The recipes that launch one training run: scripts with a shebang (model.sh, data.sh and
    testbed.sh are sourced fragments), study scripts left out."""
    return sorted(
        p
        for p in ROOT.glob("recipes/*/*.sh")
        if p.read_text().startswith("#!") and not p.name.startswith(STUDY_SCRIPT_PREFIXES)
    )
