"""Prompt datasets from files (--prompt-data, --eval-prompt-data): .jsonl or .parquet records.

    records = load_records("math.jsonl", input_key="prompt", label_key="label")
    tokenizer = load_tokenizer("path/to/tokenizer")
    dataset = PromptDataset(
        records, tokenizer, apply_chat_template=True, max_prompt_len=1024, seed=0
    )
    batch = dataset.next_batch(64)           # list[Prompt], the same stream semantics as ArithTask

A record is one JSON object per line (.jsonl: UTF-8, a BOM accepted, blank lines skipped) or one
row (.parquet). A file is parquet by its content (b"PAR1"), whatever its name. Its
prompt (--input-key) must be a non-empty string. Its label (--label-key) becomes text: a string
as is, a number with str() (3 -> "3", 0.5 -> "0.5"), a list, object or boolean as JSON text
(logic puzzles: {"alice": "knight"} -> '{"alice": "knight"}'); null is an error. Every error is
a PromptDataError naming the file, the line (jsonl, first line 1) or row (parquet, first row 0)
and what is wrong.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from hyrl.config import DATA_EXTENSIONS
from hyrl.data.files import is_parquet, one_line, pyarrow_parquet, read_jsonl
from hyrl.data.stream import Prompt, PromptStream


class PromptDataError(ValueError):
    """A prompt file that cannot be used; the message names the file, line/row and problem."""


# -- records ---------------------------------------------------------------------------------
def _label_text(value: Any, where: str, label_key: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise PromptDataError(f"{where}: label {label_key!r} is {value}, not a usable answer")
        return str(value)
    if value is None:
        raise PromptDataError(f"{where}: label {label_key!r} is null")
    raise PromptDataError(
        f"{where}: label {label_key!r} is a {type(value).__name__}; "
        f"expected a string, number, list or object"
    )


def _record(raw: Any, where: str, input_key: str, label_key: str) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise PromptDataError(f"{where}: expected a JSON object, got a {type(raw).__name__}")
    for key, flag in ((input_key, "--input-key"), (label_key, "--label-key")):
        if key not in raw:
            raise PromptDataError(
                f"{where}: no key {key!r} ({flag}); the record has keys {sorted(raw)}"
            )
    prompt = raw[input_key]
    if not isinstance(prompt, str):
        raise PromptDataError(
            f"{where}: prompt {input_key!r} is a {type(prompt).__name__}, not a string"
        )
    if not prompt.strip():
        raise PromptDataError(f"{where}: prompt {input_key!r} is empty")
    return {"prompt": prompt, "label": _label_text(raw[label_key], where, label_key)}


def _read_jsonl(path: str, input_key: str, label_key: str) -> list[dict[str, str]]:
    return [
        _record(raw, f"{path} line {line_number}", input_key, label_key)
        for line_number, raw in read_jsonl(path, PromptDataError)
    ]


def _read_parquet(path: str, input_key: str, label_key: str) -> list[dict[str, str]]:
    pq = pyarrow_parquet(path, PromptDataError)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise PromptDataError(f"{path}: not a readable parquet file ({one_line(exc)})") from exc
    for key, flag in ((input_key, "--input-key"), (label_key, "--label-key")):
        if key not in table.column_names:
            raise PromptDataError(
                f"{path} row 0: no column {key!r} ({flag}); the file has "
                f"columns {sorted(table.column_names)}"
            )
    rows = table.select([input_key, label_key]).to_pylist()
    return [_record(raw, f"{path} row {i}", input_key, label_key) for i, raw in enumerate(rows)]


def load_records(
    path: str, input_key: str = "prompt", label_key: str = "label"
) -> list[dict[str, str]]:
    """The file's records as {"prompt": text, "label": text}, in file order (module doc)."""
    if not path.endswith(DATA_EXTENSIONS):
        raise PromptDataError(
            f"{path}: unsupported extension; allowed: {', '.join(DATA_EXTENSIONS)}"
        )
    if not os.path.isfile(path):
        raise PromptDataError(f"{path}: no such file")
    if is_parquet(path, PromptDataError):
        records = _read_parquet(path, input_key, label_key)
    else:
        records = _read_jsonl(path, input_key, label_key)
    if not records:
        raise PromptDataError(f"{path}: empty, no records")
    return records


