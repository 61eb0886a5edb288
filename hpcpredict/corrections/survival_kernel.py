"""SURVIVAL's decision, compiled: the one implementation it has. Kaplan-Meier's conditional
quantile of a user's runtime, and the limit it gives a job (clamped to the elapsed time and the
request, INCREMENTAL's next step above the elapsed time when there is no estimate).
`survival.SurvivalCorrection` (the daemon's corrector and the simulator's Python loop) calls both
on lists; the compiled replay loop (`sim.replay_kernel`) on its own arrays, so a `tune` grid's
SURVIVAL replays run as fast as its INCREMENTAL ones and correct exactly alike.
"""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled

NOT_ESTIMABLE = -1
# SURVIVAL's history (`survival.RuntimeHistory`) as the compiled loops hold it, a row per user (`history_row[job]`): how many
# ended runtimes it holds, where the next goes, when its first one ended (jobs finished then:
# the Python history's order of users), and the last `window` runtimes, a ring from
# HISTORY_RUNS on. The user's running jobs are a list through `links` (next, previous; -1:
# none) from `links_first[row]`.
HISTORY_COUNT, HISTORY_NEXT, HISTORY_FIRST_END, HISTORY_RUNS = range(4)
LINK_NEXT, LINK_PREVIOUS = range(2)


@compiled
def _sorted_beyond(values: np.ndarray, count: int, threshold: int) -> np.ndarray:  # pragma: no cover - compiled
    """The first `count` of `values` that are above `threshold`, sorted."""
    beyond = np.empty(count, dtype=np.int64)
    kept = 0
    for k in range(count):
        if values[k] > threshold:
            beyond[kept] = values[k]
            kept += 1
    return np.sort(beyond[:kept])


@compiled
def conditional_quantile(
    runtimes_s: np.ndarray, runtime_count: int, censored_s: np.ndarray, censored_count: int,
    elapsed_s: int, quantile: float,
) -> int:  # pragma: no cover - compiled
    """The `quantile` of T given T > `elapsed_s` from the first `runtime_count` runtimes (events)
    and `censored_count` lower bounds, any order; NOT_ESTIMABLE when the conditional survival
    never falls to 1 - quantile (`survival.conditional_quantile_s` says how)."""
    events = _sorted_beyond(runtimes_s, runtime_count, elapsed_s)
    count = len(events)
    if count == 0:
        return NOT_ESTIMABLE
    bounds = _sorted_beyond(censored_s, censored_count, elapsed_s)
    bound_count = len(bounds)
    target = 1.0 - quantile
    survival = 1.0
    at_risk = count + bound_count
    censored_before = 0  # lower bounds < the current event time: no longer at risk
    position = 0
    while position < count:
        time_s = events[position]
        while censored_before < bound_count and bounds[censored_before] < time_s:
            censored_before += 1
            at_risk -= 1
        ends = 1
        while position + ends < count and events[position + ends] == time_s:
            ends += 1
        survival *= 1.0 - ends / at_risk
        if survival <= target + 1e-12:
            return time_s
        at_risk -= ends
        position += ends
    return NOT_ESTIMABLE


@compiled
def survival_limit(
    estimate_s: int, requested_s: int, initial_s: int, done: int, elapsed_s: int, steps_s: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """The limit SURVIVAL gives a job that has run `elapsed_s`: the estimate (`conditional_quantile`)
    kept above the elapsed time and within the request; without one (NOT_ESTIMABLE), INCREMENTAL's
    first limit from the `done`-th of its `steps_s` on that is above the elapsed time (after
    estimates the job may already be past the next fixed step), or the request when none is."""
    if estimate_s != NOT_ESTIMABLE:
        return min(max(estimate_s, elapsed_s + 1), requested_s)
    for position in range(done, len(steps_s)):
        limit_s = initial_s + steps_s[position]
        if limit_s > elapsed_s:
            return min(limit_s, requested_s)
    return requested_s


@compiled
def running_add(links: np.ndarray, links_first: np.ndarray, row: int, job: int) -> None:  # pragma: no cover - compiled
    """SURVIVAL's history hears a job start (`RuntimeHistory.job_started`)."""
    first = links_first[row]
    links[LINK_NEXT, job] = first
    links[LINK_PREVIOUS, job] = -1
    if first >= 0:
        links[LINK_PREVIOUS, first] = job
    links_first[row] = job


@compiled
def history_ended(
    history: np.ndarray, links: np.ndarray, links_first: np.ndarray, row: int, job: int,
    run_s: int, finished: int,
) -> None:  # pragma: no cover - compiled
    """SURVIVAL's history hears a job end (`RuntimeHistory.job_ended`): out of the running, its
    runtime in the ring (the oldest dropped when full)."""
    following, previous = links[LINK_NEXT, job], links[LINK_PREVIOUS, job]
    if previous >= 0:
        links[LINK_NEXT, previous] = following
    else:
        links_first[row] = following
    if following >= 0:
        links[LINK_PREVIOUS, following] = previous
    window = history.shape[1] - HISTORY_RUNS
    if history[row, HISTORY_COUNT] == 0:
        history[row, HISTORY_FIRST_END] = finished
    place = history[row, HISTORY_NEXT]
    history[row, HISTORY_RUNS + place] = max(0, run_s)
    history[row, HISTORY_NEXT] = place + 1 if place + 1 < window else 0
    if history[row, HISTORY_COUNT] < window:
        history[row, HISTORY_COUNT] += 1
