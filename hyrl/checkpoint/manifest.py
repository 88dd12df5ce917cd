"""What a checkpoint step directory holds, checked before it is loaded.

Each save writes `manifest.json` into the step directory (with the rest, before the rename that
makes it complete): every file of the step and its size in bytes. Before a resume loads it
(hyrl.train.preflight, then every rank: ``check_loadable``), the step is checked without reading its
tensors:

- every file of the manifest is there with its size (a truncated or missing file is named);
- every Megatron distributed checkpoint in it (a directory with torch's `.metadata`) has a
  readable `.metadata`, and every byte range it names lies inside an existing `.distcp` file;
- every file a load opens, by trainer_state.json (hyrl.checkpoint.step_files), is there.

That costs a stat per file and one small read per distributed checkpoint, at any model size.
A step without a manifest (saved before manifests, or the file was lost) has no sizes to compare:
those files are also checked by their format (JSON parses, a torch file is a whole zip archive:
one read of its tail), and ``unrecorded`` says so, for a note. Checksums cost minutes at 30B, so
they are on demand: ``verify`` (`hyrl checkpoint verify DIR [--checksums]`) also reads every file
through (torch.load of the .pt files, every byte of the rest), and with --checksums records
SHA-256 sums in `checksums.json` at its first run and compares them at the next.

A damaged step is named with the file and what is wrong (each file once); the message names the
newest older step that passes, and how to load it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hyrl.checkpoint import step_files

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
        return {str(k): int(v) for k, v in json.loads(path.read_text())["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"not a manifest ({err!r})") from None


def damage(step_dir: Path) -> list[str]:
    """What is wrong with the step directory, one line per damaged file ("FILE: what"); [] when
    it is whole, as far as sizes (or, without a manifest, formats), the distributed checkpoints'
    indexes and the files trainer_state.json names tell."""
    return [f"{name}: {what}" for name, what in _damage(step_dir).items()]


def _damage(step_dir: Path) -> dict[str, str]:
    """{file: what is wrong}, each file once (the first check that fails it names it)."""
    problems: dict[str, str] = {}
    try:
        files = read_manifest(step_dir)
    except ValueError as err:
        problems[MANIFEST_FILE] = str(err)  # then checked as a step without one
        files = None
    for name, size in (files or {}).items():
        path = step_dir / name
        if not path.is_file():
            problems[name] = "missing"
        elif (found := path.stat().st_size) != size:
            problems[name] = f"{found} bytes, the save wrote {size}"
    for index in sorted(step_dir.rglob(DCP_METADATA)):
        for name, what in _dcp_damage(index.parent, step_dir):
            problems.setdefault(name, what)
    for name, what in step_files.damage(step_dir, contents=files is None).items():
        problems.setdefault(name, what)
    return problems


def unrecorded(step_dir: Path) -> str | None:
    """A note for a step whose manifest is missing (its sizes were not recorded), or None."""
    if (step_dir / MANIFEST_FILE).is_file():
        return None
    return (
        f"{step_dir} has no {MANIFEST_FILE}: its file sizes were not recorded (saved before "
        "manifests, or the file was lost); checked instead by megatron's .metadata and each "
        "file's format"
    )


def _dcp_damage(directory: Path, step_dir: Path) -> list[tuple[str, str]]:
    """A distributed checkpoint's index against its data files: (file, what is wrong)."""
    from torch.distributed.checkpoint import FileSystemReader

    where = directory.relative_to(step_dir)
    try:
        metadata = FileSystemReader(str(directory)).read_metadata()
    except Exception as err:  # noqa: BLE001 - torch's unpickling raises many kinds
        return [(str(where / DCP_METADATA), f"cannot be read ({type(err).__name__}: {err})")]
    needed: dict[str, int] = {}  # data file -> the end of the last byte range in it
    for item in (metadata.storage_data or {}).values():
        end = item.offset + item.length
        needed[item.relative_path] = max(needed.get(item.relative_path, 0), end)
    problems = []
    for name, end in sorted(needed.items()):
        path = directory / name
        if not path.is_file():
            problems.append((str(where / name), f"missing ({DCP_METADATA} names it)"))
        elif (size := path.stat().st_size) < end:
            problems.append((str(where / name), f"{size} bytes, {DCP_METADATA} reads up to {end}"))
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
    """(problems, notes) of one step: ``damage``, then every file it did not name read through,
    then with checksums the SHA-256 of every file against checksums.json (written when absent)."""
    named = _damage(step_dir)
    problems = [f"{name}: {what}" for name, what in named.items()]
    notes = [note] if (note := unrecorded(step_dir)) else []
    files = sorted(
        p
        for p in step_dir.rglob("*")
        if p.is_file() and p.name not in (MANIFEST_FILE, CHECKSUM_FILE)
    )
    for path in files:
        name = str(path.relative_to(step_dir))
        if name not in named and (error := _read_through(path)) is not None:
            problems.append(f"{name}: cannot be read through ({error})")
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
