"""The prompt stream both tasks share: a fixed list of prompts, reshuffled every epoch.

Epoch e is the list in the order of a permutation drawn from numpy's Generator seeded by
(seed, e): deterministic given the seed, reshuffled every epoch, resumable from the position;
batches may straddle an epoch boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Prompt:
    prompt_ids: list[int]  # token ids the engine is given
    label: str  # the reference answer the reward compares with
    text: str  # the prompt as text
    index: int  # position in the stream (or in an evaluation list)


class PromptStream:
    """Subclasses set `self._pool` (the prompts of one epoch, in a fixed order) after calling
    `__init__`, and may add an identity to the state (`_state_identity`, `_check_state`)."""

    def __init__(self, seed: int):
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        self.seed = seed
        self.position = 0
        self._pool: list[Prompt] = []
        self._order_epoch = -1
        self._order: list[int] = []

    @property
    def num_prompts(self) -> int:
        """Prompts per epoch."""
        return len(self._pool)

    @property
    def epoch(self) -> int:
        return self.position // self.num_prompts

    def _epoch_order(self, epoch: int) -> list[int]:
        if epoch != self._order_epoch:
            self._order = (
                np.random.default_rng([self.seed, epoch]).permutation(self.num_prompts).tolist()
            )
            self._order_epoch = epoch
        return self._order

    def next_batch(self, n: int) -> list[Prompt]:
        """The next n prompts of the stream, index = position in the stream."""
        if n < 0:
            raise ValueError(f"batch size must be non-negative, got {n}")
        batch = []
        for _ in range(n):
            p = self._pool[self._epoch_order(self.epoch)[self.position % self.num_prompts]]
            batch.append(Prompt(p.prompt_ids, p.label, p.text, index=self.position))
            self.position += 1
        return batch

    def _state_identity(self) -> dict[str, Any]:
        """What a state must match to be resumed here (checked by `_check_state`)."""
        return {}

    def _check_state(self, state: dict[str, Any]) -> None:
        """Raise ValueError for a state taken from another stream."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            **self._state_identity(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the stream exactly where state_dict() was taken (adopting its seed)."""
        self._check_state(state)
        if state["epoch"] != state["position"] // self.num_prompts:
            raise ValueError(
                f"inconsistent state: position {state['position']} is not in epoch {state['epoch']}"
            )
        self.seed = int(state["seed"])
        self.position = int(state["position"])
        self._order_epoch = -1