# -- tokenizer -------------------------------------------------------------------------------
def load_tokenizer(path: str):
    """transformers.AutoTokenizer from a local directory (never downloads)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"--tokenizer-path {path!r}: not an existing directory (a local "
            f"Hugging Face tokenizer directory, e.g. a model checkpoint)"
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, ...
        raise ValueError(
            f"--tokenizer-path {path!r}: cannot load a tokenizer from it "
            f"({type(exc).__name__}: {exc})"
        ) from exc


def encode_prompt(tokenizer, text: str, apply_chat_template: bool) -> list[int]:
    """Token ids of one prompt: as the single user message of the chat template (with the
    generation prompt, the template's own special tokens only), or the plain text with the
    tokenizer's special tokens (add_special_tokens=True)."""
    if not apply_chat_template:
        return list(tokenizer(text, add_special_tokens=True)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"--apply-chat-template: the tokenizer at "
            f"{getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
            f"drop the flag or use a tokenizer that has one"
        )
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


# -- dataset ---------------------------------------------------------------------------------
class PromptDataset(PromptStream):
    """An endless, resumable stream of a file's prompts, shuffled per epoch like ArithTask.

    Every prompt is encoded once here. Prompts longer than max_prompt_len tokens are dropped and
    counted in `dropped_too_long` (None = keep all); none left is an error. Epoch e is the kept
    prompts in the order of a permutation drawn from numpy's Generator seeded by (seed, e):
    deterministic given the seed, resumable from the position; batches may straddle epochs.
    """

    def __init__(
        self,
        records: list[dict[str, str]],
        tokenizer,
        *,
        apply_chat_template: bool,
        max_prompt_len: int | None,
        seed: int,
        source: str = "prompts",
    ):
        super().__init__(seed)
        if max_prompt_len is not None and max_prompt_len < 1:
            raise ValueError(f"max_prompt_len must be >= 1 token, got {max_prompt_len}")
        self.source = source
        self.dropped_too_long = 0
        longest = 0
        for record in records:
            ids = encode_prompt(tokenizer, record["prompt"], apply_chat_template)
            longest = max(longest, len(ids))
            if max_prompt_len is not None and len(ids) > max_prompt_len:
                self.dropped_too_long += 1
                continue
            self._pool.append(
                Prompt(
                    prompt_ids=ids,
                    label=record["label"],
                    text=record["prompt"],
                    index=len(self._pool),
                )
            )
        if not self._pool:
            raise PromptDataError(
                f"{source}: all {len(records)} prompts are longer than "
                f"--rollout-max-prompt-len={max_prompt_len} tokens (longest "
                f"{longest}); nothing left to train on"
            )

    def __len__(self) -> int:
        return self.num_prompts

    def prompts(self) -> list[Prompt]:
        """Every kept prompt in file order, index = position in this list (for evaluation)."""
        return list(self._pool)

    eval_prompts = prompts  # the ArithTask name, so a trainer can evaluate either the same way

    def _state_identity(self) -> dict[str, Any]:
        return {"num_prompts": self.num_prompts}

    def _check_state(self, state: dict[str, Any]) -> None:
        if state.get("num_prompts", self.num_prompts) != self.num_prompts:
            raise ValueError(
                f"state is for {state['num_prompts']} prompts, {self.source} has {self.num_prompts}"
            )


def load_prompt_dataset(
    path: str,
    tokenizer,
    *,
    input_key: str = "prompt",
    label_key: str = "label",
    apply_chat_template: bool = False,
    max_prompt_len: int | None = None,
    seed: int = 0,
) -> PromptDataset:
    """load_records + PromptDataset, for one --prompt-data file."""
    return PromptDataset(
        load_records(path, input_key, label_key),
        tokenizer,
        apply_chat_template=apply_chat_template,
        max_prompt_len=max_prompt_len,
        seed=seed,
        source=path,
    )


def load_eval_prompt_sets(
    pairs: list[str],
    tokenizer,
    *,
    input_key: str = "prompt",
    label_key: str = "label",
    apply_chat_template: bool = False,
    max_prompt_len: int | None = None,
) -> dict[str, PromptDataset]:
    """--eval-prompt-data NAME FILE [NAME FILE ...] -> {NAME: dataset}, in the order given."""
    if len(pairs) % 2:
        raise ValueError(f"--eval-prompt-data takes NAME FILE pairs, got {len(pairs)} values")
    return {
        name: load_prompt_dataset(
            path,
            tokenizer,
            input_key=input_key,
            label_key=label_key,
            apply_chat_template=apply_chat_template,
            max_prompt_len=max_prompt_len,
        )
        for name, path in zip(pairs[0::2], pairs[1::2])
    }
