"""How far predictions are from runtimes: the one definition every report uses.

The simulator's metrics, `predict-eval` (and its error-by-history table), the daemon's
``hpcpredict errors`` / ``report`` and its running per-user totals all say "MAE" and
"under-predicted"; they all compute them here, so the words mean the same numbers everywhere.

Definitions (seconds): error = prediction - runtime; MAE = mean |error|; an under-prediction is
a prediction shorter than the runtime (the job outlived it and needed a correction); exact means
error = 0; the ratio is prediction / runtime, with runtimes below 1 s counted as 1 s (a job of
0 s has no meaningful ratio; the simulator and the daemon both floor runtimes at 1 s anyway).

>>> stats = error_stats([100, 50, 30], [100, 60, 10])
>>> stats.mae_s, stats.under_rate, stats.exact_rate, stats.mean_ratio
(10.0, 0.3333333333333333, 0.3333333333333333, 1.6111111111111114)
>>> error_stats([], []).mae_s
nan
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ErrorStats:
    """Error statistics of a set of predictions (module doc for the definitions)."""

    jobs: int
    mae_s: float
    median_ae_s: float
    under_rate: float
    exact_rate: float
    mean_ratio: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def error_stats(
    predicted_s: Sequence[float] | np.ndarray, run_s: Sequence[float] | np.ndarray
) -> ErrorStats:
    """`ErrorStats` of predictions against runtimes (NaN statistics for no job)."""
    predicted = np.asarray(predicted_s, dtype=np.float64)
    run = np.asarray(run_s, dtype=np.float64)
    if predicted.shape != run.shape:
        raise ValueError(f"{predicted.shape} predictions for {run.shape} runtimes")
    if not predicted.size:
        nan = float("nan")
        return ErrorStats(0, nan, nan, nan, nan, nan)
    error = predicted - run
    absolute = np.abs(error)
    return ErrorStats(
        jobs=int(predicted.size),
        mae_s=float(absolute.mean()),
        median_ae_s=float(np.median(absolute)),
        under_rate=float(np.mean(error < 0)),
        exact_rate=float(np.mean(error == 0)),
        mean_ratio=float(np.mean(predicted / np.maximum(run, 1.0))),
    )
