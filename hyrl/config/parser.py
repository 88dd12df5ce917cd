"""The `hyrl train` command line: the parser generated from RunConfig's fields, `parse_args`,
SGLang pass-through flags and the recipe marker (`appended_wins`); and what every other `hyrl
<command>`'s parser shares (`parse_or_exit_code`)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from collections.abc import Iterable, Sequence

from hyrl.config.concerns import batch, critic, data, optimizer
from hyrl.config.errors import HELP_HINT, ConfigError, flag_name
from hyrl.config.fields import GROUP_TITLES, GROUPS, RunConfig, _fields
from hyrl.config.foreign.built_in import BUILT_IN, refused_by_fields, split_built_in
from hyrl.config.foreign.sglang import MULTI_VALUE_FLAGS, RENAMED_FLAGS, SGLANG_VERSION
from hyrl.config.kinds import _allowed_text, _base, _kind
from hyrl.config.names import VALUE_ALIASES, other_names, renamed_notes, unknown_flag_hint


class _Abort(Exception):
    """Carries a ConfigError through argparse (which swallows ValueError from type functions)."""

    def __init__(self, error: ConfigError):
        super().__init__(str(error))
        self.error = error


def _converter(f: dataclasses.Field):
    kind = _kind(f)
    base = _base(kind)
    choices = f.metadata.get("choices")
    flag = flag_name(f.name)

    def convert(text: str):
        if kind != base and text.strip().lower() == "none":
            return None
        value: int | float | str
        try:
            if base == "int":
                value = int(text)
            elif base == "float":
                value = float(text)
                if not math.isfinite(value):
                    raise _Abort(
                        ConfigError(flag, text, "not a finite number", _allowed_text(kind, choices))
                    )
            else:
                value = VALUE_ALIASES.get((f.name, text), text)
        except ValueError:
            raise _Abort(
                ConfigError(
                    flag,
                    text,
                    "not an integer" if base == "int" else "not a number",
                    _allowed_text(kind, choices),
                )
            ) from None
        if choices and value not in choices:
            by_lower = {str(c).lower(): str(c) for c in choices}
            close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1)
            close = [by_lower[m] for m in close]
            problem = "not a valid choice" + (f" (did you mean {close[0]}?)" if close else "")
            raise _Abort(ConfigError(flag, text, problem, _allowed_text(kind, choices)))
        return value

    convert.__name__ = kind
    return convert


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises ConfigError instead of printing and exiting; `hint`: where
    the flags are listed, for messages."""

    hint = HELP_HINT

    def error(self, message: str):  # argparse's API: called on a parse error
        raise ConfigError("command line", None, message, self.hint)


def parse_or_exit_code(parser: argparse.ArgumentParser, argv: list[str]):
    """argparse's namespace, or the exit code it asked for (2 on a bad flag, 0 on --help), so a
    command's `main` returns its code instead of exiting the process."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2


def build_parser(prog: str = "hyrl train") -> argparse.ArgumentParser:
    """The `hyrl train` parser, generated from RunConfig's fields and grouped by concern."""
    parser = _RaisingParser(
        prog=prog,
        description="Train a Mixture-of-Experts policy with GRPO or PPO on Megatron-core. "
        "Flags may repeat; the last one wins.",
        allow_abbrev=False,
        exit_on_error=False,
    )
    groups = {name: parser.add_argument_group(GROUP_TITLES[name]) for name in GROUPS}
    for f in _fields():
        default = f.default
        help_text = f"{f.metadata['help']} (default: {'none' if default is None else default})"
        _add_field(groups[f.metadata["group"]], f, default, help_text, other_names(f.name))
    return parser


def _add_field(group, f: dataclasses.Field, default, help_text: str, aliases=()) -> None:
    """Field f's flag (--some-name, and aliases) in an argument group of a parser."""
    kind = _kind(f)
    if kind == "optlist":  # --flag A B C; "--flag none" = not given
        group.add_argument(
            flag_name(f.name),
            *aliases,
            dest=f.name,
            default=default,
            nargs="+",
            type=_converter(f),
            metavar="VALUE",
            help=help_text,
        )
    elif _base(kind) == "bool":
        # An optional bool stays None (not given) unless --flag or --no-flag appears.
        group.add_argument(
            flag_name(f.name),
            *aliases,
            dest=f.name,
            default=default,
            action=argparse.BooleanOptionalAction,
            help=help_text,
        )
    else:
        kwargs = {}
        choices = f.metadata.get("choices")
        if choices and kind == _base(kind):
            kwargs["choices"] = choices
        elif choices:
            # argparse would reject None ('none') against the choices; the converter checks.
            kwargs["metavar"] = "{" + ",".join(str(c) for c in choices) + "}|none"
        else:
            kwargs["metavar"] = _base(kind).upper() + ("|none" if kind != _base(kind) else "")
        group.add_argument(
            flag_name(f.name),
            *aliases,
            dest=f.name,
            default=default,
            type=_converter(f),
            help=help_text,
            **kwargs,
        )


