"""The GPU stack's pins agree with the pinned sglang and megatron-core wheels' own Requires-Dist.

At 74107ac requirements.txt pinned tokenizers==0.23.3 while sglang 0.5.23 requires
tokenizers==0.23.2: `pip install -r requirements.txt` could not resolve. requirements-te.txt
pinned transformer-engine 2.20.2 while megatron-core 0.16.1 declares `<2.12.0,>=2.9.0a0` (under
its `dev` extra only), and 0.16.1's router GEMM imports `get_workspace`, which TE 2.10 removed:
megatron fell back to torch.mm without a word (docs/testing.md, "The GPU stack's versions").
"""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import requires, version
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PINNED_FILES = ("requirements.txt", "requirements-te.txt", "requirements-contract.txt")
GPU_STACK_FILES = ("requirements.txt", "requirements-te.txt")
# The GPU stack's wheels as a cluster node picks them (requirements.txt: Python 3.11 or 3.12).
GPU_WHEEL_TARGET = ("--python-version", "3.11", "--platform", "manylinux_2_28_x86_64")
LINUX_X86_64 = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}


def pinned_requirements(path: Path) -> dict[str, Requirement]:
    """name -> requirement of every `name[extras]==version` line (comments dropped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            [spec] = requirement.specifier
            assert spec.operator == "==", f"{path.name}: {line} is not pinned exactly"
            out[canonicalize_name(requirement.name)] = requirement
    return out


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line (extras and comments dropped)."""
    return {
        name: next(iter(requirement.specifier)).version
        for name, requirement in pinned_requirements(path).items()
    }


def download_pinned_wheel(name: str, pin_file: str, into: Path) -> Path:
    """The wheel of `name` at the version `pin_file` pins, from the package index (no cache)."""
    pinned = f"{name}=={pins(ROOT / pin_file)[name]}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir"]
    command += ["--disable-pip-version-check"]
    command += ["--only-binary=:all:", *GPU_WHEEL_TARGET, "-d", str(into), pinned]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip download {pinned} failed:\n{done.stderr[-3000:]}"
    [wheel] = into.glob("*.whl")
    return wheel


def wheel_metadata_requirements(wheel: Path) -> tuple[list[Requirement], list[str]]:
    """The wheel's Requires-Dist and Provides-Extra, read from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        [path] = [p for p in archive.namelist() if p.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(path).decode())
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]
    return requirements, metadata.get_all("Provides-Extra") or []


def requirements_under(wheel: Path, extra: str) -> dict[str, list[Requirement]]:
    """name -> the wheel's Requires-Dist that apply on linux x86_64 with `extra` ("" for none)."""
    requirements, _ = wheel_metadata_requirements(wheel)
    out: dict[str, list[Requirement]] = {}
    for requirement in requirements:
        if requirement.marker is None or requirement.marker.evaluate(
            {**LINUX_X86_64, "extra": extra}
        ):
            out.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return out


@pytest.fixture(scope="module")
def megatron_core_wheel(tmp_path_factory) -> Path:
    return download_pinned_wheel(
        "megatron-core", "requirements.txt", tmp_path_factory.mktemp("megatron-core")
    )


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


def extras(requirement: Requirement) -> set[str]:
    return {canonicalize_name(extra) for extra in requirement.extras}


def transformer_engine_requirements(megatron_core_wheel: Path) -> list[Requirement]:
    """megatron-core's transformer-engine requirements under any extra: 0.16.1 declares its TE
    range only under `dev`, 0.19.x under `te`; none is declared without an extra."""
    _, extras = wheel_metadata_requirements(megatron_core_wheel)
    out: list[Requirement] = []
    for extra in extras:
        for requirement in requirements_under(megatron_core_wheel, extra).get(
            "transformer-engine", []
        ):
            if requirement not in out:
                out.append(requirement)
    return out


def test_transformer_engine_is_pinned_in_the_range_the_pinned_megatron_core_declares(
    megatron_core_wheel,
):
    declared = transformer_engine_requirements(megatron_core_wheel)
    assert declared, f"{megatron_core_wheel.name} declares no transformer-engine under any extra"
    ours = pinned_requirements(ROOT / "requirements-te.txt")["transformer-engine"]
    [pin] = ours.specifier
    conflicts = [
        f"{ours} but megatron-core requires {theirs}"
        for theirs in declared
        if not theirs.specifier.contains(pin.version, prereleases=True)
        or not extras(theirs) <= extras(ours)
    ]
    assert conflicts == [], f"requirements-te.txt: {conflicts}"


@pytest.mark.parametrize("file_name", GPU_STACK_FILES)
def test_every_package_megatron_core_requires_is_pinned_as_megatron_core_allows(
    file_name, megatron_core_wheel
):
    required = requirements_under(megatron_core_wheel, "")
    ours = pins(ROOT / file_name)
    conflicts = [
        f"{name}=={ours[name]} but megatron-core requires {requirement}"
        for name in sorted(set(ours) & set(required))
        for requirement in required[name]
        if not requirement.specifier.contains(ours[name], prereleases=True)
    ]
    assert conflicts == [], f"{file_name}: {conflicts}"
    if file_name == "requirements.txt":  # torch, the one both sides pin, must be compared at all
        assert "torch" in set(ours) & set(required)


def router_gemm_imports(megatron_core_wheel: Path) -> list[tuple[str, str]]:
    """(module, name) that megatron-core's TE router GEMM cannot do without: the imports directly
    in the try block that defines `te_general_gemm` (0.16.1 imports get_workspace there, so
    without it moe_utils falls back to torch.mm; 0.17+ import it in a nested try)."""
    with zipfile.ZipFile(megatron_core_wheel) as archive:
        source = archive.read("megatron/core/extensions/transformer_engine.py").decode()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Try) and any(
            isinstance(s, ast.FunctionDef) and s.name == "te_general_gemm" for s in node.body
        ):
            return [
                (s.module or "", alias.name)
                for s in node.body
                if isinstance(s, ast.ImportFrom)
                for alias in s.names
            ]
    raise AssertionError(f"{megatron_core_wheel.name} defines no te_general_gemm")


def defines(archive: zipfile.ZipFile, module: str, name: str) -> bool:
    """Whether `name` is a top-level def, class or assignment in `module` or, for a package, in
    one of its files (TE's cpp_extensions re-exports general_gemm from gemm.py with `*`)."""
    base = PurePosixPath(*module.split("."))
    sources = [
        path
        for path in archive.namelist()
        if path == f"{base}.py" or (path.startswith(f"{base}/") and path.endswith(".py"))
    ]
    for path in sources:
        for node in ast.parse(archive.read(path).decode()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return True
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return True
    return False


def test_the_pinned_transformer_engine_defines_what_megatron_cores_router_gemm_imports(
    megatron_core_wheel, tmp_path
):
    needed = router_gemm_imports(megatron_core_wheel)
    assert ("transformer_engine.pytorch.cpp_extensions", "general_gemm") in needed
    te_wheel = download_pinned_wheel("transformer-engine", "requirements-te.txt", tmp_path)
    with zipfile.ZipFile(te_wheel) as archive:
        missing = [f"{m}.{n}" for m, n in needed if not defines(archive, m, n)]
    assert missing == [], (
        f"{te_wheel.name} lacks {missing}: {megatron_core_wheel.name}'s MoE router GEMM would "
        "fall back to torch.mm"
    )
