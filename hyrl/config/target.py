"""The text of a target, --target METRIC=VALUE (also `hyrl analyze --target` and a foreign run
directory's): parsed here, once, for the flag's concern (hyrl.config.concerns.evaluation), the
run's accounting (hyrl.metrics.run_log) and the analysis (hyrl.batchsize.analyze)."""

from __future__ import annotations

import math

# Metric namespaces a training run's --target may name (what the trainer logs).
TARGET_PREFIXES = ("eval/", "train/")
TARGET_ALLOWED = "METRIC=VALUE, e.g. eval/accuracy=0.77"


class TargetSyntaxError(ValueError):
    """A target text that does not parse; `problem` says why. Callers name their own flag."""

    def __init__(self, text, problem: str):
        self.text, self.problem = text, problem
        super().__init__(f"target {text!r}: {problem}; allowed: {TARGET_ALLOWED}")


def parse_target(
    text: str, prefixes: tuple[str, ...] | None = TARGET_PREFIXES
) -> tuple[str, float]:
    """ "METRIC=VALUE" -> (METRIC, VALUE), e.g. "eval/accuracy=0.77" -> ("eval/accuracy", 0.77).
    VALUE must be a finite number; METRIC must lie under one of `prefixes` (None: any name, as
    for foreign run directories). Raises TargetSyntaxError otherwise."""
    if not isinstance(text, str):
        raise TargetSyntaxError(text, f"wrong type ({type(text).__name__})")
    metric, sep, value_text = text.partition("=")
    metric, value_text = metric.strip(), value_text.strip()
    if not sep:
        raise TargetSyntaxError(text, "no '=' between the metric and the value")
    if not metric:
        raise TargetSyntaxError(text, "no metric before the '='")
    if prefixes is not None and not any(
        metric.startswith(p) and len(metric) > len(p) for p in prefixes
    ):
        raise TargetSyntaxError(
            text, f"the metric {metric!r} is not named under " + " or ".join(prefixes)
        )
    try:
        value = float(value_text)
    except ValueError:
        raise TargetSyntaxError(text, f"the value {value_text!r} is not a number") from None
    if not math.isfinite(value):
        raise TargetSyntaxError(text, f"the value {value_text!r} is not a finite number")
    return metric, value
