"""The interface every reward function implements, what every built-in reward shares (the
length-limit rule, math-verify's time budget), and how a label with several answers is read."""

from __future__ import annotations

import json
from typing import Protocol


class RewardFn(Protocol):
    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        """Score one decoded response (special tokens removed) against its label.

        finish_reason: "stop" if the response ended with eos, "length" if it hit the limit.
        """
        ...


class BuiltinReward:
    """The rule of every built-in reward: a response cut by the length limit
    (finish_reason != "stop") scores 0.0, unless ``reward_truncated=True`` (hyrl/rewards/math.py
    says why)."""

    def __init__(self, *, reward_truncated: bool = False):
        self.reward_truncated = reward_truncated

    def scores_zero_as_cut(self, finish_reason: str) -> bool:
        """True iff the response was cut by the length limit and so scores 0.0."""
        return finish_reason != "stop" and not self.reward_truncated


class MathVerifyReward(BuiltinReward):
    """A built-in reward that compares with math-verify, each call within ``timeout_s`` seconds
    (``math_verify_match`` of hyrl/rewards/math.py)."""

    def __init__(self, *, reward_truncated: bool = False, timeout_s: float = 5.0):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        super().__init__(reward_truncated=reward_truncated)
        self.timeout_s = float(timeout_s)


def accepted_answers(label: str) -> list[str]:
    """The answers a label accepts: a JSON list of strings is several (how --prompt-data stores a
    list label: ["Paris", "City of Paris"] -> '["Paris", "City of Paris"]'), any other label one,
    as written ('[1, 2]', a list of numbers, stays one answer: an interval)."""
    if label.lstrip().startswith("["):
        try:
            value = json.loads(label)
        except ValueError:
            return [label]
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
    return [label]
