"""Writes tests/data/math_sample.parquet from tests/data/math_sample.jsonl (same records, same
order).

    .venv/bin/python tests/data/make_parquet.py

The label column is text: the jsonl mixes string and number labels, and a parquet column has one
type, so numbers are written with str() (what load_records turns them into anyway).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    with open(os.path.join(HERE, "math_sample.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    table = pa.table(
        {
            "prompt": [r["prompt"] for r in rows],
            "label": [r["label"] if isinstance(r["label"], str) else str(r["label"]) for r in rows],
        }
    )
    out = os.path.join(HERE, "math_sample.parquet")
    pq.write_table(table, out)
    print(f"wrote {out}: {table.num_rows} rows")


if __name__ == "__main__":
    main()
