#!/usr/bin/env python
"""hyrl's framework cost: its tiny GRPO step against the same work in plain PyTorch, in one run.

    .venv/bin/python tools/bench_floor.py [--num-steps 300] [--repeats 3] [--threads 1]
        [--seed 1] [--micro-batch-size 32] [--json] [--out REPORT.md]

The floor is a plain loop with no framework (no hyrl trainer, no Ray, no megatron): transformers'
Qwen3MoeForCausalLM built from hyrl.models.qwen3_moe.config.TINY with the weights hyrl starts
from for the seed (tools/bench_vs_trl.write_initial_checkpoint, passed to hyrl as
--hf-checkpoint), fed hyrl's arith_mod10 prompt stream for the seed in hyrl's order. Per step:
16 prompts x 8 responses sampled at temperature 1 with a KV cache (prefill, then one decode
step: 2 response tokens at most); reward 1 iff the response ended with eos and its text is the
label (hyrl's exact_match); group advantages (r - mean) / (population std + 1e-6), 0 for a
group of equal rewards; GRPO loss (PPO-clip 0.2 / 0.28 on token ratios, old log-probs the
update's own, detached, as hyrl's on-policy update; token mean over the batch's response
tokens) over micro-batches of 32; one torch.optim.Adam step (lr 3e-4, betas 0.9/0.999) after
clipping the gradient norm to 1.0.

hyrl runs `bash recipes/tiny/grpo.sh --hf-checkpoint DIR --seed S --num-steps N` on one rank.
The two alternate (hyrl, floor, hyrl, floor, ...), each a fresh process with --threads OpenMP
threads. Step time of a run: the median of perf/step_s over its steps after the first 10
(warm-up); its CPU time per step: the user + system CPU seconds of its process tree (psutil,
sampled every 0.1 s) from step 10 to the end, over the steps in between (waiting for a core on
a shared machine inflates the step time, not this). Reported: the median over repeats of each,
the ratios hyrl / floor, how hyrl's step splits into its perf/* stages, and each side's mean
reward over the first and last 10% of steps (the floor must learn the task as hyrl does, or it
is not the same work). Not a timed test: a measurement, printed with the machine and its load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
if str(TOOLS) not in sys.path:  # the sibling tool whose helpers this one reuses
    sys.path.insert(0, str(TOOLS))

import bench_vs_trl  # noqa: E402

WARMUP_STEPS = 10
REWARD_METRIC = bench_vs_trl.REWARD_METRIC
# hyrl's per-step stages (perf/<stage>_s in metrics.jsonl), in the loop's order
HYRL_STAGES = ("rollout", "reward", "logprob", "actor_train", "weight_sync", "overhead")
FLOOR_STAGES = ("rollout", "reward", "actor_train")
# hyrl.data.tokenizer.VOCAB: what each id decodes to with skip_special_tokens (specials -> "")
DECODED = ("", "", "", *"0123456789", "+", "=", "")
EOS_ID = 1


# -- pure parts: the floor's GRPO arithmetic, per-run summaries, the report ------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/bench_floor.py",
        description="hyrl's tiny GRPO step time against a plain-PyTorch loop (CPU)",
    )
    parser.add_argument(
        "--num-steps", type=int, default=300, help="rollout steps per run (each side)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side, alternating")
    parser.add_argument(
        "--threads", type=int, default=1, help="OMP_NUM_THREADS of both training processes"
    )
    parser.add_argument("--seed", type=int, default=1, help="initial weights and prompt order")
    parser.add_argument(
        "--micro-batch-size",
        type=int,
        default=32,
        help="the floor's responses per forward/backward (the tiny recipe's --micro-batch-size)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--out", type=Path, help="also write the report as markdown to this file")
    parser.add_argument("--floor-worker", type=Path, help=argparse.SUPPRESS)  # internal: one run
    args = parser.parse_args(argv)
    if args.floor_worker is None:
        if args.num_steps <= WARMUP_STEPS:
            parser.error(
                f"--num-steps {args.num_steps}: allowed: more than the {WARMUP_STEPS} warm-up steps"
            )
        if args.repeats < 1:
            parser.error(f"--repeats {args.repeats}: allowed: an integer >= 1")
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: allowed: an integer >= 1")
        if args.seed < 0:
            parser.error(f"--seed {args.seed}: allowed: an integer >= 0")
        responses = bench_vs_trl.GrpoSettings().responses_per_step
        if args.micro_batch_size < 1 or responses % args.micro_batch_size:
            parser.error(
                f"--micro-batch-size {args.micro_batch_size}: allowed: a divisor of the "
                f"{responses} responses per step"
            )
    return args


def response_mask(responses, eos_id: int = EOS_ID):
    """[N, T] float: 1 on each response's tokens up to and including its first eos, else 0."""
    import torch

    is_eos = (responses == eos_id).long()
    eos_before = torch.cumsum(is_eos, dim=1) - is_eos  # eos tokens strictly before column t
    return (eos_before == 0).float()


