"""Math prompt sets as users download them -> hyrl's prompt/label jsonl (`hyrl data import`).

    result = import_rows("dapo-math-17k.parquet", PRESETS["dapo-math"])
    write_jsonl_atomic(result.records, "dapo-math-17k.jsonl", force=False)

Layouts (the column names of the source; docs/data.md has where each was seen):

* verl: ``prompt`` (a list of chat messages, or a string) and ``reward_model`` (a struct whose
  ``ground_truth`` is the answer), e.g. BytedTsinghua-SIA/DAPO-Math-17k and AIME-2024, and what
  verl's examples/data_preprocess scripts write. ``extra_info.index`` is kept as the id.
* slime: ``prompt`` (a list of chat messages, or a string) and ``label``, e.g.
  zhuzilin/dapo-math-17k and zhuzilin/aime-2024.
* problem/answer: a bare problem in ``problem`` (or ``question``) and its ``answer``, the names
  matched in any case (``Problem``/``Answer`` of Maxwell-Jia/AIME_2024), e.g.
  HuggingFaceH4/MATH-500, AI-MO/aimo-validation-aime, HuggingFaceH4/aime_2024.

SOURCE is read by hyrl/data/sources.py: a file, or a directory of shards, each file by its own
format (parquet known by its content, whatever its name).

The layout is read from the first record's columns, in that order (``reward_model`` present:
verl; ``prompt`` and ``label``: slime; else problem/answer); anything else is an ImportDataError
naming the columns found and the layouts accepted.

Rules, one per case in tests/unit/data/test_importer.py:

* Prompt text. A ``prompt`` (verl, slime) is kept as written: those files carry their own
  instruction. A chat-message prompt must be exactly one message with role "user" and string
  content, which becomes the prompt (hyrl applies the chat template with
  --apply-chat-template); a system message, several turns or a non-text content is refused,
  naming the row. A bare problem (problem/answer) is wrapped in the preset's instruction.
* Label. A string as is; a number with str() (204 -> "204"); a list of exactly one answer as
  that answer; several answers, a boolean or an object are refused.
* Incomplete rows (an empty prompt or problem; a missing, null or empty answer) are refused,
  listing the first rows; with drop_incomplete they are dropped and counted.
* Duplicates. Rows with the same prompt and label as an earlier row are dropped and counted
  unless keep_duplicates (DAPO-Math-17k's parquet repeats each of its ~17k prompts ~100
  times, the AIME-2024 parquet each of 30 problems 32 times). A prompt seen with two different
  labels keeps both rows and is counted.
* Each record written is {"prompt", "label", "id", "source"}: id is the source's own id
  (``unique_id``, ``id``, ``extra_info.index``) or FILE:ROW, source is "FILE row N".
* The reward the output is meant for follows the answer format its prompts ask for: any prompt
  asking for DAPO's "Answer:" line -> "dapo" (DAPO's reward reads that line, and \\boxed{});
  else any asking for \\boxed{} -> "math"; none asking for either -> the preset's own reward.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hyrl.data.sources import ImportDataError, Source, find_sources, read_rows

LAYOUTS = (
    "verl (prompt + reward_model.ground_truth)",
    "slime (prompt + label)",
    "problem/answer (problem or question + answer, any case)",
)

# DAPO's instruction, as DAPO-Math-17k's own prompts carry it around each problem.
DAPO_BEFORE = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem."
    "\n\n"
)
DAPO_AFTER = '\n\nRemember to put your answer on its own line after "Answer:".'
# verl's instruction for MATH (examples/data_preprocess/math_dataset.py), after the problem.
BOXED_AFTER = " Let's think step by step and output the final answer within \\boxed{}."

# What marks a prompt's answer format (first match wins): DAPO's answer line, then a box.
ANSWER_LINE_MARKERS = ("Answer: $Answer", 'after "Answer:"')
BOXED_MARKER = "\\boxed"
INCOMPLETE_LISTED = 5


@dataclass(frozen=True)
class Preset:
    """What a bare problem becomes, and the reward the set is meant for."""

    name: str
    before: str  # instruction text before a bare problem
    after: str  # and after it
    rm_type: str  # the reward when no prompt states an answer format
    meant_for: str  # one line for the help

    def wrap(self, problem: str) -> str:
        return f"{self.before}{problem}{self.after}"


PRESETS = {
    "dapo-math": Preset(
        "dapo-math",
        DAPO_BEFORE,
        DAPO_AFTER,
        "dapo",
        "DAPO-Math-17k training prompts; a bare problem gets DAPO's 'Answer:' instruction",
    ),
    "math500": Preset(
        "math500",
        "",
        BOXED_AFTER,
        "math",
        "MATH-500 held-out set; a bare problem gets verl's \\boxed{} instruction",
    ),
    "aime": Preset(
        "aime",
        "",
        BOXED_AFTER,
        "math",
        "AIME held-out set; a bare problem gets verl's \\boxed{} instruction",
    ),
}


@dataclass
class ImportResult:
    """The records to write and the counts a user is told."""

    records: list[dict[str, str]]
    source: Source  # the files read, each with its format, and a directory's ignored entries
    layout: str
    rows_read: int = 0
    wrapped: int = 0  # bare problems given the preset's instruction
    duplicates_dropped: int = 0
    incomplete_dropped: int = 0
    prompts_with_several_labels: int = 0
    answer_formats: dict[str, int] = field(
        default_factory=lambda: {"answer_line": 0, "boxed": 0, "none": 0}
    )
    rm_type: str = ""


# -- layouts ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Which columns hold the prompt and the answer."""

    name: str
    prompt: str
    answer: str  # a column, or "reward_model" whose ground_truth is the answer
    bare_problem: bool  # the prompt is a bare problem: the preset's instruction is added


