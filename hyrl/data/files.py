"""Reading a data file's records, for prompt files (prompt_data) and import sources (importer)
alike: the lines of a .jsonl file, and pyarrow for a .parquet one. Each error is the caller's
own error type, its message naming the file (and the line)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def read_jsonl(path: str, error: type[ValueError]) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each line of a .jsonl file that is not blank, first line 1; a
    line that is not JSON raises `error` naming the file, the line and the column."""
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(
                    f"{path} line {line_number}: not valid JSON ({exc.msg} at column {exc.colno})"
                ) from None
            yield line_number, value


def pyarrow_parquet(path: str, error: type[ValueError]):
    """pyarrow.parquet, imported when a .parquet file is read (pyarrow is optional): without it
    `error` names the file and how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise error(f"{path}: reading .parquet needs pyarrow (pip install pyarrow): {exc}") from exc
    return pq
