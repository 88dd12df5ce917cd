"""The slime and Megatron-LM flags whose value asks for what hyrl always does (`--swiglu`,
`--attention-dropout 0.0`, `--optimizer adam`): accepted with a note instead of refused, so
slime's scripts run as written. Any other value, or the flag beside hyrl flags that make it ask
for something else, stays refused with the table's answer (`FOREIGN_FLAGS`: what hyrl does and
the hyrl flag to use), which every flag here also has. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# when(value, fields): the hyrl flags as parsed (RunConfig's fields by name) let the flag's
# value (None for a switch) ask for what hyrl does.
When = Callable[[str | None, Mapping[str, Any]], bool]


def _always(value: str | None, fields: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class BuiltIn:
    """One foreign flag hyrl accepts as it is: `note` says what hyrl does ("FLAG: NOTE;
    accepted", said once); `value` tells the values that ask for it (None: a switch, given
    without a value); `wanted` is what is accepted, as a refusal of anything else says it;
    `when` adds what the hyrl flags must be."""

    note: str
    value: Callable[[str], bool] | None
    wanted: str
    when: When = _always


def _number(target: float) -> Callable[[str], bool]:
    """The number `target` in any spelling (0, 0.0, 0.00), or a list of it ("[1,1,1]",
    Megatron-LM's one-value-per-layer form)."""

    def matches(value: str) -> bool:
        items = value[1:-1].split(",") if value[:1] == "[" and value[-1:] == "]" else [value]
        try:
            return all(float(item) == target for item in items)
        except ValueError:
            return False

    return matches


def _word(word: str) -> Callable[[str], bool]:
    return lambda value: value == word


def _any_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _switch(note: str, flag: str, when: When = _always, wanted: str = "") -> BuiltIn:
    return BuiltIn(note, None, wanted or flag, when)


def _is(flag: str, value: str, note: str) -> BuiltIn:
    """The flag with this one value (a number in any spelling, else the word itself)."""
    matches = _number(float(value)) if _any_number(value) else _word(value)
    return BuiltIn(note, matches, f"{flag} {value}")


_DROPOUT = "hyrl always trains without dropout"
_ROPE = "hyrl always uses rotary position embeddings (base --rotary-base)"

# flag -> when it is accepted and the note it gets, sorted by source (Megatron-LM, slime), then
# flag. A note says what hyrl does, in the words of the table's answer for the flag.
BUILT_IN: dict[str, BuiltIn] = {
    # Megatron-LM
    "--attention-backend": _is(
        "--attention-backend", "auto", "hyrl leaves the attention kernel to megatron's auto choice"
    ),
    "--attention-dropout": _is("--attention-dropout", "0", _DROPOUT),
    "--attention-softmax-in-fp32": _switch(
        "hyrl always computes the attention softmax in float32 (megatron-core's default)",
        "--attention-softmax-in-fp32",
    ),
    "--context-parallel-size": _is(
        "--context-parallel-size",
        "1",
        "hyrl has no context parallelism: every rank holds whole sequences",
    ),
    "--disable-bias-linear": _switch(
        "hyrl's linear layers never have biases (Qwen3-MoE)", "--disable-bias-linear"
    ),
    "--group-query-attention": _switch(
        "hyrl always uses grouped-query attention, with --num-query-groups key/value heads",
        "--group-query-attention",
    ),
    "--hidden-dropout": _is("--hidden-dropout", "0", _DROPOUT),
    "--moe-aux-loss-coeff": _is(
        "--moe-aux-loss-coeff", "0", "hyrl trains without the load-balancing auxiliary loss"
    ),
    "--moe-grouped-gemm": _switch(
        "hyrl runs each layer's experts as one grouped GEMM under Transformer Engine "
        "(--transformer-impl auto or transformer_engine)",
        "--moe-grouped-gemm",
        when=lambda value, fields: fields.get("transformer_impl") != "local",
        wanted="--moe-grouped-gemm without --transformer-impl local",
    ),
    "--moe-layer-freq": BuiltIn(
        "every hyrl layer is an MoE layer (Qwen3-MoE)",
        _number(1),
        "--moe-layer-freq 1, or a list of 1s",
    ),
    "--moe-router-dtype": _is("--moe-router-dtype", "fp32", "hyrl always routes in float32"),
    "--moe-router-load-balancing-type": _is(
        "--moe-router-load-balancing-type", "none", "hyrl's routers do no load balancing"
    ),
    "--moe-router-score-function": _is(
        "--moe-router-score-function",
        "softmax",
        "hyrl's routers always score with a softmax (Qwen3-MoE)",
    ),
    "--moe-token-drop-policy": _is(
        "--moe-token-drop-policy",
        "probs",
        "hyrl's experts have no capacity limit, so no token is dropped (probs is Megatron-LM's "
        "default)",
    ),
    "--moe-z-loss-coeff": _is("--moe-z-loss-coeff", "0", "hyrl adds no router z-loss"),
    "--optimizer": _is(
        "--optimizer", "adam", "hyrl's optimizer is always Adam with decoupled weight decay"
    ),
    "--position-embedding-type": _is("--position-embedding-type", "rope", _ROPE),
    "--rotary-percent": _is(
        "--rotary-percent", "1.0", "hyrl always rotates the whole head dimension"
    ),
    "--swiglu": _switch("hyrl's Qwen3-MoE always uses SwiGLU", "--swiglu"),
    "--use-mcore-models": _switch("hyrl always builds megatron-core models", "--use-mcore-models"),
    "--use-rotary-position-embeddings": _switch(_ROPE, "--use-rotary-position-embeddings"),
    # slime
    "--eval-top-p": BuiltIn(
        "hyrl evaluates with the rollout's top-p, --rollout-top-p",
        _any_number,
        "--eval-top-p equal to --rollout-top-p (1.0 unless given)",
        when=lambda value, fields: float(value or "nan") == fields.get("rollout_top_p"),
    ),
    "--get-mismatch-metrics": _switch(
        "hyrl always logs the train-inference mismatch (mismatch/*) at every step",
        "--get-mismatch-metrics",
    ),
    "--rollout-shuffle": _switch(
        "hyrl always shuffles the prompts, a new order every epoch drawn from --seed",
        "--rollout-shuffle",
    ),
    "--use-kl-loss": _switch(
        "hyrl adds the KL-to-reference loss term whenever --kl-loss-coef is above 0",
        "--use-kl-loss",
        when=lambda value, fields: (fields.get("kl_loss_coef") or 0) > 0,
        wanted="--use-kl-loss with --kl-loss-coef above 0",
    ),
}


@dataclass(frozen=True)
class Given:
    """A BUILT_IN flag as the command line gave it: `value` None for a switch."""

    flag: str
    value: str | None

    @property
    def shown(self) -> str:
        """The flag and its value, a long value cut short (a list of 48 ones)."""
        if self.value is None:
            return self.flag
        value = self.value if len(self.value) <= 24 else self.value[:20] + "..."
        return f"{self.flag} {value}"

    @property
    def note(self) -> str:
        return f"{self.shown}: {BUILT_IN[self.flag].note}; accepted"


def split_built_in(argv: list[str]) -> tuple[list[str], list[Given]]:
    """(argv without the BUILT_IN flags whose value asks for what hyrl does, those flags): a
    flag with another value (or a switch given one) stays in argv, to be refused. Each entry's
    `when`, which needs the parsed hyrl flags, is left to `refused_by_fields`."""
    kept: list[str] = []
    given: list[Given] = []
    i = 0
    while i < len(argv):
        flag, sep, value = argv[i].partition("=")
        entry = BUILT_IN.get(flag)
        if entry is not None and entry.value is None and not sep:
            given.append(Given(flag, None))
            i += 1
            continue
        if entry is not None and entry.value is not None:
            if not sep and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value, sep, width = argv[i + 1], "=", 2
            else:
                width = 1
            if sep and entry.value(value):
                given.append(Given(flag, value))
                i += width
                continue
        kept.append(argv[i])
        i += 1
    return kept, given


def refused_by_fields(given: list[Given], fields: Mapping[str, Any]) -> list[Given]:
    """The given flags whose `when` the parsed hyrl flags (`fields`) do not meet."""
    return [g for g in given if not BUILT_IN[g.flag].when(g.value, fields)]
