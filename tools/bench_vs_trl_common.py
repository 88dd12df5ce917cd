"""What both sides of tools/bench_vs_trl.py share: the GRPO settings, the reward metric and the
target rule, and running one training process while following its metrics.jsonl.

Imported by the driver (tools/bench_vs_trl.py), its hyrl side (bench_vs_trl_hyrl.py) and its TRL
side (bench_vs_trl_trl.py, whose worker runs under .venv-bench): the standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REWARD_METRIC = "train/reward_mean"


@dataclass(frozen=True)
class GrpoSettings:
    """The shared hyperparameters, as recipes/tiny/grpo.sh sets them (the TRL worker uses these)."""

    prompts_per_step: int = 16
    responses_per_prompt: int = 8
    micro_batch_responses: int = 32
    lr: float = 3e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    clip_grad_norm: float = 1.0
    max_response_tokens: int = 2
    temperature: float = 1.0
    eps_clip: float = 0.2
    eps_clip_high: float = 0.28
    kl_coef: float = 0.0

    @property
    def responses_per_step(self) -> int:
        return self.prompts_per_step * self.responses_per_prompt


# -- the target rule ------------------------------------------------------------------------


def step_reaching_target(rewards: list[float], target: float, window: int) -> int | None:
    """1-based index of the first step whose mean over the last `window` rewards (a full window)
    is >= target; None if no step does."""
    total = 0.0
    for i, reward in enumerate(rewards):
        total += reward
        if i >= window:
            total -= rewards[i - window]
        if i + 1 >= window and total / window >= target - 1e-12:
            return i + 1
    return None


# -- running the children ------------------------------------------------------------------


class MetricsTail:
    """Reads the complete lines appended to a metrics.jsonl since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset, self.records = path, 0, []

    def poll(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        new = [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]
        self.records += new
        return new


def _follow(
    child,
    tail: MetricsTail,
    rewards: list[float],
    progress,
    task_id,
    target: float,
    window: int,
    stop_on_target: bool,
):
    """Poll the child and its metrics until it exits; returns (exit status, rusage)."""
    signalled = False
    while True:
        pid, status_word, usage = os.wait4(child.pid, os.WNOHANG)
        exited = pid == child.pid
        if exited:
            child.returncode = os.waitstatus_to_exitcode(status_word)
        for record in tail.poll():
            if REWARD_METRIC in record:
                rewards.append(float(record[REWARD_METRIC]))
        if rewards:
            recent = rewards[-window:]
            progress.update(
                task_id, completed=len(rewards), reward=f"{sum(recent) / len(recent):.2f}"
            )
        if exited:
            return child.returncode, usage
        if (
            stop_on_target
            and not signalled
            and step_reaching_target(rewards, target, window) is not None
        ):
            child.send_signal(signal.SIGTERM)  # hyrl stops after the step in flight
            signalled = True
        time.sleep(0.1)


def run_child(
    command: list[str],
    *,
    env: dict,
    run_dir: Path,
    log_path: Path,
    label: str,
    target: float,
    window: int,
    max_steps: int,
    stop_on_target: bool,
    progress,
) -> dict:
    """Run one training process, following its metrics.jsonl; SIGTERM it once the target rule
    holds (when stop_on_target). Returns its records, exit status, peak RSS and wall-clock."""
    task_id = progress.add_task(label, total=max_steps, reward="-")
    tail = MetricsTail(run_dir / "metrics.jsonl")
    rewards: list[float] = []
    began = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        status = rusage = None
        try:
            status, rusage = _follow(
                child, tail, rewards, progress, task_id, target, window, stop_on_target
            )
        finally:
            if status is None:  # interrupted or failed here: leave no training process behind
                child.kill()
                child.wait()
        tail.poll()
    process_s = time.perf_counter() - began
    progress.update(task_id, completed=len(rewards))
    if status != 0:
        tail_text = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(
            f"{label} exited with status {status}; the end of {log_path}:\n{tail_text}"
        )
    return {
        "records": tail.records,
        "peak_rss_mib": rusage.ru_maxrss / 1024,
        "process_s": process_s,
    }


def thread_env(threads: int) -> dict[str, str]:
    """The same intra-op thread count for both children (torch reads OMP_NUM_THREADS at start)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
