"""Build the tiny recipe's base checkpoint: a short, deterministic supervised pre-pass.

RL from a random initialisation spends most of its samples waiting for a random "takeoff" whose
timing depends on the seed; the seed paper runs RL from a pretrained model with partial skill.
This pre-pass gives the tiny Qwen3-MoE that partial skill: a few full-batch Adam steps of
cross-entropy on the arithmetic task's answers (the digit (a + b) % 10, then <eos>), stopped
well short of mastery, so RL starts from the same weights on every seed and learns from its
first step.

    python tools/make_tiny_base.py OUT_DIR [--steps 60] [--lr 3e-3] [--seed 0]

OUT_DIR becomes a Hugging Face Qwen3-MoE directory (config.json, model.safetensors) for the
recipe's --hf-checkpoint. Deterministic: one thread, a fixed seed, the full task as one batch
in a fixed order; the same torch build rebuilds the same weights. It prints the policy's exact
expected reward at temperature 1 (mean over prompts of p(digit) x p(eos | digit), computed from
the logits, no sampling) before and after, and writes it to OUT_DIR/base.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import Qwen3MoeForCausalLM

from hyrl.data.arith import ArithTask
from hyrl.data.tokenizer import build_tokenizer
from hyrl.models.qwen3_moe.config import TINY


def task_batch(tokenizer, max_operand: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids [N, 7], answer ids [N, 2]): every prompt "[bos] a + b =", its digit and eos."""
    prompts = ArithTask(tokenizer, max_operand=max_operand).all_prompts()
    digit_ids = [tokenizer.convert_tokens_to_ids(p.label) for p in prompts]
    eos = tokenizer.eos_token_id
    inputs = torch.tensor([[*p.prompt_ids, d, eos] for p, d in zip(prompts, digit_ids)])
    answers = torch.tensor([[d, eos] for d in digit_ids])
    return inputs, answers


def answer_logprobs(model, inputs: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """log p(digit | prompt) + log p(eos | prompt, digit), per prompt [N]."""
    logits = model(input_ids=inputs[:, :-1]).logits  # [N, 6, V]: positions 4, 5 predict the answer
    logp = torch.log_softmax(logits[:, -2:].float(), dim=-1)
    return logp.gather(-1, answers.unsqueeze(-1)).squeeze(-1).sum(-1)


def expected_reward(model, inputs: torch.Tensor, answers: torch.Tensor) -> float:
    """The exact mean reward of sampling at temperature 1 (exact match needs digit then eos)."""
    with torch.no_grad():
        return float(answer_logprobs(model, inputs, answers).exp().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--steps", type=int, default=60, help="full-batch Adam steps (>= 0)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (> 0)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation seed (>= 0)")
    args = parser.parse_args(argv)
    if args.steps < 0 or not args.lr > 0 or args.seed < 0:
        parser.error(
            f"--steps {args.steps}, --lr {args.lr}, --seed {args.seed}: need >= 0, > 0, >= 0"
        )
    if args.out_dir.exists() and any(args.out_dir.iterdir()):
        parser.error(f"OUT_DIR {args.out_dir}: exists and is not empty; choose a new directory")

    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    tokenizer = build_tokenizer()
    hf_config = TINY.to_hf_config(
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id
    )
    model = Qwen3MoeForCausalLM(hf_config).float()
    inputs, answers = task_batch(tokenizer)
    before = expected_reward(model, inputs, answers)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model.train()
    for step in range(1, args.steps + 1):
        loss = -answer_logprobs(model, inputs, answers).mean() / 2  # mean over answer tokens
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == args.steps:
            reward = expected_reward(model, inputs, answers)
            print(f"step {step}: loss {loss.item():.4f}, expected reward {reward:.4f}", flush=True)
    model.eval()
    after = expected_reward(model, inputs, answers)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    record = {
        "steps": args.steps,
        "lr": args.lr,
        "seed": args.seed,
        "torch": torch.__version__,
        "expected_reward_before": before,
        "expected_reward_after": after,
    }
    (args.out_dir / "base.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"expected reward at temperature 1: {before:.4f} -> {after:.4f}; wrote {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
