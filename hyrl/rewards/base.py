"""The interface every reward function implements."""

from __future__ import annotations

from typing import Protocol


class RewardFn(Protocol):
    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        """Score one decoded response (special tokens removed) against its label.

        finish_reason: "stop" if the response ended with eos, "length" if it hit the limit.
        """
        ...
