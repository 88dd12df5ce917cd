"""`hyrl train FLAGS` (launch/*.sh run `python -m hyrl train` on every rank): parse and
validate the flags, print the resolved configuration with --dry-run, or check this machine and
run the loop (`train`: the Trainer of hyrl.train.trainer and the records of its run). Nothing
heavier than the config is imported before the flags are known to be valid: a refused flag
costs no torch import."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from hyrl.config import (
    ConfigError,
    ResolvedConfig,
    build_parser,
    files_not_checked,
    load,
    world_size_from_env,
)


def main(argv: list[str]) -> int:
    """`hyrl train FLAGS` on every rank: parse and validate (exit 2 naming the flag), print the
    resolved configuration with --dry-run, or check this machine and train."""
    if any(a in ("-h", "--help") for a in argv):
        build_parser().print_help()
        print(
            "\n  --dry-run             resolve and validate the flags, print the resolved "
            "configuration as JSON, start nothing (no machine checks; data and checkpoint "
            "files need not exist here, and the ones not checked are named)"
            "\n  --preflight-only      validate the flags and run every check of files and of "
            "this machine (data, tokenizer, --load, --hf-checkpoint, rewards), start nothing: "
            "what the launchers run in one process before starting the ranks"
        )
        return 0
    dry_run = "--dry-run" in argv
    preflight_only = "--preflight-only" in argv
    argv = [a for a in argv if a not in ("--dry-run", "--preflight-only")]
    try:
        world_size = world_size_from_env()
        # parsed, validated, every derived value resolved; a dry run plans from any machine
        cfg = load(argv, world_size, check_files=not dry_run)
        if not dry_run:  # a dry run plans for the cluster from any machine: no machine checks
            from hyrl.train.preflight import preflight

            preflight(cfg)
    except ConfigError as err:
        # Every rank validates before any process group starts; one of them says why.
        if os.environ.get("RANK", "0") == "0":
            print(f"hyrl train: error: {err}", file=sys.stderr)
        return 2
    if preflight_only:
        return 0
    if dry_run:
        if os.environ.get("RANK", "0") == "0":
            from hyrl.plan import describe_for_dry_run, make_plan

            print(json.dumps(cfg.to_dict(world_size), indent=2, sort_keys=True))
            print(describe_for_dry_run(make_plan(cfg, world_size)), file=sys.stderr)
            unchecked = files_not_checked(cfg)
            if unchecked:
                print(f"hyrl train: not checked under --dry-run: {unchecked}", file=sys.stderr)
        return 0
    run_dir = train(cfg, world_size)
    if os.environ.get("RANK", "0") == "0":
        print(f"run directory: {run_dir}")
    return 0


def train(cfg: ResolvedConfig, world_size: int) -> Path:
    """The loop on this rank: the Trainer (its setup: the backend, rank 0's engines, the
    initial weight sync) and the records of its run (hyrl.metrics.run_log.RunLog, made once the
    setup is done: its clock starts then), closed with why the run ended. A TrainingStopped
    (too many skipped steps, a full disk) exits 1, rank 0 saying why. The run directory."""
    from hyrl.backends.factory import shutdown_backend
    from hyrl.metrics.run_log import RunLog
    from hyrl.train.stopping import TrainingStopped
    from hyrl.train.trainer import Trainer

    trainer = None
    try:
        trainer = Trainer(cfg, world_size)
        # rank 0 writes the records (trainer.logger, the run directory; None elsewhere)
        run_log = RunLog(cfg.target, trainer.logger, trainer.run_dir, trainer.resume_state)
        ended = "error"  # summary.json's "ended": why the run stopped (a raise leaves "error")
        try:
            ended = trainer.run(run_log)
        finally:
            run_log.close(ended)
    except TrainingStopped as err:
        if trainer is not None and trainer.rank == 0:
            print(f"hyrl train: error: {err}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    finally:
        if trainer is not None:
            trainer.close()
        shutdown_backend()
    return Path(cfg.run_dir)


if __name__ == "__main__":  # python -m hyrl.train.cli FLAGS, the same as python -m hyrl train
    sys.exit(main(sys.argv[1:]))