def field_parser(
    prog: str, description: str, names: tuple[str, ...], default_text: str, aliases: dict
) -> argparse.ArgumentParser:
    """A parser of some of `hyrl train`'s flags (RunConfig fields `names`, with train's names
    and other names, types, choices and help; `aliases`: field -> more names), for another
    command: a flag not given is absent from the namespace (`parse_given`), its help says
    `default_text`. Errors are ConfigErrors that point at `prog --help`. A name that is no
    field raises ValueError (a renamed flag must be renamed here too)."""
    fields = {f.name: f for f in _fields()}
    unknown = [name for name in names if name not in fields]
    if unknown:
        raise ValueError(f"{prog}: not RunConfig fields: {unknown}")
    parser = _RaisingParser(
        prog=prog, description=description, allow_abbrev=False, exit_on_error=False
    )
    parser.hint = f"{prog} --help lists its flags"
    groups = {name: parser.add_argument_group(GROUP_TITLES[name]) for name in GROUPS}
    for f in _fields():
        if f.name in names:
            help_text = f"{f.metadata['help']} (default: {default_text})"
            more = (*other_names(f.name), *aliases.get(f.name, ()))
            _add_field(groups[f.metadata["group"]], f, argparse.SUPPRESS, help_text, more)
    return parser


def parse_given(parser: argparse.ArgumentParser, argv: list[str]) -> dict:
    """The flags given on the command line as {dest: value}, for a `field_parser` (whose
    defaults are suppressed); ConfigError on unknown flags or a bad value, as `parse_args`.
    An old name used gets its note on stderr (rank 0), as in `parse_args`."""
    import sys

    if os.environ.get("RANK", "0") == "0":
        for note in renamed_notes(argv):
            print(f"hyrl: {note}", file=sys.stderr, flush=True)
    given = vars(_parse_known(parser, argv))
    for f in _fields():
        if _kind(f) == "optlist" and f.name in given:
            given[f.name] = _list_or_none(f, given[f.name])
    return given


def _all_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def _action_for(parser: argparse.ArgumentParser, option: str):
    for action in parser._actions:
        if option in action.option_strings:
            return action
    return None


def _argument_error(
    parser: argparse.ArgumentParser, err: argparse.ArgumentError, argv: list[str]
) -> ConfigError:
    option = (err.argument_name or "").split("/")[0]
    action = _action_for(parser, option)
    if action is None:
        return ConfigError(option or "command line", None, err.message, _hint(parser))
    if isinstance(action, argparse.BooleanOptionalAction):
        given = next(
            (a for a in argv if a.split("=", 1)[0] in action.option_strings and "=" in a), option
        )
        flag, _, value = given.partition("=")
        return ConfigError(
            flag, value or None, "a boolean flag takes no value", " or ".join(action.option_strings)
        )
    f = next((f for f in _fields() if f.name == action.dest), None)  # None: another command's
    return ConfigError(
        option,
        None,
        f"{err.message} (write {option}=VALUE for a value that starts with '-')",
        _allowed_text(_kind(f), f.metadata.get("choices")) if f else str(action.metavar),
    )


def _flag_hint(parser: argparse.ArgumentParser, flag: str) -> str:
    """What to say of one unknown flag: slime's or Megatron-LM's equivalent (or why it is not
    supported) from the table in hyrl.config.foreign, else the closest hyrl flags."""
    foreign = unknown_flag_hint(flag)
    if foreign is not None:
        return foreign
    close = difflib.get_close_matches(flag, _all_flags(parser), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(close)}?" if close else "not a hyrl flag"


