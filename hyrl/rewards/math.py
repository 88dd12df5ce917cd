"""Math reward: the response's final answer, checked against the label with math-verify.

Rules (each one a line in tests/unit/rewards/test_rewards.py):

* The answer is the content of the LAST ``\\boxed{...}`` or ``\\fbox{...}`` (braces balanced, so
  ``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``). Without one, and with
  ``fallback_to_last_number`` (the default), it is the last number in the text: an optional
  sign, digits with optional thousands commas, an optional decimal part, an optional ``/digits``
  (``1/2``) and ``%``. A minus counts as a sign unless it follows a digit, a closing bracket or
  a one-letter variable (``10-3`` and ``x - 3`` end in 3, ``is -3`` in -3). A LaTeX fraction
  outside a box is not a number: ``$\\frac{1}{2}$`` ends in the number 2.
* A last ``\\boxed{`` that is never closed is a malformed answer: 0.0, with no fallback (the
  policy tried to box an answer and failed).
* Equivalence is math-verify's: 1/2 = 0.5 = \\frac{1}{2}, 2x+1 = 1+2x, \\sqrt{2} = 2^{1/2},
  x=2 = 2, 3 = 3.0, 1,000 = 1000, \\$18.90 = 18.90 (an escaped dollar is a price, not a math
  delimiter), 0.5 = 50\\% and ALSO 50 = 50\\% (math-verify accepts a percentage whether or
  not the other side divided by 100). ``math_verify_match`` below is this equivalence with the
  time budget; the other math built-ins (deepscaler, dapo) call it too.
* A response cut by the length limit (finish_reason != "stop") scores 0.0 even if it holds a
  correct boxed answer, unless ``reward_truncated=True``: rewarding an answer the policy never
  finished would teach it not to stop (the same rule as ExactMatchReward, mcq and logic).
* Time budget: one call (parsing both sides and comparing) gets ``timeout_s`` seconds of wall
  time on the main thread, enforced with ``signal.setitimer``; past it the call scores 0.0. Some
  answers take math-verify unbounded time, e.g. comparing ``9^{9^{9^{9}}}`` with 3 (sympy
  evaluates the power tower: measured > 5 minutes), ``1000000!`` with 3, or parsing 500 nested
  parentheses; with the budget each returns 0.0 after ``timeout_s`` (default 5 s, below
  --reward-timeout-s so the answer scores 0 before the pool kills the worker). Typical calls
  take 0.3-10 ms, the first in a process ~80 ms (sympy warm-up), a polynomial identity ~180 ms.

math-verify and threads (v0.9.0): ``parse(parsing_timeout=N)`` and ``verify(timeout_seconds=N)``
guard each parse and each comparison with ``signal.alarm(N)`` (whole seconds), which only works
on the main thread: elsewhere both raise ValueError("... doesn't support threaded environment").
Passing None disables the alarm (and logs a one-off warning, silenced here). This reward always
passes None and keeps its own timer instead, because ``signal.alarm`` would cancel an enclosing
``setitimer`` budget (they share ITIMER_REAL). Off the main thread nothing can interrupt a
running call, so there the reward runs without a budget: use RewardPool workers (each call on a
worker's main thread, and a hung worker is killed after the pool's timeout) for untrusted output.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Sequence

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from hyrl.rewards.base import MathVerifyReward

logger = logging.getLogger(__name__)

BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?\s*%?")
_EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())


class _TimeoutDisabledFilter(logging.Filter):
    """Drops math-verify's "Timeout is disabled ..." warning: this module keeps its own timer."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_TimeoutDisabledFilter())


