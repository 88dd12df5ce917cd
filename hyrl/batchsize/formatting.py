"""How the batch-size reports write numbers (report.md, report_seeds, tune's report): one place,
so a batch, a count or a duration reads the same in every table."""

from __future__ import annotations


def g(x, digits: int = 3) -> str:
    """A number in `digits` significant figures, a whole float without its '.0'; '-' for None."""
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.{digits}g}"


def batch(x) -> str:
    """Responses per step: a whole number as such, else 6 significant figures; '?' for None."""
    return "?" if x is None else g(x, 6)


def count(x) -> str:
    """A count with thousands separators ('12,345'); '-' for None."""
    return "-" if x is None else f"{x:,.0f}"


def times(x) -> str:
    """A ratio as '1.23x'; '-' for None."""
    return "-" if x is None else f"{x:.2f}x"


def format_duration(seconds) -> str:
    """Seconds below 2 min, minutes below 3 h, hours above; '-' for None."""
    if seconds is None:
        return "-"
    if seconds >= 3 * 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"