def _unknown_error(
    parser: argparse.ArgumentParser,
    extras: list[str],
    argv: list[str],
    refused: Sequence[tuple[str, str | None]] = (),
) -> ConfigError:
    """Every unknown flag and stray argument at once (a value after an unknown flag is taken as
    its value), with `refused`: foreign flags hyrl knows but refuses as given; a lone stray
    argument is its own error. `argv`: the command line as given, to find what a stray follows."""
    unknown: list[tuple[str, str | None]] = []
    strays: list[ConfigError] = []
    for i, token in enumerate(extras):
        if token.startswith("-") and token not in ("-", "--"):
            flag, sep, value = token.partition("=")
            unknown.append((flag, value if sep else None))
        elif i == 0 or not extras[i - 1].startswith("-") or "=" in extras[i - 1]:
            strays.append(_stray_error(parser, token, argv))
        elif unknown and unknown[-1][0] in BUILT_IN:  # a flag hyrl takes, refused for its value
            unknown[-1] = (unknown[-1][0], token)
    unknown += refused
    if not unknown:
        return strays[0]
    if len(unknown) == 1 and not strays:
        flag, given = unknown[0]
        hint = _flag_hint(parser, flag)
        allowed = f"{hint} ({_hint(parser)})" if hint.startswith("did you") else _hint(parser)
        problem = (
            "unknown flag" if hint.startswith(("did you", "not a")) else f"unknown flag: {hint}"
        )
        return ConfigError(flag, given, problem, allowed)
    # A flag hyrl takes with another value is shown with the value it refuses.
    lines = "".join(
        f"\n  {flag}{f' {value}' if flag in BUILT_IN and value else ''}: "
        + _flag_hint(parser, flag)
        for flag, value in unknown
    )
    lines += "".join(f"\n  {stray.value}: {stray.problem}" for stray in strays)
    counted = f"{len(unknown)} unknown flag{'s' if len(unknown) > 1 else ''}"
    if strays:
        counted += f" and {len(strays)} stray argument{'s' if len(strays) > 1 else ''}"
    return ConfigError(
        ", ".join(flag for flag, _ in unknown), None, f"{counted}:{lines}\n", _hint(parser)
    )


def _stray_position(parser: argparse.ArgumentParser, token: str, argv: list[str]) -> int:
    """Where in argv the stray `token` stands: its first occurrence that is no flag's value
    (-1 when argv does not hold it)."""
    for i, candidate in enumerate(argv):
        if candidate != token:
            continue
        before = argv[i - 1] if i else ""
        takes_value = before.startswith("-") and "=" not in before
        action = _action_for(parser, before)
        if not takes_value or isinstance(action, argparse.BooleanOptionalAction):
            return i
        entry = BUILT_IN.get(before)
        if entry is not None and entry.value is None:
            return i
    return -1


def _stray_error(parser: argparse.ArgumentParser, token: str, argv: list[str]) -> ConfigError:
    """A stray argument, naming the flag it follows and what to write instead."""
    problem = "stray argument not attached to any flag"
    index = _stray_position(parser, token, argv)
    owner = next((j for j in range(index - 1, -1, -1) if argv[j].startswith("--")), -1)
    if owner >= 0:
        flag, sep, inline = argv[owner].partition("=")
        values = [inline] if sep else argv[owner + 1 : index]
        after = " ".join([flag, *values])
        action = _action_for(parser, flag)
        entry = BUILT_IN.get(flag)
        if isinstance(action, argparse.BooleanOptionalAction) or (entry and entry.value is None):
            problem += (
                f" (it follows {after}, a boolean flag that takes no value; use "
                f"{' or '.join(action.option_strings) if action else flag + ' alone'})"
            )
        elif action is not None:
            problem += (
                f" (it follows {after}: {flag} takes one value; quote a value that holds spaces)"
            )
        elif flag.startswith(SGLANG_PASS_PREFIX):
            name = "--" + flag[len(SGLANG_PASS_PREFIX) :]
            problem += (
                f" (it follows {after}: hyrl passes {flag} to SGLang as {name} with one value, "
                f"as SGLang {SGLANG_VERSION}'s parser takes it; for a list, write "
                f"--sglang-server-args '{name} {' '.join([*values, token])}')"
            )
        else:
            problem += f" (it follows {after}: {flag} is not a hyrl flag)"
    return ConfigError(
        "<positional>",
        token,
        problem,
        f"flags only, as --name VALUE or --name=VALUE ({_hint(parser)})",
    )


def _hint(parser: argparse.ArgumentParser) -> str:
    return getattr(parser, "hint", HELP_HINT)


SGLANG_PASS_PREFIX = "--sglang-"


