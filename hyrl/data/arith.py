"""The built-in synthetic task "arith_mod10": answer "a+b=" with the digit (a + b) % 10, then eos.

An untrained policy is right by chance about 1/15 * 1/15 of the time (the right digit, then
eos), yet RL learns the task in seconds on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Prompt:
    prompt_ids: list[int]   # bos + one id per character of text, always 5 tokens
    label: str              # the correct response, e.g. "7"
    text: str               # "a+b=", e.g. "3+4="
    index: int              # position in the stream (or in eval_prompts())


# The held-out split is the same for every run seed, so evaluations across a sweep compare.
EVAL_SPLIT_SEED = 20261203


class ArithTask:
    """An endless, resumable stream of the training prompts "a+b=", and a held-out eval split.

    Of the (max_operand + 1)^2 prompts, round(eval_fraction * count) are held out for evaluation
    (chosen by a fixed seed, independent of `seed`) and never trained on. Epoch e of the stream
    is the training prompts in the order of a permutation drawn from a numpy Generator seeded by
    (seed, e): deterministic given the seed, reshuffled every epoch, resumable from the position.
    """

    def __init__(self, tokenizer, max_operand: int = 9, seed: int = 0, eval_fraction: float = 0.0):
        if not 0 <= max_operand <= 9:
            raise ValueError(f"max_operand must be in 0..9 (single-digit operands), "
                             f"got {max_operand}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        self.tokenizer = tokenizer
        self.max_operand = max_operand
        self.seed = seed
        self.position = 0
        everything = self.all_prompts()
        held_out = set(np.random.default_rng(EVAL_SPLIT_SEED).permutation(len(everything))
                       [: round(eval_fraction * len(everything))].tolist())
        self._train = [p for p in everything if p.index not in held_out]
        self._eval = [Prompt(p.prompt_ids, p.label, p.text, index=i)
                      for i, p in enumerate(p for p in everything if p.index in held_out)]
        self._order_epoch = -1
        self._order: list[int] = []

    @property
    def num_prompts(self) -> int:
        """Training prompts per epoch (the held-out ones excluded)."""
        return len(self._train)

    @property
    def epoch(self) -> int:
        return self.position // self.num_prompts

    def _prompt(self, a: int, b: int, index: int) -> Prompt:
        text = f"{a}+{b}="
        ids = [self.tokenizer.bos_token_id,
               *self.tokenizer.encode(text, add_special_tokens=False)]
        return Prompt(prompt_ids=ids, label=str((a + b) % 10), text=text, index=index)

    def all_prompts(self) -> list[Prompt]:
        """Every prompt in order "0+0=", "0+1=", ..., with index = position in this list."""
        n = self.max_operand + 1
        return [self._prompt(a, b, a * n + b) for a in range(n) for b in range(n)]

    def eval_prompts(self) -> list[Prompt]:
        """The held-out prompts (never in the training stream), index = position in this list;
        with eval_fraction 0, every prompt (an in-distribution check of the policy)."""
        return list(self._eval) if self._eval else self.all_prompts()

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch != self._order_epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._order = rng.permutation(self.num_prompts).tolist()
            self._order_epoch = epoch
        return self._order

    def next_batch(self, n: int) -> list[Prompt]:
        """The next n prompts of the stream (batches may straddle an epoch boundary)."""
        if n < 0:
            raise ValueError(f"batch size must be non-negative, got {n}")
        batch = []
        for _ in range(n):
            order = self._epoch_order(self.epoch)
            p = self._train[order[self.position % self.num_prompts]]
            batch.append(Prompt(p.prompt_ids, p.label, p.text, index=self.position))
            self.position += 1
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position,
                "max_operand": self.max_operand}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the stream exactly where state_dict() was taken (adopting its seed)."""
        if state.get("max_operand", self.max_operand) != self.max_operand:
            raise ValueError(f"state is for max_operand={state['max_operand']}, "
                             f"this task has {self.max_operand}")
        if state["epoch"] != state["position"] // self.num_prompts:
            raise ValueError(f"inconsistent state: position {state['position']} is not in "
                             f"epoch {state['epoch']}")
        self.seed = int(state["seed"])
        self.position = int(state["position"])
        self._order_epoch = -1
