"""The built-in synthetic task "arith_mod10": answer "a+b=" with the digit (a + b) % 10, then eos.

An untrained policy is right by chance about 1/15 * 1/15 of the time (the right digit, then
eos), yet RL learns the task in seconds on a CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hyrl.data.stream import Prompt, PromptStream  # Prompt: callers import it from here too

# The held-out split is the same for every run seed, so evaluations across a sweep compare.
EVAL_SPLIT_SEED = 20261203


class ArithTask(PromptStream):
    """An endless, resumable stream of the training prompts "a+b=", and a held-out eval split.

    Of the (max_operand + 1)^2 prompts, round(eval_fraction * count) are held out for evaluation
    (chosen by a fixed seed, independent of `seed`) and never trained on. Epoch e of the stream
    is the training prompts in the order of a permutation drawn from a numpy Generator seeded by
    (seed, e): deterministic given the seed, reshuffled every epoch, resumable from the position.
    """

    def __init__(self, tokenizer, max_operand: int = 9, seed: int = 0, eval_fraction: float = 0.0):
        if not 0 <= max_operand <= 9:
            raise ValueError(
                f"max_operand must be in 0..9 (single-digit operands), got {max_operand}"
            )
        super().__init__(seed)
        if not 0.0 <= eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
        self.tokenizer = tokenizer
        self.max_operand = max_operand
        everything = self.all_prompts()
        held_out = set(
            np.random.default_rng(EVAL_SPLIT_SEED)
            .permutation(len(everything))[: round(eval_fraction * len(everything))]
            .tolist()
        )
        self._pool = [p for p in everything if p.index not in held_out]  # the training prompts
        self._eval = [
            Prompt(p.prompt_ids, p.label, p.text, index=i)
            for i, p in enumerate(p for p in everything if p.index in held_out)
        ]

    def _prompt(self, a: int, b: int, index: int) -> Prompt:
        text = f"{a}+{b}="
        ids = [self.tokenizer.bos_token_id, *self.tokenizer.encode(text, add_special_tokens=False)]
        return Prompt(prompt_ids=ids, label=str((a + b) % 10), text=text, index=index)

    def all_prompts(self) -> list[Prompt]:
        """Every prompt in order "0+0=", "0+1=", ..., with index = position in this list."""
        n = self.max_operand + 1
        return [self._prompt(a, b, a * n + b) for a in range(n) for b in range(n)]

    def eval_prompts(self) -> list[Prompt]:
        """The held-out prompts (never in the training stream), index = position in this list;
        with eval_fraction 0, every prompt (an in-distribution check of the policy)."""
        return list(self._eval) if self._eval else self.all_prompts()

    def _state_identity(self) -> dict[str, Any]:
        return {"max_operand": self.max_operand}

    def _check_state(self, state: dict[str, Any]) -> None:
        if state.get("max_operand", self.max_operand) != self.max_operand:
            raise ValueError(
                f"state is for max_operand={state['max_operand']}, this task has {self.max_operand}"
            )
