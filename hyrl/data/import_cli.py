"""`hyrl data import SOURCE --preset dapo-math|math500|aime --out FILE.jsonl`: a downloaded math
set (verl or Hugging Face parquet, slime jsonl, problem/answer columns) as hyrl's prompt/label
jsonl, and the `hyrl train` flags to use it with (docs/data.md).

Reads the whole source and checks every row before writing anything; writes OUT atomically
(a temporary file renamed onto it) and never replaces an existing OUT without --force. Prints
what was read, dropped and written, the answer format the prompts ask for and the flags.
Exits 0 when OUT was written, 2 on bad input or an OUT that cannot be written (nothing
written); either error is one line naming the file."""

from __future__ import annotations

import argparse
import sys

from hyrl.data.importer import (
    PRESETS,
    ImportDataError,
    ImportResult,
    check_out_path,
    import_rows,
    write_jsonl_atomic,
)

LAYOUT_TEXT = {
    "verl": "verl: prompt + reward_model.ground_truth",
    "slime": "slime: prompt + label",
    "problem/answer": "problem/answer: a bare problem and its answer",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hyrl data", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser(
        "import",
        help="a downloaded math set -> prompt/label jsonl",
        description=__doc__.split("\n\n")[0],
    )
    imp.add_argument(
        "source",
        help="a .parquet, .jsonl or .json file, or a directory of such shards (parquet is "
        "known by its content, whatever its name; text must be UTF-8)",
    )
    imp.add_argument(
        "--preset",
        required=True,
        choices=sorted(PRESETS),
        help="; ".join(f"{p.name}: {p.meant_for}" for p in PRESETS.values()),
    )
    imp.add_argument("--out", required=True, help="the .jsonl file to write")
    imp.add_argument("--force", action="store_true", help="replace --out if it exists")
    imp.add_argument(
        "--keep-duplicates",
        action="store_true",
        help="keep rows whose prompt and label repeat an earlier row (default: dropped, counted)",
    )
    imp.add_argument(
        "--drop-incomplete",
        action="store_true",
        help="drop rows without a prompt or an answer, counted (default: refused)",
    )
    return parser


def _files_read(result: ImportResult, source: str) -> list[str]:
    """The report's first lines: what was read, each file's format where the name does not say
    it, and a directory's entries that were not read."""
    files = result.source.files
    if len(files) == 1:
        read = source
    else:
        formats = ", ".join(f"{n} {name}" for name, n in result.source.formats().items())
        read = f"{len(files)} files ({formats}) in {source}"
    lines = [f"read {result.rows_read} rows from {read} ({LAYOUT_TEXT[result.layout]})"]
    lines += [
        f"note: {f.path} is {f.format} by its content and was read as {f.format}"
        for f in files
        if f.renamed
    ]
    if result.source.ignored:
        lines.append(
            f"not read (not a .parquet, .jsonl or .json shard): {', '.join(result.source.ignored)}"
        )
    return lines


def _report(result: ImportResult, source: str, preset: str, out: str) -> str:
    formats = result.answer_formats
    kept = len(result.records)
    lines = [
        *_files_read(result, source),
        f"preset {preset}: {result.wrapped} bare problems given its instruction, "
        f"{result.rows_read - result.incomplete_dropped - result.wrapped} prompts kept as written",
        f"dropped {result.duplicates_dropped} duplicates (same prompt and label as an earlier "
        f"row), {result.incomplete_dropped} incomplete",
    ]
    if result.prompts_with_several_labels:
        lines.append(
            f"note: {result.prompts_with_several_labels} prompts appear with more than one "
            f"label (each pair kept)"
        )
    lines.append(
        f'answer format asked for: {formats["answer_line"]} an "Answer:" line (DAPO), '
        f"{formats['boxed']} \\boxed{{}}, {formats['none']} neither"
    )
    if formats["none"]:
        lines.append(
            f"warning: {formats['none']} of {kept} prompts ask for no answer format; "
            f"--rm-type {result.rm_type} may not find their answers"
        )
    lines += [
        f"wrote {kept} prompts to {out}",
        "train on it:",
        f"  --prompt-data {out} --input-key prompt --label-key label --apply-chat-template "
        f"--rm-type {result.rm_type}",
        "or evaluate on it (same --input-key, --label-key, --apply-chat-template):",
        f"  --eval-prompt-data NAME {out}",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        check_out_path(args.out, force=args.force)  # before reading a large source
        result = import_rows(
            args.source,
            PRESETS[args.preset],
            keep_duplicates=args.keep_duplicates,
            drop_incomplete=args.drop_incomplete,
        )
        write_jsonl_atomic(result.records, args.out, force=args.force)
    except ImportDataError as exc:
        print(f"hyrl data import: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # --out cannot be written (permissions, a full disk)
        where = f" ({exc.filename})" if exc.filename else ""
        reason = exc.strerror or exc
        print(
            f"hyrl data import: error: --out {args.out}: cannot write{where}: {reason}",
            file=sys.stderr,
        )
        return 2
    print(_report(result, args.source, args.preset, args.out))
    return 0
