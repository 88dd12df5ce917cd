"""Throughput probes of a sweep (`hyrl sweep --throughput-rounds N`): R(B) measured member after
member, the way `hyrl tune` measures its update costs, instead of from the runs themselves.

A sweep's runs measure samples well and throughput badly: members run side by side
(--max-parallel), each next to another neighbour, and a change of the machine's load during a
run falls on that run alone. After the members, the probes run one at a time (never side by
side), in ROUNDS rounds: in each, every member of the first seed for about --throughput-samples
responses (a warm-up step more) with evaluation off, the reference first in odd rounds and last
in even ones
(A B C, C B A, A B C, ...). A round's probes run back to back, so a change of load between
rounds cancels in that round's own ratios, the reversed order cancels an order effect (a probe
that follows a heavy one), and the rounds' spread shows what is left. `hyrl analyze` reads them
(`hyrl.batchsize.throughput_ratios`): a member's R ratio is the median over rounds of its
probe's throughput over the same round's reference probe.

This module is the plan (pure); `hyrl.batchsize.sweep.run` runs the probes with the members'
own launcher and records them in sweep.json under "throughput".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hyrl.batchsize.sweep.plan import SweepError, positive_int

PROBE_DIR = "throughput"  # the probes' run directories and logs, under the sweep directory
DEFAULT_SAMPLES = 8192  # responses per probe after its warm-up step: seconds of a tiny run
MIN_STEPS = 3  # the first step is left out as a warm-up; two more give a rate


def check_probe_args(rounds, samples) -> tuple[int, int]:
    """(rounds, samples) from the command line; SweepError naming the flag."""
    try:
        n = int(str(rounds))
    except ValueError:
        n = -1
    if n < 0 or str(rounds).strip() != str(n):
        raise SweepError(
            f"--throughput-rounds {rounds!r}: allowed: an integer >= 0 (0: no probes; R from "
            "the runs themselves)"
        )
    k = positive_int(samples, "--throughput-samples", "a positive number of responses")
    return n, k


def probe_steps(member: dict, samples: int) -> int:
    """A probe's rollout steps: the warm-up and enough after it for `samples` responses, at
    least MIN_STEPS."""
    return max(MIN_STEPS, 1 + math.ceil(samples / member["responses_per_rollout"]))


def group_of(member: dict) -> str:
    """The member's name without its seed: b{B}-{kind}."""
    suffix = f"-s{member['seed']}"
    name = member["name"]
    return name[: -len(suffix)] if name.endswith(suffix) else name


def probe_plan(members: Sequence[dict], rounds: int, samples: int) -> list[dict]:
    """The probes, round after round: every member of the first seed, named {group}-r{round},
    for `probe_steps` rollout steps, evaluation off; odd rounds in the sweep's order (the reference
    first), even rounds reversed (the reference last), so what a probe inherits from the one
    before it (a machine still busy, caches) falls on both sides of a ratio alike."""
    first_seed = members[0]["seed"]
    once = [m for m in members if m["seed"] == first_seed]
    probes = []
    for r in range(1, rounds + 1):
        for m in once if r % 2 else once[::-1]:
            name = f"{group_of(m)}-r{r}"
            probes.append(
                {
                    **m,
                    "name": name,
                    "member": group_of(m),
                    "round": r,
                    "num_steps": probe_steps(m, samples),
                    "eval_interval": 0,
                    "run_dir": f"{PROBE_DIR}/{name}",
                    "log": f"{PROBE_DIR}/{name}.log",
                    "status": "pending",
                    "returncode": None,
                    "wall_s": None,
                }
            )
    return probes


def probe_extra_args(extra_args: Sequence[str], config: dict) -> list[str]:
    """The recipe's extra flags for a probe: the sweep's, then no target (only the step timers
    are read) and, under PPO, no critic-only warm-up (every probe step times the actor too)."""
    out = [*extra_args, "--target", "none"]
    if config.get("num_critic_only_steps"):
        out += ["--num-critic-only-steps", "0"]
    return out


def merge_record(old: dict | None, rounds: int, samples: int, probes: list[dict]) -> dict | None:
    """sweep.json's "throughput" record for this run of the sweep: None without probes now or
    before; the earlier record unchanged when none are asked now (an analysis still reads it);
    SweepError when the earlier probes ran for another number of samples (rates measured
    over other lengths do not mix)."""
    if rounds == 0:
        return old
    if old is not None and old.get("samples") != samples:
        raise SweepError(
            f"--throughput-samples {samples}: this sweep's probes ran {old.get('samples')} "
            f"samples; allowed: --throughput-samples {old.get('samples')}, or a new --out"
        )
    done = {p["name"]: p for p in (old or {}).get("probes", []) if isinstance(p, dict)}
    for p in probes:
        prev = done.get(p["name"], {})
        for key in ("returncode", "wall_s", "command"):
            if key in prev:
                p[key] = prev[key]
    return {"rounds": rounds, "samples": samples, "probes": probes}
