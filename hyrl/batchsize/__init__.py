"""Batch-size analysis: read run directories, measure samples / throughput / time to a target,
check curve alignment against a reference run, pick the fastest valid batch, price the saving.

Everything here reads run directories only (config.json, metrics.jsonl, sweep.json): no torch,
no backends, no rollout engines, so a sweep can be analysed on a laptop. Plotting lives in
`hyrl.batchsize.report` (matplotlib) and is imported only by whoever draws.
"""

from hyrl.batchsize.analyze import (
    AnalysisError,
    Run,
    alignment,
    analyze,
    collect_runs,
    load_run,
    metric_curve,
    parse_target,
    samples_to_reach,
)
from hyrl.batchsize.cost import CostError, cost

__all__ = [
    "AnalysisError",
    "CostError",
    "Run",
    "alignment",
    "analyze",
    "collect_runs",
    "cost",
    "load_run",
    "metric_curve",
    "parse_target",
    "samples_to_reach",
]
