"""DAPO's math reward (slime's --rm-type dapo, verl's math_dapo): the "Answer:" line.

DAPO's prompts ask for it: "The last line of your response should be of the form Answer:
$Answer (without quotes) where $Answer is the answer to the problem."

Rules (each one a line in tests/unit/rewards/test_rewards.py):

* Only the last TAIL_CHARS (300) characters of the response are read, as in DAPO (the longest
  MATH-500 answer has 159 characters): an answer line further back does not count.
* The answer is the rest of the line after the LAST ``Answer:`` in them: case-insensitive, with
  any spaces around the colon (``answer : 42``, ``Final Answer: $42$``; a line break right after
  the colon is a space too, so ``Answer:`` followed by ``42`` on the next line gives 42).
  Without one the response has no answer and scores 0.0, even with a ``\\boxed{}`` answer: the
  format is part of what DAPO trains (--rm-type math and deepscaler read boxes).
* Equivalence is math-verify's, under MathReward's time budget (``math_verify_match`` of
  hyrl/rewards/math.py): the answer line is read as math, so ``$42$``, ``42.``, ``x = 42``,
  ``\\boxed{42}`` and ``42 \\text{ ways}`` all equal 42, and a label need not be an integer.
  An empty label, or one math-verify cannot parse, raises ValueError (a data error, counted as
  a reward failure).
* 1.0 iff equivalent, else 0.0: DAPO's "acc". Its "score" is 1.0 / -1.0; GRPO's
  group-normalised advantages are the same for both, and hyrl's built-in rewards stay in
  [0, 1] so that eval/accuracy and --eval-pass-threshold read alike for all of them.
* A response cut by the length limit (finish_reason != "stop") scores 0.0 unless
  ``reward_truncated=True`` (the rule of every built-in reward; see hyrl/rewards/math.py).

What differs from slime's dapo (slime/rollout/rm_hub/math_dapo_utils.py, a copy of verl's
verl/utils/reward_score/math_dapo.py) is tabled in docs/recipes.md, "Reward functions".
"""

from __future__ import annotations

import re

from hyrl.rewards.base import MathVerifyReward
from hyrl.rewards.math import math_verify_match

TAIL_CHARS = 300
_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]+)", re.IGNORECASE)


def find_answer_line(response_text: str) -> str | None:
    """The text after the last "Answer:" in the response's last TAIL_CHARS characters, or None."""
    matches = _ANSWER_LINE.findall(response_text[-TAIL_CHARS:])
    return matches[-1].strip() if matches else None


class DAPOReward(MathVerifyReward):
    """1.0 iff the last "Answer:" line equals the label by math-verify, else 0.0 (module doc)."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        if not label.strip():
            raise ValueError("dapo label is empty; it must be the answer, e.g. '42'")
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        answer = find_answer_line(response_text)
        if answer is None:
            return 0.0
        return float(math_verify_match(answer, [label], timeout_s=self.timeout_s))
