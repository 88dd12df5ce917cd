"""What `hyrl data import` reads: SOURCE as its files (a file, or a directory of shards) and
the rows of each file, every file read by its own format (hyrl/data/files.py opens them).

    source = find_sources("data/")           # Source(files=[SourceFile(path, format)], ...)
    for position, row in read_rows(source.files[0]):
        ...

A directory's shards are its .parquet, .jsonl and .json files and any file that is parquet
by its content, read in name order, each by its own format: rows become the same records
whatever the file holds, so a directory mixing parquet and jsonl shards imports all of them
rather than refusing or dropping some. Hidden files are skipped; anything else (a README, a
subdirectory) is not read and is named in `ignored`, which the import prints. Shard names in
Hugging Face's ``NAME-0000K-of-0000N`` form are checked: a shard missing, or one shard index
present twice (a parquet and its jsonl copy), is refused naming them, since either would
change the rows imported without a word.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hyrl.data.files import is_parquet, one_line, pyarrow_parquet, read_jsonl, read_text

SOURCE_EXTENSIONS = (".parquet", ".jsonl", ".json")
SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<index>\d+)-of-(?P<total>\d+)(?:\.[^.]+)?$")
PARQUET_BATCH_ROWS = 4096  # a 1.8M-row file stays streamed


class ImportDataError(ValueError):
    """A source that cannot be imported; the message names the file, row and what was found."""


@dataclass(frozen=True)
class SourceFile:
    """One file to read and its format: "parquet" (by its content), "jsonl" or "json"."""

    path: str
    format: str

    @property
    def renamed(self) -> bool:
        """True when the name's extension says another format than the content (a parquet
        file named .jsonl)."""
        return not self.path.endswith(f".{self.format}")


@dataclass
class Source:
    """SOURCE's files in reading order, and a directory's entries that are not read."""

    files: list[SourceFile]
    ignored: list[str] = field(default_factory=list)

    def formats(self) -> dict[str, int]:
        """{format: number of files} in the order first seen, e.g. {"parquet": 2, "jsonl": 1}."""
        counts: dict[str, int] = {}
        for source_file in self.files:
            counts[source_file.format] = counts.get(source_file.format, 0) + 1
        return counts


# -- finding the files -----------------------------------------------------------------------
def _source_file(path: str) -> SourceFile | None:
    """PATH as a SourceFile: parquet by its content, else by its extension; None for a file
    of another extension that is not parquet."""
    if is_parquet(path, ImportDataError):
        return SourceFile(path, "parquet")
    for extension in (".jsonl", ".json"):
        if path.endswith(extension):
            return SourceFile(path, extension[1:])
    return None


def _check_shard_names(directory: str, files: list[SourceFile]) -> None:
    """Refuse shards named NAME-K-of-N when one of the N is missing or one K is there twice."""
    groups: dict[tuple[str, str], dict[int, list[str]]] = {}
    for source_file in files:
        match = SHARD_NAME.match(os.path.basename(source_file.path))
        if match:
            group = groups.setdefault((match["stem"], match["total"]), {})
            group.setdefault(int(match["index"]), []).append(os.path.basename(source_file.path))
    for (stem, total), by_index in groups.items():
        for index, names in sorted(by_index.items()):
            if len(names) > 1:
                raise ImportDataError(
                    f"{directory}: {' and '.join(names)} are both shard {index} of {total} of "
                    f"{stem}; keep one of them (both would import its rows twice)"
                )
        width = len(total)
        missing = [
            f"{stem}-{index:0{width}d}-of-{total}"
            for index in range(int(total))
            if index not in by_index
        ]
        if missing:
            raise ImportDataError(
                f"{directory}: {len(missing)} of {int(total)} shards named {stem}-K-of-{total} "
                f"are missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; "
                f"download them all (a partial set would be imported without them)"
            )


def _directory(directory: str) -> Source:
    """A directory's shards in name order, and the entries that are not shards (module doc)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        reason = one_line(exc.strerror or exc)
        raise ImportDataError(f"{directory}: cannot list its files ({reason})") from None
    source = Source(files=[])
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith("."):
            continue
        source_file = None if os.path.isdir(path) else _source_file(path)
        if source_file is None:
            source.ignored.append(name + "/" if os.path.isdir(path) else name)
        else:
            source.files.append(source_file)
    if not source.files:
        found = f"; it holds {', '.join(source.ignored)}" if source.ignored else ", it is empty"
        raise ImportDataError(
            f"{directory}: a directory without shards{found}; allowed: a directory of "
            f"{', '.join(SOURCE_EXTENSIONS)} shards (parquet known by its content)"
        )
    _check_shard_names(directory, source.files)
    return source


def find_sources(source: str) -> Source:
    """SOURCE as its files: the file itself, or a directory's shards (module doc); a file of
    another extension that is not parquet, or a missing one, is refused."""
    if os.path.isdir(source):
        return _directory(source)
    if not os.path.isfile(source):
        if not source.endswith(SOURCE_EXTENSIONS):
            raise ImportDataError(
                f"{source}: unsupported extension; allowed: {', '.join(SOURCE_EXTENSIONS)} "
                f"or a directory of shards"
            )
        raise ImportDataError(f"{source}: no such file")
    source_file = _source_file(source)
    if source_file is None:
        raise ImportDataError(
            f"{source}: unsupported extension; allowed: {', '.join(SOURCE_EXTENSIONS)} or a "
            f"directory of shards (a parquet file is known by its content, whatever its name)"
        )
    return Source(files=[source_file])


# -- reading the rows ------------------------------------------------------------------------
def _read_parquet(path: str) -> Iterator[tuple[str, Any]]:
    pq = pyarrow_parquet(path, ImportDataError)
    row = 0
    try:
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for raw in batch.to_pylist():
                yield f"row {row}", raw
                row += 1
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ImportDataError(
            f"{path}: not a readable parquet file (at row {row}: {one_line(exc)})"
        ) from exc


def _read_jsonl(path: str) -> Iterator[tuple[str, Any]]:
    for line_number, raw in read_jsonl(path, ImportDataError):
        yield f"line {line_number}", raw


def _read_json_list(path: str) -> Iterator[tuple[str, Any]]:
    try:
        items = json.loads(read_text(path, ImportDataError))
    except json.JSONDecodeError as exc:
        raise ImportDataError(
            f"{path}: not one JSON list ({exc.msg} at line {exc.lineno}); a .json source "
            f"holds a list of objects, one object per line is .jsonl"
        ) from None
    if not isinstance(items, list):
        raise ImportDataError(
            f"{path}: holds a JSON {type(items).__name__}; a .json source holds a list of objects"
        )
    for i, raw in enumerate(items):
        yield f"item {i}", raw


def read_rows(source_file: SourceFile) -> Iterator[tuple[str, Any]]:
    """(position, row) for each row of one file, in file order, read by its format: parquet
    "row N" and .json "item N" counted from 0, jsonl "line N" from 1 (blank lines skipped)."""
    readers = {"parquet": _read_parquet, "jsonl": _read_jsonl, "json": _read_json_list}
    return readers[source_file.format](source_file.path)
