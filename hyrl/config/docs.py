"""docs/flags.md, rendered from the declarations: RunConfig's fields by group, the
applies-only-with table and the exclusive pairs, so the reference cannot drift from the code.

    python -m hyrl.config.docs            # print it
    python -m hyrl.config.docs --write    # write docs/flags.md
                                          # (tests/unit/config/test_flags_doc.py checks it)
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from hyrl.config.applies import APPLIES_ONLY_WITH
from hyrl.config.errors import flag_name
from hyrl.config.fields import GROUP_TITLES, GROUPS, _allowed_text, _base, _fields, _kind
from hyrl.config.parser import EXCLUSIVE_FLAGS, RECIPE_MARKER, SGLANG_PASS_PREFIX

FLAGS_MD = Path(__file__).resolve().parents[2] / "docs" / "flags.md"
REGENERATE = "python -m hyrl.config.docs --write"


class _Placeholders(dict):
    """Keeps a text's placeholders, in flag terms: {task} -> {--task}, {flag} stays."""

    def __missing__(self, key: str) -> str:
        return "{flag}" if key == "flag" else "{" + flag_name(key) + "}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _flags(names) -> str:
    return ", ".join(f"`{flag_name(n)}`" for n in names)


def _flag_cell(f: dataclasses.Field) -> str:
    if _base(_kind(f)) == "bool":
        return f"`{flag_name(f.name)}`, `--no-{flag_name(f.name)[2:]}`"
    return f"`{flag_name(f.name)}`"


def _type_cell(f: dataclasses.Field) -> str:
    kind = _kind(f)
    if _base(kind) == "bool":
        return "switch" + (" (none = not given)" if kind != "bool" else "")
    return _allowed_text(kind, f.metadata.get("choices"))


def _default_cell(f: dataclasses.Field) -> str:
    if f.default is None:
        return "none"
    if isinstance(f.default, bool):
        return "on" if f.default else "off"
    return f"`{f.default}`"


def render() -> str:
    """The text of docs/flags.md."""
    lines = [
        "# `hyrl train` flags",
        "",
        f"Generated from `hyrl/config/` by `{REGENERATE}`; do not edit by hand.",
        "",
        "Every flag is one field of `RunConfig` (`hyrl/config/fields.py`). Flags may repeat; "
        'the last one wins. A default of none means "not given": validation resolves it to '
        "the value it stands for (see `hyrl.config.resolve`). Undeclared "
        f"`{SGLANG_PASS_PREFIX}NAME [VALUE]` flags pass through to `sglang.launch_server` as "
        "`--NAME [VALUE]`.",
    ]
    fields = _fields()
    for group in GROUPS:
        lines += [
            "",
            f"## {GROUP_TITLES[group]}",
            "",
            "| flag | type | default | meaning |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {_flag_cell(f)} | {_cell(_type_cell(f))} | {_cell(_default_cell(f))} | "
            f"{_cell(f.metadata['help'])} |"
            for f in fields
            if f.metadata["group"] == group
        ]
    lines += [
        "",
        "## Flags that apply only with another",
        "",
        "Given without the condition, these flags would do nothing, so validation refuses them "
        "(`hyrl/config/applies.py`). In the texts, {--name} stands for the value of --name and "
        "{flag} for the flag refused.",
        "",
        "| flags | apply only with | refused as | allowed |",
        "|---|---|---|---|",
    ]
    for rule in APPLIES_ONLY_WITH:
        texts = _Placeholders()
        lines.append(
            f"| {_flags(rule.fields)} | {_cell(rule.condition)} | "
            f"{_cell(rule.problem.format_map(texts))} | "
            f"{_cell(rule.allowed.format_map(texts))} |"
        )
    lines += [
        "",
        "## Flags that exclude each other",
        "",
        "One side or the other, not both. In a recipe, what is appended after its "
        f"`{RECIPE_MARKER}` marker wins: the recipe's side of a pair is dropped when the "
        "appended flags take the other (`hyrl/config/parser.py`, `appended_wins`).",
        "",
        "| one side | the other side |",
        "|---|---|",
    ]
    lines += [f"| {_flags(a)} | {_flags(b)} |" for a, b in EXCLUSIVE_FLAGS]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m hyrl.config.docs", description="Render docs/flags.md from the declarations."
    )
    parser.add_argument("--write", action="store_true", help=f"write {FLAGS_MD}")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        FLAGS_MD.write_text(text, encoding="utf-8")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
