"""The TRL side of tools/bench_vs_trl.py: its environment (.venv-bench), one run of
trl.GRPOTrainer as a child process, and the worker that process runs under .venv-bench
(`tools/bench_vs_trl.py --trl-worker SPEC`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # the sibling module this one shares with the hyrl side
    sys.path.insert(0, str(TOOLS))

from bench_vs_trl_common import (  # noqa: E402
    REPO,
    REWARD_METRIC,
    GrpoSettings,
    run_child,
    step_reaching_target,
    thread_env,
)

BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
DRIVER = TOOLS / "bench_vs_trl.py"  # runs the worker: --trl-worker SPEC
TRL_PIN = "trl==1.16.0"
SETUP_HINT = (
    "create it from the repository root with:\n"
    "  python3 -m venv .venv-bench\n"
    "  .venv-bench/bin/pip install 'torch==2.13.0+cpu' transformers==5.24.0 tokenizers==0.23.3 "
    f"safetensors==0.8.0 numpy==2.4.6 rich==15.0.0 psutil==7.2.2 {TRL_PIN}"
)


# -- the environment ------------------------------------------------------------------------


def trl_env_versions() -> dict:
    """The versions of torch, transformers, trl and accelerate in .venv-bench."""
    probe = subprocess.run(
        [
            str(BENCH_PYTHON),
            "-c",
            "import json, torch, transformers, trl, accelerate; print(json.dumps("
            "{'torch': torch.__version__, 'transformers': transformers.__version__, "
            "'trl': trl.__version__, 'accelerate': accelerate.__version__}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(probe.stdout.strip().splitlines()[-1])


def check_bench_env() -> str | None:
    """Why the TRL environment cannot be used, or None when it can."""
    if not BENCH_PYTHON.exists():
        return f"{BENCH_PYTHON.relative_to(REPO)} is missing; {SETUP_HINT}"
    probe = subprocess.run(
        [str(BENCH_PYTHON), "-c", "import trl, datasets"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"trl does not import in .venv-bench ({last}); {SETUP_HINT}"
    return None


# -- one TRL run ---------------------------------------------------------------------------


def run_trl(
    seed: int,
    checkpoint: Path,
    prompts: Path,
    run_dir: Path,
    args,
    settings: GrpoSettings,
    progress,
) -> dict:
    run_dir.mkdir(parents=True)
    spec = {
        "seed": seed,
        "checkpoint": str(checkpoint),
        "prompts": str(prompts),
        "run_dir": str(run_dir),
        "max_steps": args.max_steps,
        "target": args.target,
        "window": args.window,
        "settings": asdict(settings),
    }
    spec_path = run_dir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        thread_env(args.threads),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",
    )
    command = [str(BENCH_PYTHON), str(DRIVER), "--trl-worker", str(spec_path)]
    return run_child(
        command,
        env=env,
        run_dir=run_dir,
        log_path=run_dir.parent / f"{run_dir.name}.log",
        label=f"seed {seed} TRL ",
        target=args.target,
        window=args.window,
        max_steps=args.max_steps,
        stop_on_target=False,
        progress=progress,
    )


# -- the worker (runs under .venv-bench) ------------------------------------------------------


def trl_worker(spec_path: Path) -> int:
    """One trl.GRPOTrainer run; writes RUN_DIR/metrics.jsonl with hyrl's keys, one line per step."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    s = GrpoSettings(**spec["settings"])
    run_dir = Path(spec["run_dir"])
    torch.set_flush_denormal(True)  # as hyrl's cpu_compat: denormals slow small models 30-100x

    tokenizer = AutoTokenizer.from_pretrained(spec["checkpoint"])
    rows = [json.loads(line) for line in open(spec["prompts"], encoding="utf-8")]
    for row in rows[:100]:  # TRL tokenizes the text itself: it must give hyrl's ids
        ids = tokenizer(row["prompt"])["input_ids"]
        if ids != row["prompt_ids"]:
            raise SystemExit(
                f"tokenizer mismatch for {row['prompt']!r}: {ids} != {row['prompt_ids']}"
            )
    dataset = Dataset.from_list([{"prompt": r["prompt"], "label": r["label"]} for r in rows])
    eos_id = tokenizer.eos_token_id
    step_rewards: list[float] = []

    def exact_match(completions, completion_ids, label, **_):
        """1.0 iff the response ended with eos and its text, stripped, is the label (hyrl's
        rule)."""
        rewards = [
            float(bool(ids) and ids[-1] == eos_id and text.strip() == want)
            for text, ids, want in zip(completions, completion_ids, label, strict=True)
        ]
        step_rewards.append(sum(rewards) / len(rewards))
        return rewards

    class TimedGRPOTrainer(GRPOTrainer):
        """Times rollout (generate) and rollout + reward + advantages, for the stage shares."""

        generate_s = 0.0
        generate_and_score_s = 0.0

        def _generate(self, prompts):
            began = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                TimedGRPOTrainer.generate_s += time.perf_counter() - began

        def _generate_and_score_completions(self, inputs):
            began = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                TimedGRPOTrainer.generate_and_score_s += time.perf_counter() - began

    class StepLog(TrainerCallback):
        """metrics.jsonl as hyrl writes it; stops once the target rule holds."""

        def __init__(self):
            self.file = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")
            self.loop_start = self.last = 0.0
            self.rewards: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.loop_start = self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            reward = step_rewards.pop() if step_rewards else float("nan")
            step_rewards.clear()
            self.rewards.append(reward)
            scored_s = TimedGRPOTrainer.generate_and_score_s
            record = {
                "step": state.global_step,
                "rollout_step": state.global_step,
                "samples": state.global_step * s.responses_per_step,
                "elapsed_s": now - self.loop_start,
                REWARD_METRIC: reward,
                "perf/rollout_s": TimedGRPOTrainer.generate_s,
                "perf/reward_and_advantage_s": scored_s - TimedGRPOTrainer.generate_s,
                "perf/actor_train_s": (now - self.last) - scored_s,
                "perf/step_s": now - self.last,
            }
            TimedGRPOTrainer.generate_s = TimedGRPOTrainer.generate_and_score_s = 0.0
            self.last = now
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
            if step_reaching_target(self.rewards, spec["target"], spec["window"]) is not None:
                control.should_training_stop = True

    micro_batches = s.responses_per_step // s.micro_batch_responses
    config = GRPOConfig(
        output_dir=str(run_dir / "trl_output"),
        seed=spec["seed"],
        data_seed=spec["seed"],
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        # one rollout of 16 x 8 = 128 completions = one optimizer step of 4 micro-batches of 32;
        # steps_per_generation defaults to gradient_accumulation_steps: one generation per step
        per_device_train_batch_size=s.micro_batch_responses,
        gradient_accumulation_steps=micro_batches,
        num_generations=s.responses_per_prompt,
        num_iterations=1,
        max_steps=spec["max_steps"],
        shuffle_dataset=False,  # the prompts in hyrl's stream order
        max_completion_length=s.max_response_tokens,
        temperature=s.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=s.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=s.adam_beta1,
        adam_beta2=s.adam_beta2,
        weight_decay=s.weight_decay,
        max_grad_norm=s.clip_grad_norm,
        beta=s.kl_coef,
        epsilon=s.eps_clip,
        epsilon_high=s.eps_clip_high,
        loss_type="dapo",
        scale_rewards="group",
        mask_truncated_completions=False,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    trainer = TimedGRPOTrainer(
        model=spec["checkpoint"],
        reward_funcs=exact_match,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[StepLog()],
    )
    trainer.train()
    return 0
