"""The corrections as the compiled replay loops apply them: `corrected_limit_s`, one call for
any policy they model, on the rules the Python policies apply (`corrections.limits` for the
stateless ones, compiled in here; `survival_kernel` for SURVIVAL, whose history the loops keep
in its arrays)."""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled, usable_in_kernels
from hpcpredict.corrections.limits import (
    SURVIVAL,
    doubling_limit,
    incremental_limit,
    stateless_limit,
)
from hpcpredict.corrections.survival_kernel import (
    HISTORY_COUNT,
    HISTORY_RUNS,
    LINK_NEXT,
    NOT_ESTIMABLE,
    conditional_quantile,
    survival_limit,
)

usable_in_kernels(incremental_limit, doubling_limit, stateless_limit)  # (each rule it calls)


@compiled
def _survival_s(
    history: np.ndarray, links: np.ndarray, links_first: np.ndarray, row: int,
    start_s: np.ndarray, at_s: int, requested_s: int, initial_s: int, done: int, elapsed_s: int,
    steps_s: np.ndarray, min_history: int, quantile: float,
) -> tuple[int, bool]:  # pragma: no cover - compiled
    """`SurvivalCorrection.corrected_prediction_s` at `at_s` for a job of the user in `row`,
    and whether the estimate (not the INCREMENTAL fallback) answered."""
    count = history[row, HISTORY_COUNT]
    if count >= min_history:
        running = 0
        job = links_first[row]
        while job >= 0:
            running += 1
            job = links[LINK_NEXT, job]
        elapsed = np.empty(running, dtype=np.int64)
        job = links_first[row]
        for k in range(running):
            elapsed[k] = max(0, at_s - start_s[job])
            job = links[LINK_NEXT, job]
        estimate = conditional_quantile(history[row, HISTORY_RUNS:], count, elapsed, running,
                                        elapsed_s, quantile)
    else:
        estimate = NOT_ESTIMABLE
    return (survival_limit(estimate, requested_s, initial_s, done, elapsed_s, steps_s),
            estimate != NOT_ESTIMABLE)


@compiled
def corrected_limit_s(
    correction: int, steps_s: np.ndarray, history: np.ndarray, links: np.ndarray,
    links_first: np.ndarray, row: int, start_s: np.ndarray, at_s: int, requested_s: int,
    initial_s: int, done: int, elapsed_s: int, min_history: int, quantile: float,
) -> tuple[int, bool]:  # pragma: no cover - compiled
    """`correction.corrected_prediction_s` at `at_s` for a job of the user in SURVIVAL's `row`
    that has run `elapsed_s` (its limit), and whether SURVIVAL's estimate answered (False for
    the other policies and for SURVIVAL's INCREMENTAL fallback)."""
    if correction == SURVIVAL:
        return _survival_s(history, links, links_first, row, start_s, at_s, requested_s,
                           initial_s, done, elapsed_s, steps_s, min_history, quantile)
    return stateless_limit(correction, requested_s, initial_s, done, elapsed_s, steps_s), False
