"""Multiple-choice reward: the one choice letter (A-J) the response commits to, against the label.

Which letter the response chose, by the first rule that finds one:

1. Explicit answers: ``\\boxed{C}`` (also ``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\fbox``)
   and statements "answer is D", "Answer: B", "answer: (b)", "correct option is E",
   "**Answer:** B". The LAST explicit answer in the text wins, so a response may change its mind.
   A bare letter in a statement must be a capital (so "the answer is a trick" is no answer);
   a parenthesised one, "(b)", may be lower case, and so may a letter right after "answer:".
2. Otherwise, a response that is nothing but a letter: "B", "(b)", "B.", "C)".
3. Otherwise, the parenthesised letters "(x)" of the last non-empty line, if they name exactly one
   letter: "I pick (b)" gives B; "(a) or (c)" gives nothing.

Conflicts: if the deciding answer names several different letters ("The answer is B or C",
"Answer: A, C", "\\boxed{B, D}"), the response did not commit and scores 0.0; repeating one
letter ("B, i.e. (B)") is fine. Earlier conflicting answers do not matter (rule 1: the last wins).

Score: 1.0 iff the chosen letter equals the label letter, case-insensitively; 0.0 with no letter.
A response cut by the length limit (finish_reason != "stop") scores 0.0 unless
``reward_truncated=True`` (the rule of every built-in reward; see hyrl/rewards/math.py).
The label must be a single letter A-J (either case, surrounding spaces and "()" allowed), else
ValueError: a data error, counted as a reward failure.
"""

from __future__ import annotations

import re

from hyrl.rewards.base import BuiltinReward

LETTERS = "ABCDEFGHIJ"
_LETTER_LIST = r"\(?[A-Ja-j]\)?(?:\s*(?:,|/|&|\bor\b|\band\b)\s*\(?[A-Ja-j]\)?)*"
# "answer is X", "answer: X", "correct option is X", markdown bold around "answer:" allowed.
_STATEMENT = re.compile(
    r"(?:answer|option|choice)\s*(?:\*\*)?\s*(?P<sep>is\s*:?|:|=)\s*(?:\*\*)?\s*(?:option\s+|choice\s+)?"
    r"(?P<letters>" + _LETTER_LIST + r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ONLY_LETTER = re.compile(r"^\s*\(?([A-Ja-j])\)?\s*[.)]?\s*$")
_PARENTHESISED = re.compile(r"\(([A-Ja-j])\)")


def _letters_in(fragment: str, *, allow_lowercase_bare: bool) -> set[str]:
    """The choice letters a fragment like "B", "(b)", "B or C" names, upper-cased."""
    found = set()
    for m in re.finditer(r"\(([A-Ja-j])\)|(?<![A-Za-z])([A-Ja-j])(?![A-Za-z])", fragment):
        if m.group(1):
            found.add(m.group(1).upper())
        elif m.group(2).isupper() or allow_lowercase_bare:
            found.add(m.group(2).upper())
    return found


def _explicit_answers(text: str) -> list[tuple[int, set[str]]]:
    """(position, letters) of every boxed answer and answer statement, in text order."""
    answers = []
    for m in _STATEMENT.finditer(text):
        letters = _letters_in(m.group("letters"), allow_lowercase_bare=m.group("sep") == ":")
        if letters:
            answers.append((m.start(), letters))
    for m in _BOX.finditer(text):
        content = _box_content(text, m.end())
        if content is None:
            continue
        content = re.sub(r"\\text\s*\{([^{}]*)\}", r"\1", content).strip().rstrip(".")
        letters = _letters_in(content, allow_lowercase_bare=True)
        if letters and re.fullmatch(_LETTER_LIST, content.strip()):
            answers.append((m.start(), letters))
    return sorted(answers, key=lambda a: a[0])


def _box_content(text: str, start: int) -> str | None:
    """The text from `start` up to the brace closing the one just before it, or None if unclosed."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def extract_choice(response_text: str) -> str | None:
    """The letter the response committed to (upper case), or None (module doc for the rules)."""
    answers = _explicit_answers(response_text)
    if answers:
        letters = answers[-1][1]
        return next(iter(letters)) if len(letters) == 1 else None
    only = _ONLY_LETTER.match(response_text)
    if only:
        return only.group(1).upper()
    lines = [line for line in response_text.splitlines() if line.strip()]
    if lines:
        letters = {m.group(1).upper() for m in _PARENTHESISED.finditer(lines[-1])}
        if len(letters) == 1:
            return letters.pop()
    return None


def _label_letter(label: str) -> str:
    m = re.fullmatch(r"\s*\(?([A-Ja-j])\)?\s*", label)
    if not m:
        raise ValueError(f"mcq label must be one letter A-J, got {label!r}")
    return m.group(1).upper()


class MCQReward(BuiltinReward):
    """1.0 iff the response's chosen letter equals the label letter, else 0.0 (module doc)."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        expected = _label_letter(label)
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        return float(extract_choice(response_text) == expected)
