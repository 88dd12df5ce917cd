"""Small data files written by a test, and `hyrl data import` run in-process: what the tests of
hyrl/data (the importer, the input rules) share."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from hyrl.cli import main as hyrl_main


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def data_import(capsys, *argv):
    """`hyrl data import ARGV` in this process: (exit code, stdout, stderr)."""
    rc = hyrl_main(["data", "import", *map(str, argv)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err
