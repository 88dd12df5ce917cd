"""The hyrl side of tools/bench_vs_trl.py: the seed's initial checkpoint and prompt stream (both
sides train from them) and one run of `bash recipes/tiny/grpo.sh` with the .venv interpreter."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
if str(TOOLS) not in sys.path:  # the sibling module this one shares with the TRL side
    sys.path.insert(0, str(TOOLS))

from bench_vs_trl_common import REPO, REWARD_METRIC, run_child, thread_env  # noqa: E402

HYRL_BIN = REPO / ".venv" / "bin"
TOKENIZER_DIR = REPO / "tests" / "data" / "tiny_tokenizer"


# -- preparing one seed: the initial checkpoint and the prompt stream -----------------------


def write_initial_checkpoint(seed: int, directory: Path) -> None:
    """TINY as a transformers Qwen3-MoE, initialised under torch.manual_seed(seed), float32."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY

    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(TINY.to_hf_config()).to(torch.float32)
    model.save_pretrained(directory)
    for name in os.listdir(TOKENIZER_DIR):  # TRL loads its tokenizer from the model directory
        shutil.copy(TOKENIZER_DIR / name, directory / name)


def write_prompt_stream(seed: int, count: int, path: Path) -> None:
    """The first `count` prompts of hyrl's arith_mod10 stream for this seed, in hyrl's order."""
    from hyrl.data.arith import ArithTask
    from hyrl.data.tokenizer import build_tokenizer

    task = ArithTask(build_tokenizer(), seed=seed)
    with open(path, "w", encoding="utf-8") as f:
        for prompt in task.next_batch(count):
            f.write(
                json.dumps(
                    {"prompt": prompt.text, "label": prompt.label, "prompt_ids": prompt.prompt_ids}
                )
                + "\n"
            )


# -- one hyrl run --------------------------------------------------------------------------


def run_hyrl(seed: int, checkpoint: Path, run_dir: Path, args, progress) -> dict:
    env = {
        **os.environ,
        **thread_env(args.threads),
        "PATH": f"{HYRL_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    command = [
        "bash",
        "recipes/tiny/grpo.sh",
        "--hf-checkpoint",
        str(checkpoint),
        "--seed",
        str(seed),
        "--num-steps",
        str(args.max_steps),
        "--target",
        f"{REWARD_METRIC}={args.target}",
        "--run-dir",
        str(run_dir),
        "--no-progress",
    ]
    return run_child(
        command,
        env=env,
        run_dir=run_dir,
        log_path=run_dir.parent / f"{run_dir.name}.log",
        label=f"seed {seed} hyrl",
        target=args.target,
        window=args.window,
        max_steps=args.max_steps,
        stop_on_target=True,
        progress=progress,
    )