def detect_layout(columns: list[str], where: str) -> Layout:
    """The layout of a record with these columns (module doc), or ImportDataError naming them."""
    if "reward_model" in columns and "prompt" in columns:
        return Layout("verl", "prompt", "reward_model", bare_problem=False)
    if "prompt" in columns and "label" in columns:
        return Layout("slime", "prompt", "label", bare_problem=False)
    by_lower: dict[str, list[str]] = {}
    for column in columns:
        by_lower.setdefault(column.lower(), []).append(column)
    problems = by_lower.get("problem", []) + by_lower.get("question", [])
    answers = by_lower.get("answer", [])
    if len(problems) == 1 and len(answers) == 1:
        return Layout("problem/answer", problems[0], answers[0], bare_problem=True)
    if len(problems) > 1 or len(answers) > 1:
        raise ImportDataError(
            f"{where}: ambiguous columns {sorted(problems + answers)}: more than one can be the "
            f"problem or the answer; keep one of each"
        )
    raise ImportDataError(
        f"{where}: unknown layout, columns found: {sorted(columns)}; accepted layouts: "
        f"{'; '.join(LAYOUTS)}"
    )


def _user_text(value: list, where: str, column: str) -> str:
    """The text of a chat prompt that is one user message; anything else is refused."""
    roles = [m.get("role") if isinstance(m, dict) else type(m).__name__ for m in value]
    if len(value) != 1 or roles != ["user"]:
        raise ImportDataError(
            f"{where}: {column!r} holds {len(value)} message(s) with roles {roles}; a prompt "
            f"must be one user message (--apply-chat-template adds the template): a system "
            f"message or several turns cannot be kept as one prompt"
        )
    content = value[0].get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ImportDataError(
            f"{where}: {column!r} user message content is a {type(content).__name__}, not text"
        )
    return content


def _prompt_text(value: Any, where: str, column: str) -> str:
    """The prompt as text ("" when empty: an incomplete row); a bad type is refused."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _user_text(value, where, column)
    raise ImportDataError(
        f"{where}: {column!r} is a {type(value).__name__}; expected text or a list of chat messages"
    )


def _answer_text(value: Any, where: str, column: str) -> str:
    """The answer as text ("" when missing: an incomplete row); a bad type is refused."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise ImportDataError(f"{where}: {column!r} is a boolean ({value}), not an answer")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ImportDataError(f"{where}: {column!r} is {value}, not a usable answer")
        return str(value)
    if isinstance(value, list):
        if len(value) > 1:
            raise ImportDataError(
                f"{where}: {column!r} holds {len(value)} answers {value!r}; a label is one answer"
            )
        return _answer_text(value[0], where, column) if value else ""
    raise ImportDataError(
        f"{where}: {column!r} is a {type(value).__name__}; expected text or a number"
    )


def _row_id(raw: dict[str, Any], layout: Layout) -> str | None:
    for key in ("unique_id", "id", "ID", "Id"):
        if key in raw and raw[key] is not None and str(raw[key]).strip():
            return str(raw[key])
    extra = raw.get("extra_info")
    if layout.name == "verl" and isinstance(extra, dict) and extra.get("index") is not None:
        return str(extra["index"])
    return None


def _prompt_and_label(raw: dict[str, Any], layout: Layout, where: str) -> tuple[str, str]:
    """The row's prompt and label as text ("" for a missing one: an incomplete row)."""
    for column in (layout.prompt, layout.answer):
        if column not in raw:
            raise ImportDataError(
                f"{where}: no column {column!r} ({layout.name} layout, read from the first "
                f"row); this row has {sorted(raw)}"
            )
    prompt = _prompt_text(raw[layout.prompt], where, layout.prompt)
    if layout.answer != "reward_model":
        return prompt, _answer_text(raw[layout.answer], where, layout.answer)
    reward_model = raw["reward_model"]
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise ImportDataError(
            f"{where}: 'reward_model' is {reward_model!r}; the verl layout needs a struct with "
            f"'ground_truth'"
        )
    return prompt, _answer_text(reward_model["ground_truth"], where, "reward_model.ground_truth")


