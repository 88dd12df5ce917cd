"""The task and its data: the built-in arithmetic task or prompt files, the tokenizer, the
held-out sets, and the reward function."""

from __future__ import annotations

# The arithmetic task's prompt ("a+b=" style, with BOS) is this many tokens long.
ARITH_PROMPT_TOKENS = 5
# Size of the tiny task's tokenizer vocabulary.
TASK_VOCAB_SIZE = 16
