"""Reading a data file's records, for prompt files (prompt_data) and import sources (importer)
alike. Every user data file is opened here, as bytes:

* A file that starts with parquet's magic bytes b"PAR1" is parquet whatever its name; a file
  named .parquet that does not is refused (it is never read as something else).
* Text is UTF-8, a UTF-8 byte-order mark (BOM) at the start accepted and dropped. Text that
  is not UTF-8 is refused naming the file, the line, the byte offset and the bytes found;
  a gzip or zip file, or UTF-16 text (a BOM, or a NUL byte in the first 8 bytes), is named as
  such.

Each error is the caller's own error type, on one line, naming the file (and the line)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

PARQUET_MAGIC = b"PAR1"
UTF8_BOM = b"\xef\xbb\xbf"
# Files that are not UTF-8 text, by their first bytes, and what to do about them.
NOT_TEXT = (
    (b"\x1f\x8b", "a gzip file", "decompress it first (gunzip)"),
    (b"PK\x03\x04", "a zip archive", "extract it first (unzip)"),
    (b"\xff\xfe", "UTF-16 text (little-endian BOM)", "save it as UTF-8"),
    (b"\xfe\xff", "UTF-16 text (big-endian BOM)", "save it as UTF-8"),
)
TEXT_ALLOWED = "UTF-8 text (a UTF-8 BOM at the start is accepted)"


def one_line(text: object) -> str:
    """TEXT with every run of whitespace (newlines included) as one space: an error message
    quoting a library's message stays one line."""
    return " ".join(str(text).split())


def _head(path: str, error: type[ValueError]) -> bytes:
    """The first 8 bytes of the file; a file that cannot be opened raises `error`."""
    try:
        with open(path, "rb") as f:
            return f.read(8)
    except OSError as exc:
        raise error(f"{path}: cannot read ({one_line(exc.strerror or exc)})") from None


def is_parquet(path: str, error: type[ValueError]) -> bool:
    """True when the file is parquet by its content (it starts with b"PAR1"), whatever its
    name; False for any other file, except one named .parquet: that raises `error` naming
    what it starts with (it is not read as anything else)."""
    head = _head(path, error)
    if head.startswith(PARQUET_MAGIC):
        return True
    if path.endswith(".parquet"):
        raise error(
            f"{path}: named .parquet but not a parquet file: it starts with {head[:4]!r}, a "
            f"parquet file starts with {PARQUET_MAGIC!r}"
        )
    return False


def _check_text_head(path: str, head: bytes, error: type[ValueError]) -> None:
    """Raise `error` for a file whose first bytes say it is not UTF-8 text."""
    if head.startswith(PARQUET_MAGIC):
        raise error(f"{path}: a parquet file (starts with {PARQUET_MAGIC!r}), not text")
    for magic, what, fix in NOT_TEXT:
        if head.startswith(magic):
            raise error(
                f"{path}: {what} (starts with bytes {magic.hex(' ').upper()}), not UTF-8 "
                f"text; {fix}; allowed: {TEXT_ALLOWED}"
            )
    if b"\x00" in head:  # UTF-16 without a BOM, or binary: UTF-8 text holds no NUL
        raise error(
            f"{path}: a NUL byte at byte offset {head.index(0)}: UTF-16 text or a binary file, "
            f"not UTF-8 text; allowed: {TEXT_ALLOWED}"
        )


def _decode(raw: bytes, path: str, first_line: int, offset: int, error: type[ValueError]) -> str:
    """RAW (bytes of the file from line FIRST_LINE, at byte OFFSET) as text; bytes that are not
    UTF-8 raise `error` naming the file, the line and the byte offset in the file (from 0)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_number = first_line + raw.count(b"\n", 0, exc.start)
        found = " ".join(f"0x{b:02X}" for b in exc.object[exc.start : exc.end])
        raise error(
            f"{path} line {line_number}, byte offset {offset + exc.start}: not UTF-8 (found "
            f"{found}: {exc.reason}); allowed: {TEXT_ALLOWED}; re-encode the file, e.g. "
            f"`iconv -f LATIN1 -t UTF-8` if it is Latin-1"
        ) from None


def read_text_lines(path: str, error: type[ValueError]) -> Iterator[tuple[int, str]]:
    """(line number, text) for each line of a UTF-8 text file, first line 1, read as bytes and
    streamed; a leading BOM is dropped; bytes that are not UTF-8 raise `error` naming the
    file, the line and the byte offset."""
    _check_text_head(path, _head(path, error), error)
    with open(path, "rb") as f:
        offset = 0
        for line_number, raw in enumerate(f, start=1):
            start = len(UTF8_BOM) if line_number == 1 and raw.startswith(UTF8_BOM) else 0
            yield line_number, _decode(raw[start:], path, line_number, offset + start, error)
            offset += len(raw)


def read_text(path: str, error: type[ValueError]) -> str:
    """The whole of a UTF-8 text file, read as bytes; a leading BOM is dropped; bytes that are
    not UTF-8 raise `error` naming the file, the line and the byte offset."""
    _check_text_head(path, _head(path, error), error)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise error(f"{path}: cannot read ({one_line(exc.strerror or exc)})") from None
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    return _decode(data[start:], path, 1, start, error)


def read_jsonl(path: str, error: type[ValueError]) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each line of a .jsonl file that is not blank, first line 1; a
    line that is not UTF-8 or not JSON raises `error` naming the file and the line (and the
    byte offset, or the column)."""
    for line_number, line in read_text_lines(path, error):
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
