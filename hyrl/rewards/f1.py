"""Token-F1 reward (slime's --rm-type f1): word overlap of the answer with the label, SQuAD-style.

Rules (each one a line in tests/unit/rewards/test_rewards.py):

* The answer is the content of the last ``\\boxed{...}`` or ``\\fbox{...}`` if the response has
  one, with ``\\text{...}`` (also ``\\textbf``, ``\\mathrm``) replaced by its content
  (``\\boxed{\\text{Paris}}`` gives "Paris"); else the whole response. An unclosed last box
  is a malformed answer: 0.0 (as in --rm-type math).
* Normalisation (SQuAD v1.1's evaluate script): lower case, ASCII punctuation removed (joining
  what it separated: "a.b,c" -> "abc"), the articles a/an/the removed, runs of white space
  collapsed; the words are what white space then separates.
* If either side normalises to "yes", "no" or "noanswer" and the two differ, the score is 0.0
  (HotpotQA's rule: a yes/no question is right or wrong, no partial credit).
* Otherwise, with c the number of words the two share (counted with multiplicity),
  precision P = c / answer words, recall R = c / label words, and the score is F1 = 2PR / (P + R),
  0.0 when they share none.
* A label that is a JSON list of strings (``["Paris", "City of Paris"]``) accepts each of its
  answers: the score is the best F1 over them (SQuAD's max over ground truths). A label with no
  words after normalisation ("", "the", "?") raises ValueError: a data error, counted as a
  reward failure.
* A response cut by the length limit (finish_reason != "stop") scores 0.0 unless
  ``reward_truncated=True`` (the rule of every built-in reward; see hyrl/rewards/math.py).

The score lies in [0, 1], and only an exact word match gives 1.0 (for pass@k with the default
--eval-pass-threshold 1.0). What differs from slime's f1 (slime/rollout/rm_hub/f1.py) is tabled
in docs/recipes.md, "Reward functions".
"""

from __future__ import annotations

import re
import string
from collections import Counter

from hyrl.rewards.base import BuiltinReward, accepted_answers
from hyrl.rewards.math import find_last_boxed

YES_NO = ("yes", "no", "noanswer")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_TEXT_COMMAND = re.compile(r"\\(?:text|textbf|mathrm)\s*\{([^{}]*)\}")


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (SQuAD's order of steps)."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(answer: str, label: str) -> float:
    """F1 of the normalised answer's words against the normalised label's (module doc)."""
    answer, label = normalize_answer(answer), normalize_answer(label)
    if (answer in YES_NO or label in YES_NO) and answer != label:
        return 0.0
    answer_words, label_words = answer.split(), label.split()
    shared = sum((Counter(answer_words) & Counter(label_words)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(answer_words), shared / len(label_words)
    return 2 * precision * recall / (precision + recall)


class F1Reward(BuiltinReward):
    """The best token F1 of the response's answer against the label's answers (module doc)."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        labels = accepted_answers(label)
        for gold in labels:
            if not normalize_answer(gold):
                raise ValueError(
                    f"f1 label {label[:80]!r} has an answer with no words after normalisation"
                )
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        boxed, unclosed = find_last_boxed(response_text)
        if unclosed:
            return 0.0
        answer = response_text if boxed is None else _TEXT_COMMAND.sub(r"\1", boxed)
        return max(token_f1(answer, gold) for gold in labels)
