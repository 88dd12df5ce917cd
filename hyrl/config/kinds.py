"""How a flag is declared (`_opt`: default, help, group, choices), the condition a flag applies
only under (`AppliesOnlyWith`), and the kinds of value a flag takes: their names in messages,
and the type check every config passes first.

Every field of `RunConfig` is declared with `_opt`; the parser, the checks and docs/flags.md
read a field's kind from its annotation (`_kind`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hyrl.config.errors import _fail


def _opt(
    default,
    help: str,
    group: str,
    choices: tuple | None = None,
    *,
    resume_may_change: bool = False,
    run_output: bool = False,
):
    """A RunConfig field: its default, help text (with its unit), group and choices; and two
    facts the central modules gather from the fields: a resumed run may change it
    (`hyrl.config.resume.RESUME_MAY_CHANGE`), and it names one of the run's records or side
    outputs, which `hyrl eval` never writes (`hyrl.config.fields.RUN_OUTPUTS`)."""
    metadata: dict[str, str | tuple | bool] = {"help": help, "group": group}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if resume_may_change:
        metadata["resume_may_change"] = True
    if run_output:
        metadata["run_output"] = True
    return field(default=default, metadata=metadata)


def _set(value: Any, default: Any) -> bool:
    """Given: not none."""
    return value is not None


def _on(value: Any, default: Any) -> bool:
    """Given: switched on, or set to a value other than none."""
    return value not in (None, False)


def _changed(value: Any, default: Any) -> bool:
    """Given: set to a value other than its default."""
    return value is not None and value != default


# The settings a row's condition reads: its concern's flags, or an earlier concern's.
Flags = TypeVar("Flags")


@dataclass(frozen=True)
class AppliesOnlyWith(Generic[Flags]):
    """The flags `fields` do something only when `holds(config)`; `condition` says when.

    A row of a concern's `APPLIES_ONLY_WITH`, which `hyrl.config.conditional_flags` gathers and
    checks: a flag of `fields` given (`given`) without the condition is refused with `problem`
    and `allowed`, `str.format`ted with the config's fields and `flag` (the refused flag).
    `condition` is the condition in flag terms, for docs/flags.md. `holds` reads one
    concern's flags (the type parameter: `AppliesOnlyWith[RolloutFlags]`), its own or those
    of a concern before it (`hyrl.config.concerns`: the concerns' order)."""

    fields: tuple[str, ...]
    condition: str
    holds: Callable[[Flags], bool]
    problem: str
    allowed: str
    given: Callable[[Any, Any], bool] = _set  # (value, default) -> whether the flag was given


View = TypeVar("View")


def view(cls: type[View], config: Any, **values: Any) -> View:
    """A concern's settings view: `cls`, a frozen dataclass, with each field `values` does not
    give read from the attribute of `config` of the same name (the flag's field)."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)}")
    return cls(**{n: values[n] if n in values else getattr(config, n) for n in names})


# "opt" kinds also take None ("none" on the command line): the flag was not given.
_KINDS = {
    int: "int",
    float: "float",
    str: "str",
    bool: "bool",
    int | None: "optint",
    float | None: "optfloat",
    str | None: "optstr",
    bool | None: "optbool",
    list[str] | None: "optlist",
}
_KIND_NAMES = {
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
    "bool": "true or false",
    "optint": "an integer or 'none'",
    "optfloat": "a finite number or 'none'",
    "optstr": "a string or 'none'",
    "optbool": "true, false or none",
    "optlist": "one or more strings, or none",
}
_TYPE_NAMES = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "int | None": int | None,
    "float | None": float | None,
    "str | None": str | None,
    "bool | None": bool | None,
    "list[str] | None": list[str] | None,
}


def _resolve_type(annotation):
    # `from __future__ import annotations` leaves field types as strings.
    if isinstance(annotation, str):
        return _TYPE_NAMES[annotation]
    return annotation


def _base(kind: str) -> str:
    """The kind without its optional marker: optint -> int."""
    return kind[3:] if kind.startswith("opt") else kind


def _kind(f: dataclasses.Field) -> str:
    return _KINDS[_resolve_type(f.type)]


def _allowed_text(kind: str, choices: tuple | None) -> str:
    if choices:
        return (
            "one of "
            + ", ".join(str(c) for c in choices)
            + (", none" if kind.startswith("opt") else "")
        )
    return _KIND_NAMES[kind]


def _check_types(cfg: Any) -> None:
    """Every value of the dataclass `cfg` (a config as parsed) has its field's type and, where
    it has choices, is one of them."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        kind = _kind(f)
        base = _base(kind)
        if value is None and kind != base:
            continue  # not given
        if base == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif base == "bool":
            ok = isinstance(value, bool)
        elif base == "str":
            ok = isinstance(value, str)
        elif base == "list":
            ok = isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)
        else:
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
            )
        if not ok:
            _fail(
                f.name,
                value,
                f"wrong type ({type(value).__name__})",
                _allowed_text(kind, f.metadata.get("choices")),
            )
        choices = f.metadata.get("choices")
        if choices and value not in choices:
            _fail(f.name, value, "not a valid choice", _allowed_text(kind, choices))