def _split_sglang_passthrough(
    argv: list[str], parser: argparse.ArgumentParser
) -> tuple[list[str], list[str], list[str]]:
    """(hyrl's own args, pass-through server flags, notes): an undeclared --sglang-NAME [VALUE...]
    becomes --NAME [VALUE...] for sglang.launch_server, with every value that follows it when
    SGLang's --NAME takes a list (MULTI_VALUE_FLAGS), and under SGLang's new name, with a note,
    where SGLang renamed it (RENAMED_FLAGS); unless it is one of slime's own flags (the table in
    hyrl.config.foreign: --sglang-router-ip, --sglang-config, ...), which stays hyrl's to
    refuse. A near miss of a declared --sglang-* flag is a typo, not a pass-through, and is
    refused (so --sglang-router-ur does not reach SGLang)."""
    declared = [f for f in _all_flags(parser) if f.startswith(SGLANG_PASS_PREFIX)]
    own, passed, notes = [], [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, sep, value = token.partition("=")
        if (
            flag.startswith(SGLANG_PASS_PREFIX)
            and flag not in declared
            and unknown_flag_hint(flag) is None  # slime's own --sglang-* flags: see the table
            and len(flag) > len(SGLANG_PASS_PREFIX)
        ):
            close = difflib.get_close_matches(flag, declared, n=1, cutoff=0.85)
            if close:
                raise ConfigError(
                    flag,
                    value if sep else None,
                    "unknown flag",
                    f"did you mean {close[0]}? (other --sglang-NAME flags pass "
                    "through to sglang.launch_server as --NAME)",
                )
            name = "--" + flag[len(SGLANG_PASS_PREFIX) :]
            if name in RENAMED_FLAGS:
                new_name, meaning = RENAMED_FLAGS[name]
                notes.append(
                    f"{flag}: SGLang {SGLANG_VERSION} has no {name}; its {new_name} is the same "
                    f"setting ({meaning}); passed as {new_name}"
                )
                name = new_name
            passed.append(name)
            if sep:
                passed.append(value)
            else:
                most = len(argv) if name in MULTI_VALUE_FLAGS else i + 2
                while i + 1 < min(most, len(argv)) and not argv[i + 1].startswith("--"):
                    passed.append(argv[i + 1])
                    i += 1
        else:
            own.append(token)
        i += 1
    return own, passed, notes


# The marker a recipe puts between its own flags and the ones appended to it (its "$@").
RECIPE_MARKER = "--"
# Flags that exclude each other, as groups: a side is its leading flag and the flags that only
# go with it. When a recipe's flags (before RECIPE_MARKER) hold one side and the appended ones
# the other, the recipe's side is dropped: what is appended wins. Given by the user on both
# sides, validation refuses them as before. Each concern names its own pairs.
EXCLUSIVE_FLAGS = (
    *optimizer.EXCLUSIVE_FLAGS,
    *critic.EXCLUSIVE_FLAGS,
    *batch.EXCLUSIVE_FLAGS,
    *data.EXCLUSIVE_FLAGS,
)


def _flag_fields(parser: argparse.ArgumentParser) -> dict[str, tuple[str, object]]:
    """Every option string -> (field, its argparse action)."""
    return {
        option: (action.dest, action)
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--")
    }


def _given_fields(tokens: list[str], options: dict) -> set[str]:
    return {
        options[token.split("=", 1)[0]][0] for token in tokens if token.split("=", 1)[0] in options
    }


def _without_fields(tokens: list[str], fields: set[str], options: dict) -> list[str]:
    """tokens less every occurrence of the flags of `fields` and their values."""
    kept, i = [], 0
    while i < len(tokens):
        flag, sep, _ = tokens[i].partition("=")
        entry = options.get(flag)
        if entry is None or entry[0] not in fields:
            kept.append(tokens[i])
            i += 1
            continue
        action, i = entry[1], i + 1
        if sep or isinstance(action, argparse.BooleanOptionalAction):
            continue  # the value, if any, was in the token itself
        if action.nargs == "+":
            while i < len(tokens) and not tokens[i].startswith("--"):
                i += 1
        else:
            i += 1
    return kept


def appended_wins(
    argv: list[str], parser: argparse.ArgumentParser | None = None
) -> tuple[list[str], list[str]]:
    """(argv without RECIPE_MARKER, notes): a recipe's flags and the ones appended after its
    marker, with the recipe's side of every EXCLUSIVE_FLAGS pair dropped where the appended
    flags take the other side. Without a marker nothing changes (every flag is the user's)."""
    argv = list(argv)
    if RECIPE_MARKER not in argv:
        return argv, []
    cut = argv.index(RECIPE_MARKER)
    recipe, appended = argv[:cut], argv[cut + 1 :]
    if RECIPE_MARKER in appended:
        raise ConfigError(
            RECIPE_MARKER,
            None,
            "given twice: it separates a recipe's own flags from the ones appended to it",
            "one -- (the recipe's)",
        )
    options = _flag_fields(parser or build_parser())
    in_recipe, by_user = _given_fields(recipe, options), _given_fields(appended, options)
    dropped, notes = set(), []
    for side_a, side_b in EXCLUSIVE_FLAGS:
        for mine, theirs in ((side_a, side_b), (side_b, side_a)):
            replaced = [f for f in theirs if f in in_recipe and f not in by_user]
            if replaced and any(f in by_user for f in mine):
                dropped.update(replaced)
                given = [flag_name(f) for f in mine if f in by_user]
                notes.append(
                    f"{', '.join(given)} from the command line "
                    f"{'replaces' if len(given) == 1 else 'replace'} the recipe's "
                    + ", ".join(flag_name(f) for f in replaced)
                )
    return _without_fields(recipe, dropped, options) + appended, notes


def parse_args(argv: list[str]) -> RunConfig:
    """argv (without the command) -> RunConfig. Raises ConfigError; neither validates nor
    resolves (flags not given stay None; see `resolve` and `load`). Undeclared --sglang-NAME
    [VALUE...] flags are appended to --sglang-server-args as --NAME [VALUE...]. A slime or
    Megatron-LM flag whose value asks for what hyrl does (`hyrl.config.foreign.built_in`:
    --swiglu, --attention-dropout 0) is accepted with a note, once. A recipe's flags come
    before RECIPE_MARKER, the ones appended to it after: later flags win, also across the
    pairs of EXCLUSIVE_FLAGS (see `appended_wins`; a note says what was replaced). Notes go to
    stderr, from rank 0 only; every unknown or refused flag is named in one error."""
    import shlex

    rank_0 = os.environ.get("RANK", "0") == "0"
    parser = build_parser()
    argv, notes = appended_wins(argv, parser)
    notes += renamed_notes(argv)
    given = list(argv)
    _print_notes(notes, rank_0)
    argv, passthrough, sglang_notes = _split_sglang_passthrough(list(argv), parser)
    _print_notes(sglang_notes, rank_0)
    argv, built_in = split_built_in(argv)
    namespace, extras = _parse_some(parser, argv, given)
    refused = refused_by_fields(built_in, vars(namespace))
    _print_notes({g.flag: g.note for g in built_in if g not in refused}.values(), rank_0)
    if extras or refused:
        raise _unknown_error(parser, extras, given, [(g.flag, g.value) for g in refused])
    for f in _fields():  # --list-flag none -> [None] from argparse -> None (not given)
        if _kind(f) == "optlist":
            setattr(namespace, f.name, _list_or_none(f, getattr(namespace, f.name)))
    if passthrough:
        given_args = namespace.sglang_server_args
        namespace.sglang_server_args = " ".join(
            ([given_args] if given_args else []) + [shlex.quote(arg) for arg in passthrough]
        )
    return RunConfig(**vars(namespace))


def _print_notes(notes: Iterable[str], rank_0: bool) -> None:
    """Each note on stderr as `hyrl: NOTE`, from rank 0 only."""
    import sys

    for note in notes if rank_0 else []:
        print(f"hyrl: {note}", file=sys.stderr, flush=True)


def _parse_some(
    parser: argparse.ArgumentParser, argv: list[str], given: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """parser's namespace of argv and what it did not take; ConfigError naming the flag on a
    bad value. `given`: the command line as given, for messages."""
    try:
        return parser.parse_known_args(argv)
    except _Abort as abort:
        raise abort.error from None
    except argparse.ArgumentError as err:
        raise _argument_error(parser, err, given) from None


def _parse_known(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parser's namespace of argv; ConfigError naming the flag on a bad value, the unknown
    flags or a stray argument."""
    namespace, extras = _parse_some(parser, argv, argv)
    if extras:
        raise _unknown_error(parser, extras, argv)
    return namespace


def _list_or_none(f: dataclasses.Field, value):
    """A list flag's value: `--flag none` (argparse's [None]) -> None (not given); 'none'
    mixed with values is refused."""
    if isinstance(value, list) and None in value:
        if value != [None]:
            raise ConfigError(
                flag_name(f.name),
                " ".join(str(v) for v in value),
                "'none' mixed with values",
                _allowed_text("optlist", None),
            )
        return None
    return value