def find_last_boxed(text: str) -> tuple[str | None, bool]:
    """(content of the last \\boxed{...} or \\fbox{...}, unclosed): (None, False) if there is
    none, (None, True) if the last one never closes its brace."""
    starts = [m for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None, False
    last = starts[-1]
    depth = 1
    for i in range(last.end(), len(text)):
        if text[i] == "{" and text[i - 1] != "\\":
            depth += 1
        elif text[i] == "}" and text[i - 1] != "\\":
            depth -= 1
            if depth == 0:
                return text[last.end() : i].strip(), False
    return None, True


def find_last_number(text: str) -> str | None:
    """The last number in the text (see the module doc), as written.

    For example "1,000", "-3", "1/2", "50%".
    """
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    number = m.group().strip()
    if number.startswith("-"):
        before = text[: m.start()].rstrip()
        word_match = re.search(r"[A-Za-z]*$", before)
        assert word_match is not None, "[A-Za-z]*$ matches every string, at worst empty"
        previous_word = word_match.group()
        if before and (before[-1].isdigit() or before[-1] in ")]}" or len(previous_word) == 1):
            number = number[1:]  # a binary minus: "10-3", "(a+b) - 3", "x - 3"
    return number


class _BudgetExceeded(BaseException):
    """Raised by the SIGALRM handler.

    A BaseException so that math-verify's `except Exception` lets it out.
    """


class _CallBudget:
    """Interrupts the enclosed block after `seconds` of wall time (main thread only; else a no-op).

    Restores any previous SIGALRM handler and re-arms a timer that was already running.
    """

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.active = (
            seconds is not None
            and seconds > 0
            and threading.current_thread() is threading.main_thread()
        )

    def __enter__(self) -> _CallBudget:
        if self.active:
            assert self.seconds is not None, "active implies a budget in seconds"
            self._previous_handler = signal.signal(signal.SIGALRM, self._raise)
            self._previous_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self._started = time.monotonic()
        return self

    @staticmethod
    def _raise(signum, frame):
        raise _BudgetExceeded

    def __exit__(self, *exc_info) -> None:
        if not self.active:
            return
        try:
            self._disarm()
        except _BudgetExceeded:  # the timer fired while disarming: the block is over, finish it
            self._disarm()

    def _disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        previous = self._previous_handler
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        delay, interval = self._previous_timer
        if delay > 0:  # someone else's timer was running: give it back what is left of it
            remaining = max(delay - (time.monotonic() - self._started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)
        self._previous_timer = (0.0, 0.0)


def _as_math(answer: str) -> str:
    """Wrap an answer in $...$ unless it already carries LaTeX delimiters or a box.

    An escaped dollar (``\\$5``, a price) is no delimiter.
    """
    unescaped = answer.replace("\\$", "")
    if "$" in unescaped or "\\boxed" in answer or "\\(" in answer or "\\[" in answer:
        return answer
    return f"${answer}$"


def math_verify_match(
    answer: str, labels: Sequence[str], *, timeout_s: float, max_answer_chars: int = 1000
) -> bool:
    """Whether math-verify finds `answer` equal to one of `labels` (hyrl's math equivalence, used
    by every math built-in). The whole call, every label parsed and compared, runs under one
    ``timeout_s`` budget (module doc); past it, or with an answer longer than
    `max_answer_chars`, the answer does not match. A label math-verify cannot parse raises
    ValueError (a data error, counted as a reward failure)."""
    if not answer or len(answer) > max_answer_chars:
        return False
    answer = re.sub(r"(?<!\\)%", r"\\%", answer)  # LaTeX percent, as math-verify reads it
    try:
        with _CallBudget(timeout_s):
            golds = []
            for label in labels:
                gold = parse(_as_math(label), _EXTRACTION, parsing_timeout=None)
                if not gold:
                    raise ValueError(f"math-verify cannot parse the label {label!r}")
                golds.append(gold)
            predicted = parse(_as_math(answer), _EXTRACTION, parsing_timeout=None)
            return bool(predicted) and any(
                verify(gold, predicted, timeout_seconds=None) for gold in golds
            )
    except _BudgetExceeded:
        logger.warning(
            "math-verify: over the %.3g s budget on answer %.80r, scored as no match",
            timeout_s,
            answer,
        )
        return False


class MathReward(MathVerifyReward):
    """1.0 iff the response's final answer equals the label by math-verify, else 0.0.

    See the module doc.
    """

    def __init__(
        self,
        *,
        fallback_to_last_number: bool = True,
        reward_truncated: bool = False,
        timeout_s: float = 5.0,
        max_answer_chars: int = 1000,
    ):
        super().__init__(reward_truncated=reward_truncated, timeout_s=timeout_s)
        self.fallback_to_last_number = fallback_to_last_number
        self.max_answer_chars = max_answer_chars  # longer extracted answers score 0 unparsed

    def extract_answer(self, response_text: str) -> str | None:
        """The answer text the label is compared with, or None (no answer / malformed box)."""
        boxed, unclosed = find_last_boxed(response_text)
        if boxed is not None:
            return boxed or None
        if unclosed or not self.fallback_to_last_number:
            return None
        return find_last_number(response_text)

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        answer = self.extract_answer(response_text)
        if answer is None:
            return 0.0
        return float(
            math_verify_match(
                answer,
                [label],
                timeout_s=self.timeout_s,
                max_answer_chars=self.max_answer_chars,
            )
        )
