"""launch/sbatch.template's check of its preemption lead time, before Ray or any srun step:

    python -m hyrl.plan.template_check RESOLVED.json SCRIPT [--time-limit T] [THROUGHPUT OPTIONS]

RESOLVED.json: what the recipe's --dry-run printed; SCRIPT: the job's script ($0, the copy Slurm
runs: its #SBATCH --signal line counts unless SBATCH_SIGNAL is set); T: the job's time limit as
`squeue -o %l` prints it (empty: not checked); THROUGHPUT OPTIONS: `hyrl plan`'s (the template
passes PLAN_ASSUMPTIONS). Exit 0 with one line on stdout when the lead holds one rollout step
and one save (hyrl.plan.step_time's estimate); else each problem on stderr, naming the setting,
its value and the value needed, exit 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from hyrl.config import ConfigError
from hyrl.plan.cli import PlanError, config_from_dry_run, split_throughput
from hyrl.plan.make import make_plan
from hyrl.plan.preemption import lead_problems, slurm_time_s, template_lead

PREFIX = "launch/sbatch.template: error:"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    time_limit = ""
    if "--time-limit" in args:
        at = args.index("--time-limit")
        time_limit = args[at + 1] if at + 1 < len(args) else ""
        del args[at : at + 2]
    try:
        args, throughput = split_throughput(args)
        if len(args) != 2:
            raise PlanError(f"usage: {__doc__.splitlines()[2].strip()}")
        resolved, script = args
        cfg, world = config_from_dry_run(json.loads(Path(resolved).read_text()))
        step_time = make_plan(cfg, world, throughput=throughput)["step_time"]
    except (ConfigError, PlanError, OSError, ValueError) as err:
        print(f"{PREFIX} the preemption lead time check: {err}", file=sys.stderr)
        return 2
    lead = template_lead(os.environ, Path(script))
    problems = lead_problems(step_time, lead, slurm_time_s(time_limit))
    for problem in problems:
        print(f"{PREFIX} {problem}", file=sys.stderr)
    if problems:
        return 2
    if "lead_s" not in step_time:
        print(
            f"+ preemption lead {lead['seconds']} s ({lead['source']}): not checked, the step "
            f"time is not modelled ({step_time['why']})"
        )
    else:
        print(
            f"+ preemption lead {lead['seconds']} s ({lead['source']}) >= {step_time['lead_s']} s "
            "that one rollout step and one save need (an estimate: hyrl plan RECIPE shows its "
            "basis)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
