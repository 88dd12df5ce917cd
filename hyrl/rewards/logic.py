"""Logic-puzzle reward: the structured answer (a JSON object or list) must equal the label's.

* The label is JSON text of an object or a list (hyrl.data.prompt_data keeps list/dict labels as
  JSON), e.g. ``{"alice": "knight", "bob": "knave"}`` or ``["carol", "alice", "bob"]``; anything
  else raises ValueError (a data error, counted as a reward failure).
* The answer is the JSON inside the last ``\\boxed{...}`` when that holds valid JSON, else the
  last top-level JSON object or list in the text (scanning left to right, so a list nested in an
  object is part of the object, not an answer of its own). Strict JSON: double quotes, no
  trailing commas; ``{'alice': 'knight'}`` is no answer. Only the last MAX_SCANNED_CHARS are
  scanned; the worst input measured ("[1, " x 2000) takes 0.25 s on one CPU core.
* Normalisation before comparing: object keys and string values are stripped and case-folded,
  recursively; numbers compare as numbers (1 == 1.0), never equal to strings ("1" != 1) or
  booleans (true != 1). Object key
  order does not matter, list order does (an ordering is the answer).
* 1.0 iff equal after normalisation, else 0.0 (no JSON, a different structure, extra or missing
  keys). A response cut by the length limit (finish_reason != "stop") scores 0.0 unless
  ``reward_truncated=True`` (the rule of every built-in reward; see hyrl/rewards/math.py).
"""

from __future__ import annotations

import json
from typing import Any

from hyrl.rewards.base import BuiltinReward
from hyrl.rewards.math import find_last_boxed

MAX_SCANNED_CHARS = 8_000  # only the tail is searched: the scan can be quadratic ("[1, [1, ...")
_DECODER = json.JSONDecoder()


def normalize(value: Any) -> Any:
    """Strip and case-fold every string and object key, recursively."""
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, dict):
        return {normalize(str(k)): normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, bool):
        return ("bool", value)  # so that true != 1, as in JSON
    return value


def _structured(text: str) -> Any:
    """The JSON object or list `text` is (surrounding spaces allowed), or None."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def find_last_json(text: str) -> Any:
    """The last top-level JSON object or list in the text, or None."""
    text = text[-MAX_SCANNED_CHARS:]
    last, i = None, 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = _DECODER.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            except RecursionError:  # nested past Python's limit: skip the run of open brackets
                i += 1
                while i < len(text) and text[i] in "{[ \n":
                    i += 1
                continue
            last, i = value, end
        else:
            i += 1
    return last


def extract_structured_answer(response_text: str) -> Any:
    """The boxed JSON if the last box holds some, else the last JSON object/list, else None."""
    boxed, _ = find_last_boxed(response_text)
    if boxed is not None:
        value = _structured(boxed)
        if value is not None:
            return value
    return find_last_json(response_text)


class LogicReward(BuiltinReward):
    """1.0 iff the response's last JSON answer equals the label after normalisation (module doc)."""

    def __call__(self, response_text: str, label: str, finish_reason: str) -> float:
        expected = _structured(label)
        if expected is None:
            raise ValueError(f"logic label must be a JSON object or list, got {label[:80]!r}")
        if self.scores_zero_as_cut(finish_reason):
            return 0.0
        answer = extract_structured_answer(response_text)
        return float(answer is not None and normalize(answer) == normalize(expected))
