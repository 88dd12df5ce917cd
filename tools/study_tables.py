"""The batch-size study's committed reports, and the tables the docs quote from them.

`hyrl analyze` writes DIR/report.json next to the run directories it read: it names them by
absolute path and holds every seed-mean curve. What the docs quote is a smaller copy:

    python tools/study_tables.py commit ANALYSIS/report.json docs/sweep/report.json
        the copy without absolute paths (a run is named by its name, any other path inside the
        analysed sweep by its path relative to it) and without the curves (the plots hold them)
    python tools/study_tables.py table docs/sweep/report.json
        the over-seeds table and verdicts as docs/batch-size.md quotes them (markdown), rebuilt
        from the copy alone; with several reports, one after the other
    python tools/study_tables.py update docs/batch-size.md     (or: check)
        rewrite (or only compare) every block of a markdown file between
        <!-- study_tables: REPORT --> and <!-- /study_tables --> with REPORT's table, REPORT
        relative to the repository; check exits 1 naming each block that differs

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
    """`report` (hyrl analyze's report.json of the sweep directory `analysed`, or hyrl tune's
    of its --out) without absolute paths (those in `analysed` relative to it, those elsewhere
    in this checkout relative to the checkout; any other is refused) and without the seed-mean
    curves."""
    out = json.loads(json.dumps(report))  # a deep copy of plain JSON
    for row in out.get("runs", []):
        row["path"] = row["name"]
    seeded = out.get("over_seeds")
    if seeded:
        for member in seeded.get("members", []):
            for key in DROPPED_MEMBER_KEYS:
                member.pop(key, None)
    root, repo = str(analysed.resolve()), str(REPO)
    # paths in the analysed directory relative to it, other paths in this checkout (the
    # recipe, the base checkpoint) relative to the checkout
    prefixes = sorted(
        [(root + "/", ""), (root, "."), (repo + "/", "")],
        key=lambda pair: len(pair[0]),
        reverse=True,
    )
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


BLOCK_START = "<!-- study_tables: "
BLOCK_END = "<!-- /study_tables -->"
REPO = Path(__file__).resolve().parent.parent


def table_lines(report: dict) -> list[str]:
    """From a report alone: a `hyrl tune` report's report.md, or the over-seeds section of a
    `hyrl analyze` report's (headings in bold, so they sit inside another document's
    section)."""
    if "recommendation" in report:  # hyrl tune's report.json
        from hyrl.batchsize.tune.report import render_markdown

        lines = render_markdown(report, []).rstrip("\n").split("\n")
        return [
            f"**{line.lstrip('#').strip()}**" if line.startswith("#") else line for line in lines
        ]
    metric, value = report["target"]["metric"], report["target"]["value"]
    seeded = report.get("over_seeds")
    head = [f"Target {metric} = {value:g}; reference {report['reference']}."]
    if not seeded:
        return [*head, "One seed per member: no spread and no confidence."]
    section = over_seeds_section(seeded)
    if section and section[0].startswith("## "):
        section = [f"**{section[0][3:]}**", *section[1:]]
    return [*head, "", *section]


def render_blocks(text: str, repo: Path = REPO) -> tuple[str, list[str]]:
    """(text with every study_tables block rebuilt from its report, the reports whose block
    changed)."""
    lines, out, changed = text.split("\n"), [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if not line.startswith(BLOCK_START):
            i += 1
            continue
        report = line[len(BLOCK_START) :].removesuffix("-->").strip()
        try:
            end = lines.index(BLOCK_END, i + 1)
        except ValueError:
            raise ValueError(f"{report}: its block has no {BLOCK_END}") from None
        new = table_lines(json.loads((repo / report).read_text()))
        if lines[i + 1 : end] != new:
            changed.append(report)
        out += [*new, BLOCK_END]
        i = end + 1
    return "\n".join(out), changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    commit = sub.add_parser("commit", help="write the copy to commit")
    commit.add_argument("report", type=Path, help="hyrl analyze's report.json")
    commit.add_argument("dest", type=Path, help="where the copy goes, e.g. docs/sweep/report.json")
    commit.add_argument(
        "--root",
        type=Path,
        default=None,
        help="the directory whose paths become relative (default: the analysed sweep's, "
        "from the report's runs; required for a hyrl tune report: its --out)",
    )
    table = sub.add_parser("table", help="print the tables of committed reports (markdown)")
    table.add_argument("reports", type=Path, nargs="+")
    for name, what in (("update", "rewrite"), ("check", "compare")):
        doc = sub.add_parser(name, help=f"{what} the study_tables blocks of a markdown file")
        doc.add_argument("doc", type=Path)
    args = parser.parse_args(argv)
    if args.command in ("update", "check"):
        if not args.doc.is_file():
            parser.error(f"DOC {args.doc}: no such file")
        text = args.doc.read_text()
        new, changed = render_blocks(text)
        if args.command == "update":
            args.doc.write_text(new)
            print(f"{args.doc}: {len(changed)} block(s) rewritten")
            return 0
        for report in changed:
            print(f"{args.doc}: the table of {report} differs from the report's; run update")
        return 1 if changed else 0
    if args.command == "commit":
        if not args.report.is_file():
            parser.error(f"REPORT {args.report}: no such file; allowed: hyrl analyze's report.json")
        report = json.loads(args.report.read_text())
        if args.root is not None:
            analysed = args.root
        elif report.get("runs"):  # an analysis: the run directories sit in the analysed sweep
            analysed = Path(report["runs"][0]["path"]).resolve().parent
        else:
            parser.error("REPORT: not an analysis report; name the directory with --root")
        try:
            copy = committed_copy(report, analysed)
        except ValueError as err:
            parser.error(f"REPORT {args.report}: {err}; allowed: a report of runs under --root")
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
