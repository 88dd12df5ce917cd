"""The batch-size study's committed reports, and the tables the docs quote from them.

`hyrl analyze` writes DIR/report.json next to the run directories it read: it names them by
absolute path and holds every seed-mean curve. What the docs quote is a smaller copy:

    python tools/study_tables.py commit ANALYSIS/report.json docs/sweep/report.json
        the copy without absolute paths (a run is named by its name, any other path inside the
        analysed sweep by its path relative to it) and without the curves (the plots hold them)
    python tools/study_tables.py table docs/sweep/report.json
        the over-seeds table and verdicts as docs/batch-size.md quotes them (markdown), rebuilt
        from the copy alone; with several reports, one after the other

Reads and writes JSON only; imports no training code.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hyrl.batchsize.report_seeds import over_seeds_section

# what the committed copy leaves out: the curves (the plots draw them) and per-stage details
DROPPED_MEMBER_KEYS = ("curve_vs_samples", "curve_vs_time")


def _relative(value: Any, prefixes: list[tuple[str, str]]) -> Any:
    """Every string that starts with one of the prefixes (longest first) gets its replacement."""
    if isinstance(value, str):
        for prefix, replacement in prefixes:
            if value.startswith(prefix):
                return replacement + value[len(prefix) :]
        return value
    if isinstance(value, list):
        return [_relative(v, prefixes) for v in value]
    if isinstance(value, dict):
        return {k: _relative(v, prefixes) for k, v in value.items()}
    return value


def committed_copy(report: dict, analysed: Path) -> dict:
    """`report` (hyrl analyze's report.json of the sweep directory `analysed`) without absolute
    paths and without the seed-mean curves."""
    out = json.loads(json.dumps(report))  # a deep copy of plain JSON
    for row in out.get("runs", []):
        row["path"] = row["name"]
    seeded = out.get("over_seeds")
    if seeded:
        for member in seeded.get("members", []):
            for key in DROPPED_MEMBER_KEYS:
                member.pop(key, None)
    root = str(analysed.resolve())
    prefixes = sorted([(root + "/", ""), (root, ".")], key=lambda pair: len(pair[0]), reverse=True)
    out = _relative(out, prefixes)
    left = [s for s in _strings(out) if s.startswith("/")]
    if left:
        raise ValueError(f"absolute paths left in the copy: {left[:3]}")
    return out


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def table_lines(report: dict) -> list[str]:
    """The over-seeds section of `hyrl analyze`'s report.md, from a report alone."""
    metric, value = report["target"]["metric"], report["target"]["value"]
    seeded = report.get("over_seeds")
    head = [f"Target {metric} = {value:g}; reference {report['reference']}."]
    if not seeded:
        return [*head, "One seed per member: no spread and no confidence."]
    return [*head, "", *over_seeds_section(seeded)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commit = sub.add_parser("commit", help="write the copy to commit")
    commit.add_argument("report", type=Path, help="hyrl analyze's report.json")
    commit.add_argument("dest", type=Path, help="where the copy goes, e.g. docs/sweep/report.json")
    table = sub.add_parser("table", help="print the tables of committed reports (markdown)")
    table.add_argument("reports", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "commit":
        if not args.report.is_file():
            parser.error(f"REPORT {args.report}: no such file; allowed: hyrl analyze's report.json")
        report = json.loads(args.report.read_text())
        # report.json sits in the analysis directory, inside (or beside) the analysed sweep
        analysed = Path(report["runs"][0].get("path", args.report.parent)).resolve().parent
        copy = committed_copy(report, analysed)
        args.dest.parent.mkdir(parents=True, exist_ok=True)
        args.dest.write_text(json.dumps(copy, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.dest} ({args.dest.stat().st_size:,} bytes)")
        return 0
    for i, path in enumerate(args.reports):
        if not path.is_file():
            parser.error(f"REPORT {path}: no such file")
        if i:
            print()
        print(f"<!-- {path} -->")
        print("\n".join(table_lines(json.loads(path.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
