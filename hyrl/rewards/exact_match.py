"""Binary reward: the response is exactly the label and was properly terminated (a response cut
by the length limit scores 0.0 unless ``reward_truncated=True``, as every built-in reward)."""

from __future__ import annotations

from collections.abc import Sequence

from hyrl.rewards.base import BuiltinReward


class ExactMatchReward(BuiltinReward):
    """1.0 iff finish_reason == "stop" (or reward_truncated) and response_text.strip() == label,
    else 0.0."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        return float(response_text.strip() == label)

    def score_batch(
        self, texts: Sequence[str], labels: Sequence[str], finish_reasons: Sequence[str]
    ) -> list[float]:
        if not len(texts) == len(labels) == len(finish_reasons):
            raise ValueError(
                f"got {len(texts)} texts, {len(labels)} labels and "
                f"{len(finish_reasons)} finish reasons"
            )
        return [self(t, y, f) for t, y, f in zip(texts, labels, finish_reasons)]