def answer_format(prompt: str) -> str:
    """ "answer_line" (DAPO's 'Answer:' line), "boxed" or "none": what the prompt asks for."""
    if any(marker in prompt for marker in ANSWER_LINE_MARKERS):
        return "answer_line"
    if BOXED_MARKER in prompt:
        return "boxed"
    return "none"


# -- import ----------------------------------------------------------------------------------
def import_rows(
    source: str,
    preset: Preset,
    *,
    keep_duplicates: bool = False,
    drop_incomplete: bool = False,
) -> ImportResult:
    """SOURCE's rows as {"prompt", "label", "id", "source"} records under the rules of the
    module doc; ImportDataError (file, row, what was found) before anything is written."""
    found = find_sources(source)
    result = ImportResult(records=[], source=found, layout="")
    seen: set[tuple[str, str]] = set()
    label_of: dict[str, str] = {}
    several_labels: set[str] = set()
    incomplete: list[str] = []  # the first INCOMPLETE_LISTED, counted in incomplete_rows
    incomplete_rows = 0
    for source_file in found.files:
        layout: Layout | None = None
        file_name = os.path.basename(source_file.path)
        for position, raw in read_rows(source_file):
            where = f"{source_file.path} {position}"
            if not isinstance(raw, dict):
                raise ImportDataError(f"{where}: expected an object, got a {type(raw).__name__}")
            if layout is None:
                layout = detect_layout(list(raw), where)
                if result.layout and layout.name != result.layout:
                    raise ImportDataError(
                        f"{where}: layout {layout.name}, but the shards before it are "
                        f"{result.layout}; a directory's shards must share one layout"
                    )
                result.layout = layout.name
            result.rows_read += 1
            prompt, label = _prompt_and_label(raw, layout, where)
            if not prompt.strip() or not label.strip():
                incomplete_rows += 1
                if len(incomplete) < INCOMPLETE_LISTED:
                    missing = "no prompt" if not prompt.strip() else "no answer"
                    incomplete.append(f"{where} ({missing})")
                continue
            if layout.bare_problem:
                prompt = preset.wrap(prompt)
                result.wrapped += 1
            if (prompt, label) in seen and not keep_duplicates:
                result.duplicates_dropped += 1
                continue
            seen.add((prompt, label))
            if label_of.setdefault(prompt, label) != label:
                several_labels.add(prompt)
            source_row = f"{file_name} {position}"
            result.records.append(
                {
                    "prompt": prompt,
                    "label": label,
                    "id": _row_id(raw, layout) or source_row,
                    "source": source_row,
                }
            )
            result.answer_formats[answer_format(prompt)] += 1
    if incomplete_rows and not drop_incomplete:
        unlisted = incomplete_rows - len(incomplete)
        more = f" and {unlisted} more" if unlisted else ""
        raise ImportDataError(
            f"{incomplete_rows} incomplete row(s): {'; '.join(incomplete)}{more}; fix the source "
            f"or pass --drop-incomplete to drop them (counted)"
        )
    result.incomplete_dropped = incomplete_rows
    result.prompts_with_several_labels = len(several_labels)
    if not result.records:
        raise ImportDataError(
            f"{source}: no prompts to write ({result.rows_read} rows read, "
            f"{result.incomplete_dropped} incomplete dropped)"
        )
    formats = result.answer_formats
    if formats["answer_line"]:
        result.rm_type = "dapo"
    elif formats["boxed"]:
        result.rm_type = "math"
    else:
        result.rm_type = preset.rm_type
    return result


# -- writing ---------------------------------------------------------------------------------
def check_out_path(out: str, *, force: bool) -> None:
    """--out must be a .jsonl path that is not there yet (or force)."""
    if not out.endswith(".jsonl"):
        raise ImportDataError(f"--out {out}: must end with .jsonl (what --prompt-data reads)")
    if os.path.isdir(out):
        raise ImportDataError(f"--out {out}: is a directory; give a .jsonl file path")
    if os.path.exists(out) and not force:
        raise ImportDataError(f"--out {out}: exists; pass --force to replace it")


def write_jsonl_atomic(records: list[dict[str, str]], out: str, *, force: bool) -> None:
    """One JSON object per line into a temporary file beside OUT, then renamed onto OUT: a
    reader never sees half a file, and an existing OUT is replaced only with force."""
    check_out_path(out, force=force)
    directory = os.path.dirname(os.path.abspath(out))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
