"""The GPU stack's pins agree with the pinned sglang wheel's own Requires-Dist.

At 74107ac requirements.txt pinned tokenizers==0.23.3 while sglang 0.5.23 requires
tokenizers==0.23.2: `pip install -r requirements.txt` could not resolve.
"""

from __future__ import annotations

from importlib.metadata import requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PINNED_FILES = ("requirements.txt", "requirements-te.txt", "requirements-contract.txt")


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line (extras and comments dropped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            [spec] = requirement.specifier
            assert spec.operator == "==", f"{path.name}: {line} is not pinned exactly"
            out[canonicalize_name(requirement.name)] = spec.version
    return out


def sglang_requirements() -> dict[str, Requirement]:
    """sglang's Requires-Dist that apply to this platform (linux x86_64), without extras."""
    out = {}
    for text in requires("sglang") or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            out[canonicalize_name(requirement.name)] = requirement
    return out


def test_the_installed_sglang_is_the_pinned_one():
    assert version("sglang") == pins(ROOT / "requirements.txt")["sglang"]


@pytest.mark.parametrize("file_name", PINNED_FILES)
def test_every_package_sglang_requires_is_pinned_as_sglang_allows(file_name):
    required = sglang_requirements()
    ours = pins(ROOT / file_name)
    conflicts = [
        f"{name}=={ours[name]} but sglang requires {required[name]}"
        for name in sorted(set(ours) & set(required))
        if not required[name].specifier.contains(ours[name], prereleases=True)
    ]
    assert conflicts == [], f"{file_name}: {conflicts}"
    if file_name == "requirements.txt":  # the packages both sides pin must be compared at all
        assert {"torch", "transformers", "tokenizers"} <= set(ours) & set(required)
