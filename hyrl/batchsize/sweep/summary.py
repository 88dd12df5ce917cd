"""What a sweep prints: the dry run's plan (one line per member), the table of members at the
end and the command that analyses the sweep (`hyrl sweep`'s output; the sweep itself is
`hyrl.batchsize.sweep.run`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from hyrl.batchsize.sweep.plan import member_flags
from hyrl.batchsize.sweep.record import is_done
from hyrl.batchsize.sweep.run import CheckedSweep

# The resolved values a dry run prints per member: the planned numbers, then the layout.
DRY_RUN_KEYS = (
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "lr",
    "lr_scaling",
    "num_steps",
    "seed",
    "world_size",
    "target",
)


def dry_run_lines(checked: CheckedSweep) -> list[str]:
    """One line per member, `NAME: KEY=VALUE ...; appends: FLAGS`: the values the recipe
    resolved in the member's dry run (the DRY_RUN_KEYS it has) and the flags the sweep appends
    after EXTRA, run directory included, as a real run would pass them."""
    lines = []
    for member, config in zip(checked.sweep["members"], checked.resolved):
        values = " ".join(f"{k}={config[k]}" for k in DRY_RUN_KEYS if k in config)
        flags = member_flags(member, checked.base, checked.out / member["run_dir"])
        lines.append(f"{member['name']}: {values}; appends: {shlex.join(flags)}")
    return lines


def dry_run_summary(checked: CheckedSweep) -> str:
    """The dry run's last word: how many members passed, that nothing was written, and which
    members an earlier run in the same --out finished (a real re-run skips them)."""
    members = checked.sweep["members"]
    text = (
        f"hyrl sweep --dry-run: {len(members)} member(s) of {checked.recipe} passed their "
        f"dry runs; nothing launched, nothing written in {checked.out}"
    )
    if checked.probes:
        record = checked.sweep["throughput"]
        text += (
            f"; then {len(checked.probes)} throughput probes ({record['rounds']} rounds of "
            f"about {record['samples']:,} responses each, their first round dry-run too)"
        )
    done = [m["name"] for m in members if is_done(checked.out, m)]
    if done:
        text += f"; done in an earlier run, skipped by a real one: {', '.join(done)}"
    return text


def failed_members(sweep: dict) -> list[dict]:
    """The members, and the throughput probes, that failed."""
    probes = (sweep.get("throughput") or {}).get("probes", [])
    return [m for m in [*sweep["members"], *probes] if m.get("status") == "failed"]


def analyze_command(sweep: dict, out_dir) -> str:
    target = sweep.get("target") or "eval/accuracy=VALUE"
    return (
        f"hyrl analyze {shlex.quote(str(out_dir))} --target {shlex.quote(target)} "
        f"--out {shlex.quote(str(Path(out_dir) / 'analysis'))}"
    )


def print_summary(sweep: dict, out_dir, console=None, target: str | None = None) -> None:
    """A table of the members, then the command that analyses the sweep."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(
        title=f"sweep {out_dir} (* = reference; lr rule {sweep['lr_rule']})",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("member", no_wrap=True)
    for col in ("P", "B", "lr", "seed", "steps"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("exit", justify="right", no_wrap=True)
    table.add_column("wall s", justify="right", no_wrap=True)
    for m in sweep["members"]:
        status = m["status"] + (", earlier" if m.get("resumed") else "")
        style = {"failed": "red", "done": "green"}.get(m["status"])
        wall = m.get("wall_s")
        table.add_row(
            m["name"] + (" *" if m["name"] == sweep["reference"] else ""),
            str(m["prompts_per_step"]),
            str(m["responses_per_step"]),
            f"{m['lr']:.4g}",
            str(m["seed"]),
            "-" if m.get("num_steps") is None else str(m["num_steps"]),
            status,
            "-" if m.get("returncode") is None else str(m["returncode"]),
            "-" if wall is None else f"{wall:.1f}",
            style=style,
        )
    console.print(table)
    failed = failed_members(sweep)
    if failed:
        console.print(
            f"{len(failed)} member(s) failed: "
            + ", ".join(
                f"{m['name']} (exit {m['returncode']}, log {Path(out_dir) / m['log']})"
                for m in failed
            )
            + "; rerun the same command to retry them (finished members are kept)."
        )
    sweep = dict(sweep, target=target or sweep.get("target"))
    console.print("analyse with:", analyze_command(sweep, out_dir), soft_wrap=True)