def exact_match_rewards(responses: list[list[int]], labels: list[str]) -> list[float]:
    """hyrl's exact_match: 1.0 iff the response has an eos and its text before the eos (special
    tokens skipped), stripped, equals the label."""
    rewards = []
    for tokens, label in zip(responses, labels, strict=True):
        if EOS_ID not in tokens:
            rewards.append(0.0)  # finish_reason "length"
            continue
        text = "".join(DECODED[t] for t in tokens[: tokens.index(EOS_ID)])
        rewards.append(float(text.strip() == label))
    return rewards


def group_advantages(rewards, group_size: int, eps: float = 1e-6):
    """[N] GRPO advantages of group-contiguous rewards: (r - group mean) / (population std +
    eps); exactly 0 in a group whose rewards are all equal."""
    import torch

    r = rewards.float().view(-1, group_size)
    advantages = (r - r.mean(dim=1, keepdim=True)) / (
        r.std(dim=1, unbiased=False, keepdim=True) + eps
    )
    all_equal = (r == r[:, :1]).all(dim=1, keepdim=True)
    return torch.where(all_equal, torch.zeros_like(advantages), advantages).view(-1)


def grpo_loss(log_probs, old_log_probs, advantages, mask, total_tokens: float, eps_low, eps_high):
    """sum over response tokens of -min(ratio A, clip(ratio, 1-eps_low, 1+eps_high) A), over
    the global batch's response-token count (this micro-batch's share of the token mean)."""
    import torch

    ratio = torch.exp(log_probs - old_log_probs)
    a = advantages[:, None]
    surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * a)
    return -(surrogate * mask).sum() / total_tokens


def run_step_s(records: list[dict], warmup_steps: int = WARMUP_STEPS) -> float | None:
    """Median perf/step_s over a run's steps after the warm-up ones; None if none are left."""
    times = [float(r["perf/step_s"]) for r in records[warmup_steps:] if "perf/step_s" in r]
    return statistics.median(times) if times else None


def stage_seconds(records: list[dict], stages, warmup_steps: int = WARMUP_STEPS) -> dict:
    """Median seconds of each perf/<stage>_s over a run's steps after the warm-up ones."""
    out = {}
    for stage in stages:
        values = [
            float(r[f"perf/{stage}_s"]) for r in records[warmup_steps:] if f"perf/{stage}_s" in r
        ]
        if values:
            out[stage] = statistics.median(values)
    return out


def cpu_per_step_s(samples: list[tuple[int, float]], warmup_steps: int = WARMUP_STEPS):
    """CPU seconds per step from (steps logged, process-tree CPU seconds) samples taken while
    the run lived: the CPU added from the first sample past the warm-up steps to the first
    sample that saw the last step (not the later ones: shutdown is no step), over the steps
    logged in between; None when no step lies between them."""
    after = [(n, cpu) for n, cpu in samples if n >= warmup_steps]
    if not after or after[-1][0] <= after[0][0]:
        return None
    end = next(sample for sample in after if sample[0] == after[-1][0])
    return (end[1] - after[0][1]) / (end[0] - after[0][0])


def reward_ends(records: list[dict], fraction: float = 0.1) -> tuple[float, float]:
    """Mean reward over the first and over the last `fraction` of a run's steps (at least one)."""
    rewards = [float(r[REWARD_METRIC]) for r in records if REWARD_METRIC in r]
    if not rewards:
        raise ValueError(f"no {REWARD_METRIC} in the run's records")
    n = max(1, round(fraction * len(rewards)))
    return sum(rewards[:n]) / n, sum(rewards[-n:]) / n


def summarize_run(records: list[dict], stages, cpu_s: float | None = None) -> dict:
    first, last = reward_ends(records)
    return {
        "steps": len(records),
        "step_s": run_step_s(records),
        "cpu_s": cpu_s,
        "stage_s": stage_seconds(records, stages),
        "reward_first_10pct": first,
        "reward_last_10pct": last,
    }


