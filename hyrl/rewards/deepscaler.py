"""DeepScaleR's math reward (slime's --rm-type deepscaler): the boxed answer after the thinking.

Rules (each one a line in tests/unit/rewards/test_rewards.py):

* The solution is the text after the LAST ``</think>``; a response without one is read after the
  last ``###Response`` (DeepScaleR's older prompt format); a response with neither scores 0.0: a
  reasoning model that never closed its thinking has given no answer. A box inside the thinking
  never counts.
* The answer is the content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in the solution
  (``find_last_boxed`` of hyrl/rewards/math.py). No box, an empty one or an unclosed last box
  scores 0.0; there is no fallback to the last number (--rm-type math has one).
* The label may be boxed itself (``\\boxed{42}`` is read as 42), and a JSON list of strings
  (``["10", "x^4-2x^3-13x^2+14x+24"]``) accepts any of its answers (``accepted_answers`` of
  hyrl/rewards/base.py). An empty label, or one math-verify cannot parse, raises ValueError: a
  data error, counted as a reward failure.
* Equivalence is math-verify's, under MathReward's time budget (``math_verify_match`` of
  hyrl/rewards/math.py; its module doc lists what is equal and the budget).
* 1.0 iff equivalent, else 0.0. A response cut by the length limit (finish_reason != "stop")
  scores 0.0 unless ``reward_truncated=True`` (the rule of every built-in reward; see
  hyrl/rewards/math.py).

What differs from slime's deepscaler (slime/rollout/rm_hub/deepscaler.py, after DeepScaleR's
rllm/rewards/math_reward.py) is tabled in docs/recipes.md, "Reward functions".
"""

from __future__ import annotations

from hyrl.rewards.base import MathVerifyReward, accepted_answers
from hyrl.rewards.math import find_last_boxed, math_verify_match

THINK_END = "</think>"
RESPONSE_MARKER = "###Response"


def solution_after_thinking(response_text: str) -> str | None:
    """The text after the last ``</think>`` (else the last ``###Response``), or None."""
    for marker in (THINK_END, RESPONSE_MARKER):
        if marker in response_text:
            return response_text.rsplit(marker, 1)[1]
    return None


class DeepScaleRReward(MathVerifyReward):
    """1.0 iff the last box after the thinking equals an accepted answer by math-verify, else 0.0
    (module doc)."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        if not label.strip():
            raise ValueError("deepscaler label is empty; it must be the answer, e.g. '42'")
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        solution = solution_after_thinking(response_text)
        if solution is None:
            return 0.0
        answer, _ = find_last_boxed(solution)
        if not answer:
            return 0.0
        return float(math_verify_match(answer, accepted_answers(label), timeout_s=self.timeout_s))
