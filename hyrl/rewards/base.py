"""The interface every reward function implements, and how a label with several answers is read."""

from __future__ import annotations

import json
from typing import Protocol


class RewardFn(Protocol):
    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        """Score one decoded response (special tokens removed) against its label.

        finish_reason: "stop" if the response ended with eos, "length" if it hit the limit.
        """
        ...


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
