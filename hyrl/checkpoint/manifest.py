"""What a checkpoint step directory holds, checked before it is loaded.

Each save writes `manifest.json` into the step directory (with the rest, before the rename that
makes it complete): every file of the step and its size in bytes. Before a resume loads it
(hyrl.train.preflight, then every rank: ``check_loadable``), the step is checked without reading its
tensors:

- every file of the manifest is there with its size (a truncated or missing file is named);
- every Megatron distributed checkpoint in it (a directory with torch's `.metadata`) has a
  readable `.metadata`, and every byte range it names lies inside an existing `.distcp` file.

That costs a stat per file and one small read per distributed checkpoint, at any model size.
Checksums cost minutes at 30B, so they are on demand: ``verify`` (`hyrl checkpoint verify DIR
[--checksums]`) also reads every file through (torch.load of the .pt files, every byte of the
rest), and with --checksums records SHA-256 sums in `checksums.json` at its first run and
compares them at the next.

A damaged step is named with the file and what is wrong; the message names the newest older
step that passes, and how to load it. Steps saved before manifests: only the distributed
checkpoints' cross-check applies.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST_FILE = "manifest.json"
CHECKSUM_FILE = "checksums.json"
FORMAT = "hyrl.checkpoint_manifest"
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's index of a distributed checkpoint


def write_manifest(step_dir: Path) -> None:
    """Every file under step_dir (written, not yet renamed into place) and its size."""
    files = {
        str(path.relative_to(step_dir)): path.stat().st_size
        for path in sorted(step_dir.rglob("*"))
        if path.is_file() and path.name not in (MANIFEST_FILE, CHECKSUM_FILE)
    }
    content = {"format": FORMAT, "files": files}
    (step_dir / MANIFEST_FILE).write_text(json.dumps(content, indent=1, sort_keys=True) + "\n")


def read_manifest(step_dir: Path) -> dict[str, int] | None:
    """The manifest's {file: size}; None for a step saved before manifests. ValueError when the
    manifest itself is damaged."""
    path = step_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        content = json.loads(path.read_text())
        files = content["files"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{MANIFEST_FILE}: not a manifest ({err})") from None
    return {str(k): int(v) for k, v in files.items()}


def damage(step_dir: Path) -> list[str]:
    """What is wrong with the step directory, one line per problem ("FILE: what"); [] when it
    is whole, as far as sizes and the distributed checkpoints' indexes tell."""
    problems: list[str] = []
    try:
        files = read_manifest(step_dir)
    except ValueError as err:
        return [str(err)]
    for name, size in (files or {}).items():
        path = step_dir / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif (found := path.stat().st_size) != size:
            problems.append(f"{name}: {found} bytes, the save wrote {size}")
    for index in sorted(step_dir.rglob(DCP_METADATA)):
        problems += _dcp_damage(index.parent, step_dir)
    return problems


def _dcp_damage(directory: Path, step_dir: Path) -> list[str]:
    """A distributed checkpoint's index against its data files."""
    from torch.distributed.checkpoint import FileSystemReader

    where = directory.relative_to(step_dir)
    try:
        metadata = FileSystemReader(str(directory)).read_metadata()
    except Exception as err:  # noqa: BLE001 - torch's unpickling raises many kinds
        return [f"{where / DCP_METADATA}: cannot be read ({type(err).__name__}: {err})"]
    needed: dict[str, int] = {}  # data file -> the end of the last byte range in it
    for item in (metadata.storage_data or {}).values():
        end = item.offset + item.length
        needed[item.relative_path] = max(needed.get(item.relative_path, 0), end)
    problems = []
    for name, end in sorted(needed.items()):
        path = directory / name
        if not path.is_file():
            problems.append(f"{where / name}: missing ({DCP_METADATA} names it)")
        elif (size := path.stat().st_size) < end:
            problems.append(f"{where / name}: {size} bytes, {DCP_METADATA} reads up to {end}")
    return problems


def step_dirs(save_dir: Path) -> list[tuple[int, Path]]:
    """The step_N directories of a --save directory as (N, path), oldest first."""
    return sorted(
        (int(p.name.removeprefix("step_")), p)
        for p in save_dir.glob("step_*")
        if p.is_dir() and p.name.removeprefix("step_").isdigit()
    )


def older_whole_step(step_dir: Path) -> Path | None:
    """The newest step directory beside step_dir, older than it, that ``damage`` passes."""
    try:
        number = int(step_dir.name.removeprefix("step_"))
    except ValueError:
        return None
    for n, path in reversed(step_dirs(step_dir.parent)):
        if n < number and not damage(path):
            return path
    return None


def check_loadable(step_dir: Path) -> None:
    """ConfigError naming --load, the damaged files and an older step to load instead."""
    from hyrl.config import ConfigError

    problems = damage(step_dir)
    if not problems:
        return
    older = older_whole_step(step_dir)
    allowed = (
        f"an undamaged checkpoint: {older} passes these checks (--load {older})"
        if older is not None
        else "an undamaged checkpoint (none older in this directory passes these checks)"
    )
    raise ConfigError(
        "--load", str(step_dir), "damaged checkpoint: " + "; ".join(problems[:5]), allowed
    )


# -- on demand: hyrl checkpoint verify ---------------------------------------------------------
def _read_through(path: Path) -> str | None:
    """Read a file to its end (a .pt file through torch.load); the error, or None."""
    import torch

    try:
        if path.suffix == ".pt":
            torch.load(path, map_location="cpu", weights_only=False)  # hyrl's own files
        else:
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
    except Exception as err:  # noqa: BLE001 - the report names whatever went wrong
        return f"{type(err).__name__}: {err}"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def verify(step_dir: Path, checksums: bool = False) -> tuple[list[str], list[str]]:
    """(problems, notes) of one step: ``damage``, then every file read through, then with
    checksums the SHA-256 of every file against checksums.json (written when absent)."""
    problems, notes = damage(step_dir), []
    files = sorted(
        p
        for p in step_dir.rglob("*")
        if p.is_file() and p.name not in (MANIFEST_FILE, CHECKSUM_FILE)
    )
    for path in files:
        if (error := _read_through(path)) is not None:
            problems.append(f"{path.relative_to(step_dir)}: cannot be read through ({error})")
    if checksums:
        sums = {str(p.relative_to(step_dir)): _sha256(p) for p in files}
        recorded = step_dir / CHECKSUM_FILE
        if recorded.is_file():
            before = json.loads(recorded.read_text())
            problems += [
                f"{name}: SHA-256 {sums.get(name, 'missing')[:12]}..., recorded {digest[:12]}..."
                for name, digest in sorted(before.items())
                if sums.get(name) != digest
            ]
            notes.append(f"checksums compared with {recorded}")
        elif not problems:
            tmp = step_dir / f".tmp-{CHECKSUM_FILE}"
            tmp.write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, recorded)
            notes.append(f"checksums recorded in {recorded} (compared at the next verify)")
    return problems, notes
