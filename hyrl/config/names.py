"""The other names a `hyrl train` flag answers to, and what hyrl says about the names it does not
know.

    SAME_MEANING   a slime or Megatron-LM flag with exactly hyrl's meaning: accepted as another
                   name of that field (`--use-wandb` = `--log-wandb`); the table is
                   `hyrl.config.foreign`
    RENAMED        hyrl's own earlier names: still accepted, so older commands, recipes, run
                   directories and checkpoints keep working; config.json keeps only the new
                   name (`canonical_config` maps an old record's keys, and those of its
                   rollout layout: RENAMED_LAYOUT_KEYS); using one prints a note
    VALUE_ALIASES  another spelling of a choice (`--update-weight-transport nccl`, slime's word,
                   is `distributed`)
    FOREIGN_FLAGS  every other slime or Megatron-LM flag: the hyrl way to get its effect, or
                   "not supported" with the reason (`unknown_flag_hint`)

Four names were renamed because slime uses the same name for something else:

    --use-routing-replay        R3 here; slime's --use-routing-replay is R2 (replay of the
                                trainer's own routing), slime's R3 is --use-rollout-routing-replay
    --update-weight-mode        the transport here; slime's --update-weight-mode is full|delta
                                and its transport flag is --update-weight-transport nccl|disk
    --partial-rollout           a weight sync landing between generation segments here; in slime
                                it recycles the unfinished samples of dynamic sampling
    --ref-lr, --ref-global-batch-size (and --critic-*)
                                the base recipe a learning rate is scaled from here; slime's and
                                Megatron's --ref-* flags are the reference model
"""

from __future__ import annotations

from hyrl.config.foreign import FOREIGN_FLAGS, SAME_MEANING
from hyrl.config.foreign.built_in import BUILT_IN
from hyrl.config.weight_transport import DISTRIBUTED

# old field -> (new field, what the old name means elsewhere, for the note; "" = nothing)
RENAMED: dict[str, tuple[str, str]] = {
    "use_routing_replay": (
        "use_rollout_routing_replay",
        "in slime, --use-routing-replay is R2 (replaying the trainer's own routing from the "
        "old-log-prob pass), which hyrl does not have; this run gets R3",
    ),
    "update_weight_mode": (
        "update_weight_transport",
        "in slime, --update-weight-mode is full|delta, and the transport is "
        "--update-weight-transport",
    ),
    "partial_rollout": (
        "inflight_weight_updates",
        "in slime, --partial-rollout recycles the unfinished samples of dynamic sampling, "
        "which hyrl does not do",
    ),
    "partial_rollout_segment_tokens": ("inflight_segment_tokens", ""),
    "ref_lr": ("base_lr", "slime's and Megatron-LM's --ref-* flags are the reference model"),
    "ref_global_batch_size": ("base_global_batch_size", ""),
    "critic_ref_lr": ("critic_base_lr", ""),
    "critic_ref_global_batch_size": ("critic_base_global_batch_size", ""),
}

# config.json's resolved rollout layout ("rollout_layout"): old key -> new key
RENAMED_LAYOUT_KEYS: dict[str, str] = {"update_weight_mode": "update_weight_transport"}

# (field, spelling) -> the choice it stands for
VALUE_ALIASES: dict[tuple[str, str], str] = {("update_weight_transport", "nccl"): DISTRIBUTED}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def other_names(field: str) -> tuple[str, ...]:
    """The flags besides --FIELD that set `field`: its old hyrl names, then slime's or
    Megatron-LM's name for the same thing."""
    old = tuple(_flag(o) for o, (new, _) in RENAMED.items() if new == field)
    return old + tuple(flag for flag, f in SAME_MEANING.items() if f == field)


def renamed_notes(argv: list[str]) -> list[str]:
    """One note per old hyrl name used in argv: what it is called now, and what it means in
    slime where that differs."""
    notes, seen = [], set()
    for token in argv:
        flag = token.split("=", 1)[0]
        negated = flag.startswith("--no-")
        name = (flag[5:] if negated else flag[2:]).replace("-", "_")
        if not flag.startswith("--") or name not in RENAMED or flag in seen:
            continue
        seen.add(flag)
        new, elsewhere = RENAMED[name]
        now = ("--no-" + new.replace("_", "-")) if negated else _flag(new)
        notes.append(
            f"{flag} is the old name of {now} (the same setting)"
            + (f"; note: {elsewhere}" if elsewhere else "")
        )
    return notes


def canonical_config(saved: dict) -> dict:
    """A config.json (or a checkpoint's copy) with its old keys under their new names, for
    comparing it with today's fields, its rollout layout's too (RENAMED_LAYOUT_KEYS); a record
    holding both keeps the new one's value."""
    out = _renamed(saved, {old: new for old, (new, _) in RENAMED.items()})
    if isinstance(out.get("rollout_layout"), dict):
        out["rollout_layout"] = _renamed(out["rollout_layout"], RENAMED_LAYOUT_KEYS)
    return out


def _renamed(record: dict, renamed: dict[str, str]) -> dict:
    out = dict(record)
    for old, new in renamed.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def unknown_flag_hint(flag: str) -> str | None:
    """What hyrl says of a slime or Megatron-LM flag it does not declare, or None when the flag
    is nobody's: "slime's flag; use --X ..." or "Megatron-LM's flag; not supported: ...", and
    for a flag hyrl takes where it asks for what hyrl does, what it takes ("; accepted only as
    --attention-dropout 0")."""
    entry = FOREIGN_FLAGS.get(flag)
    if entry is None and flag.startswith("--no-"):
        entry = FOREIGN_FLAGS.get("--" + flag[5:])
    if entry is None:
        return None
    source, what = entry
    built_in = BUILT_IN.get(flag)
    accepted = f"; accepted only as {built_in.wanted}" if built_in else ""
    return f"{source}'s flag; {what}{accepted}"
