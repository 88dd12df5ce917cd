"""The task and its data: the built-in arithmetic task or prompt files, the tokenizer, the
held-out sets, and the reward function."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hyrl.config.errors import _fail
from hyrl.config.kinds import AppliesOnlyWith, _on, _opt

if TYPE_CHECKING:
    from hyrl.config.concerns.model import ModelFlags

# The arithmetic task's prompt ("a+b=" style, with BOS) is this many tokens long.
ARITH_PROMPT_TOKENS = 5
# Size of the tiny task's tokenizer vocabulary.
TASK_VOCAB_SIZE = 16
# What a prompt file may be (hyrl.data.prompt_data reads them).
DATA_EXTENSIONS = (".jsonl", ".parquet")


@dataclass
class DataFlags:
    task: str | None = _opt(
        None,
        "training task (name): arith_mod10 = the built-in arithmetic task, prompt_data = "
        "--prompt-data; none = prompt_data when --prompt-data is given, else arith_mod10",
        "task",
        choices=("arith_mod10", "prompt_data"),
    )
    prompt_data: str | None = _opt(
        None,
        "training prompts, a .jsonl or .parquet file with one prompt per record (path)",
        "task",
    )
    input_key: str = _opt("prompt", "record field holding the prompt text (name)", "task")
    label_key: str = _opt("label", "record field holding the reference answer (name)", "task")
    apply_chat_template: bool = _opt(
        False,
        "wrap each prompt as a user message in the tokenizer's chat template (on/off)",
        "task",
    )
    tokenizer_path: str | None = _opt(
        None,
        "local Hugging Face tokenizer directory for --prompt-data (path); none = --hf-checkpoint",
        "task",
    )
    rollout_max_prompt_len: int | None = _opt(
        None,
        "drop prompts longer than this when loading --prompt-data (tokens); none = "
        "--max-position-embeddings - --rollout-max-response-len",
        "task",
    )
    eval_prompt_data: list[str] | None = _opt(
        None,
        "held-out sets as NAME FILE pairs, each logged as eval/NAME/accuracy (names and "
        "paths); none = the task's own held-out split",
        "task",
    )
    rm_type: str | None = _opt(
        None,
        "reward function (name): exact_match, math (math-verify on the boxed or last "
        "answer), mcq (one choice letter), logic (exact structured answer), and slime's "
        "deepscaler (math-verify on the last box after the thinking), dapo (math-verify on the "
        "last 'Answer:' line, 1/0 where slime's is 1/-1) and f1 (SQuAD token F1 of the boxed "
        "answer, else the response); none = exact_match for arith_mod10, required with "
        "--prompt-data unless --custom-rm-path",
        "task",
        choices=("exact_match", "math", "mcq", "logic", "deepscaler", "dapo", "f1"),
    )
    custom_rm_path: str | None = _opt(
        None,
        "your reward function as module:function, called as f(response_text, label, "
        "finish_reason) -> float (import path)",
        "task",
    )
    task_max_operand: int = _opt(
        9, "largest operand in the arithmetic prompts (integer, 1..9)", "task"
    )
    task_eval_fraction: float = _opt(
        0.2,
        "fraction of the task's prompts held out for evaluation and never trained on "
        "(fraction, in [0, 1); round(fraction x prompts) are held out when --eval-interval > 0; "
        "0 = evaluate on the training prompts themselves, an in-distribution check)",
        "task",
    )


@dataclass(frozen=True)
class DataView:
    """The data concern's settings, resolved (`ResolvedConfig.data`): the task, its prompts and
    its rewards."""

    task: str
    prompt_data: str | None
    input_key: str
    label_key: str
    apply_chat_template: bool
    tokenizer_path: str | None
    rollout_max_prompt_len: int | None
    eval_prompt_data: list[str] | None
    rm_type: str | None
    custom_rm_path: str | None
    task_max_operand: int
    task_eval_fraction: float


POSITIVE_COUNTS = ("task_max_operand", "rollout_max_prompt_len")
# Flags that exclude each other (see hyrl.config.parser.EXCLUSIVE_FLAGS): a built-in reward or
# one's own.
EXCLUSIVE_FLAGS = ((("rm_type",), ("custom_rm_path",)),)

# Flags that apply only under a condition (see hyrl.config.conditional_flags): the prompt files'
# settings, only with --task prompt_data.
APPLIES_ONLY_WITH: tuple[AppliesOnlyWith[DataFlags], ...] = (
    AppliesOnlyWith(
        ("prompt_data", "tokenizer_path", "eval_prompt_data", "rollout_max_prompt_len"),
        "--task prompt_data",
        lambda c: c.task == "prompt_data",
        "applies to --task prompt_data, not {task}",
        "leave it unset, or train on --prompt-data",
    ),
    AppliesOnlyWith(
        ("apply_chat_template",),
        "--task prompt_data",
        lambda c: c.task == "prompt_data",
        "applies to --task prompt_data, not {task}",
        "--no-apply-chat-template",
        _on,
    ),
)


def check_given(c: DataFlags) -> None:
    """The held-out fraction."""
    if not 0 <= c.task_eval_fraction < 1:
        _fail(
            "task_eval_fraction",
            c.task_eval_fraction,
            "a held-out fraction must lie in [0, 1)",
            "0 <= fraction < 1",
        )


def resolve(cfg: DataFlags) -> dict[str, Any]:
    """--task <- prompt_data when --prompt-data is given, else arith_mod10; --rm-type <-
    exact_match for arith_mod10 (unless --custom-rm-path)."""
    updates: dict[str, Any] = {}
    if cfg.task is None:
        updates["task"] = "prompt_data" if cfg.prompt_data is not None else "arith_mod10"
    if (
        cfg.rm_type is None
        and cfg.custom_rm_path is None
        and updates.get("task", cfg.task) == "arith_mod10"
    ):
        updates["rm_type"] = "exact_match"
    return updates


def check_task(
    c: DataFlags, *, model: ModelFlags, eval_interval: int, rollout_max_response_len: int
) -> None:
    """The arithmetic task's operands, held-out split, positions and vocabulary
    (`eval_interval` and `rollout_max_response_len`: evaluation's and rollout's flags)."""
    if c.task == "arith_mod10":
        if not 1 <= c.task_max_operand <= 9:
            _fail(
                "task_max_operand",
                c.task_max_operand,
                "the arith_mod10 tokenizer has single digits only",
                "1..9",
            )
        n = (c.task_max_operand + 1) ** 2
        # The same split as hyrl.data.arith.ArithTask; prompts are held out only when evaluating.
        n_eval = round(c.task_eval_fraction * n) if eval_interval > 0 else 0
        allowed = (
            f"0 (evaluate on the training prompts), or a fraction holding out between 1 "
            f"and {n - 1} of the {n} prompts (round(fraction x {n})), e.g. {1 / n:.3g} "
            f"to {(n - 1) / n:.3g}"
        )
        if n - n_eval < 1:
            _fail(
                "task_eval_fraction",
                c.task_eval_fraction,
                f"holds out {n_eval} of the {n} prompts (--task-max-operand="
                f"{c.task_max_operand}), leaving {n - n_eval} for training",
                allowed,
            )
        if eval_interval > 0 and c.task_eval_fraction > 0 and n_eval < 1:
            _fail(
                "task_eval_fraction",
                c.task_eval_fraction,
                f"holds out {n_eval} of the {n} prompts (--task-max-operand="
                f"{c.task_max_operand}), so evaluation (--eval-interval={eval_interval}) "
                "has none",
                allowed,
            )
        if model.max_position_embeddings < ARITH_PROMPT_TOKENS + rollout_max_response_len:
            _fail(
                "rollout_max_response_len",
                rollout_max_response_len,
                f"a {ARITH_PROMPT_TOKENS}-token prompt plus the response exceeds "
                f"--max-position-embeddings={model.max_position_embeddings}",
                f"at most {model.max_position_embeddings - ARITH_PROMPT_TOKENS} "
                f"(--max-position-embeddings - {ARITH_PROMPT_TOKENS}), or a larger "
                "--max-position-embeddings",
            )
    if c.task == "arith_mod10" and model.vocab_size < TASK_VOCAB_SIZE:
        _fail(
            "vocab_size",
            model.vocab_size,
            f"smaller than the task tokenizer's {TASK_VOCAB_SIZE} tokens",
            f"an integer >= {TASK_VOCAB_SIZE}",
        )


def _check_data_file(flag_field: str, path: str, shown: Any = None, exists: bool = True) -> None:
    """A data file's extension, and (`exists`) that the file is there."""
    allowed = "an existing " + " or ".join(DATA_EXTENSIONS) + " file"
    shown = path if shown is None else shown
    if not path.endswith(DATA_EXTENSIONS):
        _fail(flag_field, shown, f"{path!r} is not a {' or '.join(DATA_EXTENSIONS)} file", allowed)
    if exists and not os.path.isfile(path):
        _fail(flag_field, shown, f"{path!r} does not exist", allowed)


