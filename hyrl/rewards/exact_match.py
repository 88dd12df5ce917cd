"""Binary reward: the response is exactly the label and was properly terminated."""

from __future__ import annotations

from collections.abc import Sequence


class ExactMatchReward:
    """1.0 iff finish_reason == "stop" and response_text.strip() == label, else 0.0."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        return float(finish_reason == "stop" and response_text.strip() == label)

    def score_batch(
        self, texts: Sequence[str], labels: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[float]:
        if not len(texts) == len(labels) == len(finish_reasons):
            raise ValueError(
                f"got {len(texts)} texts, {len(labels)} labels and "
                f"{len(finish_reasons)} finish reasons"
            )
        return [self(t, y, f) for t, y, f in zip(texts, labels, finish_reasons)]
