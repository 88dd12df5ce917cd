"""ConfigError and the helpers that build its messages: the flag, the value, what is allowed."""

from __future__ import annotations

import math
from typing import Any, NoReturn

HELP_HINT = "hyrl train --help lists all flags"


class ConfigError(ValueError):
    """A flag value that cannot work: names the flag, the value and what is allowed."""

    def __init__(self, flag: str, value: Any, problem: str, allowed: str):
        self.flag = flag
        self.value = value
        self.problem = problem
        self.allowed = allowed
        where = flag if value is None else f"{flag}={value}"
        super().__init__(f"{where}: {problem}; allowed: {allowed}")

    def __reduce__(self):
        # Keeps the error picklable (it may cross a process boundary).
        return (type(self), (self.flag, self.value, self.problem, self.allowed))


def flag_name(field_name: str) -> str:
    """The command-line flag of a RunConfig field: `global_batch_size` -> `--global-batch-size`."""
    return "--" + field_name.replace("_", "-")


def _fail(name: str, value: Any, problem: str, allowed: str) -> NoReturn:
    """Raise the ConfigError of RunConfig field `name` (the checks' one way to refuse)."""
    raise ConfigError(flag_name(name), value, problem, allowed)


def not_resolved(names: list[str]) -> ValueError:
    """The error for a config read before `hyrl.config.resolve` filled the fields `names`."""
    return ValueError(
        f"RunConfig is not resolved ({', '.join(flag_name(n) for n in names)} still none): "
        "call hyrl.config.resolve(cfg) or hyrl.config.load(argv, world_size) first"
    )


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending: what a message offers when a size must divide n."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