def check_prompts_and_rewards(
    c: DataFlags, files: bool = True, *, model: ModelFlags, eval_interval: int
) -> None:
    """The task's data, tokenizer and reward (run on a resolved config: task is set); `files`:
    whether the data files and the tokenizer directory must exist here (not under --dry-run,
    which plans from any machine); `eval_interval`: evaluation's flag."""
    if c.task == "prompt_data":
        if c.prompt_data is None:
            _fail("task", c.task, "needs the prompts", "--prompt-data FILE")
        _check_data_file("prompt_data", c.prompt_data, exists=files)
        if c.tokenizer_path is None and model.hf_checkpoint is None:
            _fail(
                "tokenizer_path",
                "none",
                "--prompt-data needs a tokenizer",
                "--tokenizer-path DIR or --hf-checkpoint DIR (a local Hugging Face directory)",
            )
        if files and c.tokenizer_path is not None and not os.path.isdir(c.tokenizer_path):
            _fail(
                "tokenizer_path",
                c.tokenizer_path,
                "not an existing directory",
                "a local Hugging Face tokenizer directory",
            )
        if c.rm_type is None and c.custom_rm_path is None:
            _fail(
                "rm_type",
                "none",
                "--prompt-data needs a reward function",
                "exact_match, math, mcq, logic, or --custom-rm-path module:function",
            )
        if eval_interval > 0 and c.eval_prompt_data is None:
            _fail(
                "eval_prompt_data",
                "none",
                f"--eval-interval={eval_interval} evaluates "
                "held-out prompts, and --prompt-data has no held-out split",
                "--eval-prompt-data NAME FILE [NAME FILE ...], or --eval-interval 0",
            )
    if c.rm_type is not None and c.custom_rm_path is not None:
        _fail(
            "custom_rm_path",
            c.custom_rm_path,
            f"given together with --rm-type {c.rm_type}",
            "one of --rm-type and --custom-rm-path",
        )
    if c.custom_rm_path is not None:
        module, sep, function = c.custom_rm_path.partition(":")
        if not (sep and module.strip() and function.strip()):
            _fail(
                "custom_rm_path",
                c.custom_rm_path,
                "not module:function",
                "an import path like my_rewards:score",
            )
    if c.eval_prompt_data is not None:
        items = c.eval_prompt_data
        shown = " ".join(items)
        if len(items) % 2:
            _fail(
                "eval_prompt_data",
                shown,
                f"{len(items)} values do not pair up",
                "NAME FILE pairs, e.g. --eval-prompt-data aime aime.jsonl gpqa gpqa.jsonl",
            )
        names = items[0::2]
        for name, path in zip(names, items[1::2]):
            if not name or "/" in name or name.endswith(DATA_EXTENSIONS):
                _fail(
                    "eval_prompt_data",
                    shown,
                    f"{name!r} is not a name (NAME comes before FILE)",
                    "NAME FILE pairs, NAME without '/'",
                )
            _check_data_file("eval_prompt_data", path, shown, exists=files)
        if len(set(names)) != len(names):
            _fail("eval_prompt_data", shown, "a NAME appears twice", "distinct names")


def check_prompt_lengths(c: DataFlags, *, model: ModelFlags, rollout_max_response_len: int) -> None:
    """A --prompt-data prompt and its response fit the positions: the response leaves at least
    1 token for a prompt, and --rollout-max-prompt-len plus the response fit. (The arithmetic
    task's fixed prompt is check_task's.) `rollout_max_response_len`: rollout's flag."""
    positions, response = model.max_position_embeddings, rollout_max_response_len
    if c.task == "prompt_data" and response >= positions:
        _fail(
            "rollout_max_response_len",
            response,
            f"leaves no position of --max-position-embeddings={positions} for a --prompt-data "
            "prompt, which needs at least 1 token",
            f"at most {positions - 1} (--max-position-embeddings - 1), or a larger "
            "--max-position-embeddings",
        )
    if c.rollout_max_prompt_len is not None and c.rollout_max_prompt_len + response > positions:
        _fail(
            "rollout_max_prompt_len",
            c.rollout_max_prompt_len,
            f"plus --rollout-max-response-len={response} exceeds "
            f"--max-position-embeddings={positions}",
            f"at most {positions - response} (--max-position-embeddings - "
            "--rollout-max-response-len)",
        )