def build_report(runs: list[dict], *, machine: str, settings: dict, command: str) -> dict:
    """runs: {"side": "hyrl"|"floor", "repeat": i, **summarize_run(...)}, in the order run."""

    def side(name: str) -> list[dict]:
        return [r for r in runs if r["side"] == name]

    def median_of(rows: list[dict], key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else None

    hyrl, floor = side("hyrl"), side("floor")
    hyrl_step_s, floor_step_s = median_of(hyrl, "step_s"), median_of(floor, "step_s")
    per_repeat = [
        h["step_s"] / f["step_s"] if h["step_s"] and f["step_s"] else None
        for h, f in zip(hyrl, floor, strict=False)
    ]
    hyrl_cpu_s = median_of(hyrl, "cpu_s") if all("cpu_s" in r for r in runs) else None
    floor_cpu_s = median_of(floor, "cpu_s") if all("cpu_s" in r for r in runs) else None
    stages = [s for s in HYRL_STAGES if any(s in r["stage_s"] for r in hyrl)]
    hyrl_stage_s = {s: statistics.median(r["stage_s"].get(s, 0.0) for r in hyrl) for s in stages}
    return {
        "benchmark": "hyrl recipes/tiny/grpo.sh vs a plain-PyTorch GRPO loop (CPU), tiny "
        "Qwen3-MoE, arith_mod10",
        "command": command,
        "machine": machine,
        "settings": settings,
        "warmup_steps": WARMUP_STEPS,
        "hyrl_step_s": hyrl_step_s,
        "floor_step_s": floor_step_s,
        "ratio_hyrl_over_floor": hyrl_step_s / floor_step_s
        if hyrl_step_s and floor_step_s
        else None,
        "ratio_per_repeat": per_repeat,
        "hyrl_cpu_s": hyrl_cpu_s,
        "floor_cpu_s": floor_cpu_s,
        "cpu_ratio_hyrl_over_floor": hyrl_cpu_s / floor_cpu_s
        if hyrl_cpu_s and floor_cpu_s
        else None,
        "hyrl_stage_s": hyrl_stage_s,
        "hyrl_stage_share": {s: v / hyrl_step_s for s, v in hyrl_stage_s.items()}
        if hyrl_step_s
        else {},
        "floor_stage_s": {
            s: statistics.median(r["stage_s"].get(s, 0.0) for r in floor)
            for s in FLOOR_STAGES
            if any(s in r["stage_s"] for r in floor)
        },
        "hyrl_reward_first_10pct": median_of(hyrl, "reward_first_10pct"),
        "hyrl_reward_last_10pct": median_of(hyrl, "reward_last_10pct"),
        "floor_reward_first_10pct": median_of(floor, "reward_first_10pct"),
        "floor_reward_last_10pct": median_of(floor, "reward_last_10pct"),
        "runs": runs,
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.1f} ms"


def render_markdown(report: dict) -> str:
    s = report["settings"]
    lines = [
        f"Machine: {report['machine']}; {s['threads']} thread(s) per process; {s['num_steps']} "
        f"steps x {s['repeats']} repeats per side (alternating), seed {s['seed']}; step time = "
        f"median perf/step_s after {report['warmup_steps']} warm-up steps, median over repeats.",
        "",
        "| | step time | reward, first 10% of steps | reward, last 10% |",
        "|---|---|---|---|",
    ]
    for name, label in (("hyrl", "hyrl tiny recipe"), ("floor", "plain PyTorch floor")):
        lines.append(
            f"| {label} | {_ms(report[f'{name}_step_s'])} | "
            f"{report[f'{name}_reward_first_10pct']:.2f} | "
            f"{report[f'{name}_reward_last_10pct']:.2f} |"
        )
    ratio = report["ratio_hyrl_over_floor"]
    per_repeat = ", ".join("-" if r is None else f"{r:.2f}" for r in report["ratio_per_repeat"])
    loads = [r["load_average_1min"] for r in report["runs"] if "load_average_1min" in r]
    if loads:
        lines += [
            "",
            f"1-minute load average after each run: {min(loads):.1f} to {max(loads):.1f}.",
        ]
    lines += [
        "",
        f"hyrl / floor step time: {'-' if ratio is None else f'{ratio:.2f}x'} "
        f"(per repeat: {per_repeat}).",
    ]
    if report.get("cpu_ratio_hyrl_over_floor") is not None:
        lines.append(
            f"CPU time per step of each process tree (not inflated by waiting for a core): "
            f"hyrl {_ms(report['hyrl_cpu_s'])}, floor {_ms(report['floor_cpu_s'])}, "
            f"hyrl / floor {report['cpu_ratio_hyrl_over_floor']:.2f}x."
        )
    if report["hyrl_stage_s"]:
        parts = ", ".join(
            f"{stage} {_ms(sec)} ({100 * report['hyrl_stage_share'][stage]:.0f}%)"
            for stage, sec in report["hyrl_stage_s"].items()
        )
        lines.append(f"hyrl's step by stage (medians): {parts}.")
    if report["floor_stage_s"]:
        parts = ", ".join(f"{stage} {_ms(sec)}" for stage, sec in report["floor_stage_s"].items())
        lines.append(f"The floor's step by stage (medians): {parts}.")
    return "\n".join(lines) + "\n"


# -- the floor (a child process: torch and transformers only) ---------------------------------


def floor_worker(spec_path: Path) -> int:
    """One plain-PyTorch GRPO run; writes RUN_DIR/metrics.jsonl (hyrl's keys), a line a step."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    s = bench_vs_trl.GrpoSettings(**spec["settings"])
    torch.set_flush_denormal(True)  # as hyrl's cpu_compat: denormals slow small models 30-100x
    torch.manual_seed(spec["seed"])
    model = Qwen3MoeForCausalLM.from_pretrained(spec["checkpoint"], dtype=torch.float32)
    model.train()
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=s.lr,
        betas=(s.adam_beta1, s.adam_beta2),
        weight_decay=s.weight_decay,
    )
    rows = [json.loads(line) for line in open(spec["prompts"], encoding="utf-8")]
    group = s.responses_per_prompt
    micro = spec["micro_batch_size"]
    began = time.perf_counter()
    with open(Path(spec["run_dir"]) / "metrics.jsonl", "a", encoding="utf-8") as log:
        for step in range(1, spec["num_steps"] + 1):
            t0 = time.perf_counter()
            batch = rows[(step - 1) * s.prompts_per_step : step * s.prompts_per_step]
            prompts = torch.tensor([r["prompt_ids"] for r in batch]).repeat_interleave(group, 0)
            labels = [r["label"] for r in batch for _ in range(group)]
            with torch.no_grad():  # sampling: prefill, then one decode step per further token
                out = model(input_ids=prompts, use_cache=True, logits_to_keep=1)
                tokens = []
                for t in range(s.max_response_tokens):
                    probs = torch.softmax(out.logits[:, -1].float() / s.temperature, dim=-1)
                    tokens.append(torch.multinomial(probs, 1))
                    if t + 1 < s.max_response_tokens:
                        out = model(
                            input_ids=tokens[-1], cache=out.cache, use_cache=True, logits_to_keep=1
                        )
                responses = torch.cat(tokens, dim=1)
            t1 = time.perf_counter()
            rewards = torch.tensor(exact_match_rewards(responses.tolist(), labels))
            advantages = group_advantages(rewards, group)
            mask = response_mask(responses)
            t2 = time.perf_counter()
            sequences = torch.cat([prompts, responses], dim=1)
            width = prompts.shape[1]
            total_tokens = float(mask.sum().clamp(min=1))
            for lo in range(0, len(sequences), micro):
                rows_mb = slice(lo, lo + micro)
                logits = model(input_ids=sequences[rows_mb]).logits
                # the logits at column c predict token c + 1: the response's tokens
                step_logits = logits[:, width - 1 : -1].float() / s.temperature
                log_probs = torch.log_softmax(step_logits, dim=-1)
                log_probs = log_probs.gather(-1, responses[rows_mb, :, None])[..., 0]
                loss = grpo_loss(
                    log_probs,
                    log_probs.detach(),
                    advantages[rows_mb],
                    mask[rows_mb],
                    total_tokens,
                    s.eps_clip,
                    s.eps_clip_high,
                )
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            record = {
                "step": step,
                "rollout_step": step,
                "samples": step * s.responses_per_step,
                "elapsed_s": t3 - began,
                REWARD_METRIC: float(rewards.mean()),
                "perf/rollout_s": t1 - t0,
                "perf/reward_s": t2 - t1,
                "perf/actor_train_s": t3 - t2,
                "perf/step_s": t3 - t0,
            }
            log.write(json.dumps(record) + "\n")
            log.flush()
    return 0


# -- the benchmark -----------------------------------------------------------------------------


def _tree_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process and its live descendants; None once it is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):  # a descendant may exit meanwhile
            times = process.cpu_times()
            total += times.user + times.system
    return total


def run_measured(command, *, env, run_dir: Path, label: str, num_steps: int, progress) -> dict:
    """Run one training process, following its metrics.jsonl and sampling its process tree's
    CPU time every 0.1 s; its records and CPU seconds per step (cpu_per_step_s)."""
    task = progress.add_task(label, total=num_steps, reward="-")
    tail = bench_vs_trl.MetricsTail(run_dir / "metrics.jsonl")
    samples: list[tuple[int, float]] = []
    log_path = run_dir.parent / f"{run_dir.name}.log"
    with open(log_path, "w", encoding="utf-8") as log:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            while child.poll() is None:
                tail.poll()
                cpu_s = _tree_cpu_s(child.pid)  # read after the records: same lag at both ends
                if cpu_s is not None and child.poll() is None:
                    samples.append((len(tail.records), cpu_s))
                rewards = [r[REWARD_METRIC] for r in tail.records[-10:] if REWARD_METRIC in r]
                reward = f"{sum(rewards) / len(rewards):.2f}" if rewards else "-"
                progress.update(task, completed=len(tail.records), reward=reward)
                time.sleep(0.1)
        finally:
            if child.poll() is None:  # interrupted here: leave no training process behind
                child.kill()
                child.wait()
    tail.poll()
    progress.update(task, completed=len(tail.records))
    if child.returncode != 0:
        text = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{label.strip()} exited with status {child.returncode}:\n{text}")
    return {"records": tail.records, "cpu_per_step_s": cpu_per_step_s(samples)}


def _run_floor(checkpoint: Path, prompts: Path, run_dir: Path, args, progress) -> dict:
    run_dir.mkdir(parents=True)
    spec = {
        "seed": args.seed,
        "checkpoint": str(checkpoint),
        "prompts": str(prompts),
        "run_dir": str(run_dir),
        "num_steps": args.num_steps,
        "micro_batch_size": args.micro_batch_size,
        "settings": bench_vs_trl.asdict(bench_vs_trl.GrpoSettings()),
    }
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(bench_vs_trl.thread_env(args.threads), CUDA_VISIBLE_DEVICES="")
    return run_measured(
        [sys.executable, str(Path(__file__).resolve()), "--floor-worker", str(spec_path)],
        env=env,
        run_dir=run_dir,
        label="floor",
        num_steps=args.num_steps,
        progress=progress,
    )


def _run_hyrl(checkpoint: Path, run_dir: Path, args, progress) -> dict:
    env = {
        **os.environ,
        **bench_vs_trl.thread_env(args.threads),
        "NPROC": "1",
        "PATH": f"{bench_vs_trl.HYRL_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    command = [
        "bash",
        "recipes/tiny/grpo.sh",
        "--hf-checkpoint",
        str(checkpoint),
        "--seed",
        str(args.seed),
        "--num-steps",
        str(args.num_steps),
        "--run-dir",
        str(run_dir),
        "--no-progress",
    ]
    return run_measured(
        command,
        env=env,
        run_dir=run_dir,
        label="hyrl ",
        num_steps=args.num_steps,
        progress=progress,
    )


def run(args, progress) -> dict:
    """Both sides, alternating, `args.repeats` times; the report (build_report)."""
    settings = bench_vs_trl.GrpoSettings()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_floor-") as tmp:
        scratch = Path(tmp)
        checkpoint = scratch / f"init-seed{args.seed}"
        bench_vs_trl.write_initial_checkpoint(args.seed, checkpoint)
        prompts = scratch / f"prompts-seed{args.seed}.jsonl"
        bench_vs_trl.write_prompt_stream(
            args.seed, args.num_steps * settings.prompts_per_step, prompts
        )
        for repeat in range(args.repeats):
            for name in ("hyrl", "floor"):
                run_dir = scratch / f"r{repeat}-{name}"
                if name == "hyrl":
                    child = _run_hyrl(checkpoint, run_dir, args, progress)
                else:
                    child = _run_floor(checkpoint, prompts, run_dir, args, progress)
                stages = HYRL_STAGES if name == "hyrl" else FLOOR_STAGES
                runs.append(
                    {
                        "side": name,
                        "repeat": repeat,
                        **summarize_run(child["records"], stages, child["cpu_per_step_s"]),
                        # other work on the machine slows whichever side runs beside it
                        "load_average_1min": os.getloadavg()[0],
                    }
                )
    return build_report(
        runs,
        machine=f"{bench_vs_trl.cpu_model()}, {os.cpu_count()} cores",
        settings={
            "num_steps": args.num_steps,
            "repeats": args.repeats,
            "threads": args.threads,
            "seed": args.seed,
            "micro_batch_size": args.micro_batch_size,
            **bench_vs_trl.asdict(settings),
        },
        command=" ".join(["python tools/bench_floor.py", *args.argv]),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.floor_worker is not None:
        return floor_worker(args.floor_worker)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    sys.path.insert(0, str(REPO))
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as progress:
        report = run(args, progress)
    markdown = render_markdown(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown, encoding="utf-8")
    print(json.dumps(report) if args.json else markdown, end="\n" if args.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
