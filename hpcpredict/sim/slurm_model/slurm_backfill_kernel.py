"""The SLURM model's backfill pass (`slurm_backfill.simulate_slurm`), compiled.

Why: the pass is ~3/4 of a `--scheduler slurm-backfill` replay (KTH-SP2: 13.8 of 18.9 s under
cProfile), and CEA-Curie's replay took over ten minutes in Python, so a `hpcpredict tune
--scheduler slurm-backfill` of a large site's history, 150 replays, took most of a day. The pass
is a pure function of the instant, the running jobs' planned ends (the running profile's table),
the pending jobs it tests in priority order and their limits: it returns the jobs to start now
(in order, with whether each jumped a job left waiting) and notes first reservations; the event
loop stays in Python and starts them.

The plan is a step function of free processors (`times[i]` starts a segment with `free[i]` free,
the last lasting for ever): built from the running jobs (processors back at start + limit), then
lowered by each reservation and each job started. What SLURM does and why is said in
`slurm_backfill`'s docstring.
"""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled
from hpcpredict.sim.engine.profile_kernel import END_ROW, META_ROW, PROCS_ROW, SIZE, free_now

NEVER_FITS = -1  # `backfill_pass`'s answer when a tested job is wider than the machine


@compiled
def _round_up(value_s: int, resolution_s: int) -> int:  # pragma: no cover - compiled
    return -(-value_s // resolution_s) * resolution_s


@compiled
def _split(times: np.ndarray, free: np.ndarray, count: int, at_s: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """(index of the segment starting at `at_s`, segments now): created by splitting the one
    it falls in if needed (the times are sorted; `at_s` >= the first)."""
    position = np.searchsorted(times[:count], at_s)
    if position < count and times[position] == at_s:
        return position, count
    for k in range(count, position, -1):
        times[k] = times[k - 1]
        free[k] = free[k - 1]
    times[position] = at_s
    free[position] = free[position - 1]
    return position, count + 1


@compiled
def _take(times: np.ndarray, free: np.ndarray, count: int, start_s: int, end_s: int,
          procs: int) -> int:  # pragma: no cover - compiled
    """Hold `procs` processors over [start_s, end_s); the segments now."""
    if end_s <= start_s:
        return count
    first, count = _split(times, free, count, start_s)
    last, count = _split(times, free, count, end_s)
    for position in range(first, last):
        free[position] -= procs
    return count


@compiled
def _fits(times: np.ndarray, free: np.ndarray, count: int, start_s: int, end_s: int,
          procs: int) -> bool:  # pragma: no cover - compiled
    """Are `procs` processors free over [start_s, end_s], both ends included? (backfill.c tests
    the slots whose begin_time <= the job's end: a reservation beginning exactly when the job
    would end blocks it.)"""
    position = np.searchsorted(times[:count], start_s)
    if position == count or times[position] != start_s:
        position -= 1
    while position < count and times[position] <= end_s:
        if free[position] < procs:
            return False
        position += 1
    return True


@compiled
def _earliest_future_start(times: np.ndarray, free: np.ndarray, count: int, procs: int,
                           limit_s: int, resolution_s: int) -> int:  # pragma: no cover - compiled
    """Earliest segment start after the first with `procs` free until the end rounded up to
    the resolution (a reservation's extent, backfill.c `_set_slot_time`); NEVER_FITS if none.

    One pass: when the extent from candidate i meets a segment k that is too full, every
    candidate up to k has k in its extent too, so the next candidate worth testing is k + 1."""
    position = 1
    while position < count:
        if free[position] < procs:
            position += 1
            continue
        start_s = times[position]
        end_s = _round_up(start_s + limit_s, resolution_s)
        covered = position + 1
        while covered < count and times[covered] <= end_s:
            if free[covered] < procs:
                break
            covered += 1
        else:
            return start_s
        position = covered + 1
    return NEVER_FITS


@compiled
def backfill_pass(
    table: np.ndarray, now_s: int, order: np.ndarray, limit_s: np.ndarray, procs: np.ndarray,
    window_s: int, resolution_s: int, first_reserved_s: np.ndarray, started: np.ndarray,
    jumped: np.ndarray, reserve_count: int,
) -> int:  # pragma: no cover - compiled
    """One backfill pass at `now_s` over the pending jobs `order` (priority order, those to
    test): each that fits now from now to now + its limit starts (into `started`, with
    `jumped`: some job before it was left waiting); each other whose earliest start is within
    `window_s` holds its processors from then to its rounded-up end, cut at the window's end,
    and its first such start is noted in `first_reserved_s`; with `reserve_count` > 0
    (bf_job_part_count_reserve) only the first that many do, the others hold nothing. Returns
    how many start, or NEVER_FITS (the job at fault in `started[0]`)."""
    size = table[META_ROW, SIZE]
    capacity = 1 + size + 2 * len(order)
    times = np.empty(capacity, dtype=np.int64)
    free = np.empty(capacity, dtype=np.int64)
    times[0] = now_s
    free[0] = free_now(table, now_s)
    count = 1
    for position in range(size):  # ascending ends; ends <= now are already free now
        end_s = table[END_ROW, position]
        if end_s <= now_s:
            continue
        if end_s != times[count - 1]:
            times[count] = end_s
            free[count] = free[count - 1]
            count += 1
        free[count - 1] += table[PROCS_ROW, position]
    window_end_s = now_s + window_s
    left_waiting = False
    starting = 0
    reserved = 0
    for job in order:
        limit, need = limit_s[job], procs[job]
        if _fits(times, free, count, now_s, now_s + limit, need):
            started[starting] = job
            jumped[starting] = left_waiting
            starting += 1
            count = _take(times, free, count, now_s, now_s + limit, need)
            continue
        left_waiting = True
        if reserve_count > 0 and reserved >= reserve_count:
            continue  # no reservation left for it: it only starts when it fits around them
        begin_s = _earliest_future_start(times, free, count, need, limit, resolution_s)
        if begin_s == NEVER_FITS:
            started[0] = job
            return NEVER_FITS
        if begin_s > window_end_s:
            continue  # beyond the window: no reservation ("too far in the future")
        end_s = min(_round_up(begin_s + limit, resolution_s), window_end_s)
        count = _take(times, free, count, begin_s, end_s, need)
        reserved += 1
        if first_reserved_s[job] < 0:
            first_reserved_s[job] = begin_s
    return starting


@compiled
def priority_order(
    pending: np.ndarray, now_s: int, submit_s: np.ndarray, procs: np.ndarray, machine_procs: int,
    weight_age: int, weight_job_size: int, max_age_s: int, favor_small: bool,
) -> np.ndarray:  # pragma: no cover - compiled
    """`pending` (in submission order) by decreasing multifactor priority, ties in submission
    order: the age factor capped at `max_age_s`, the size factor the share of the machine (its
    complement with `favor_small`), as `SlurmBackfill.order` says."""
    priority = np.empty(len(pending), dtype=np.float64)
    for k in range(len(pending)):
        job = pending[k]
        age = min(now_s - submit_s[job], max_age_s) / max_age_s
        size = procs[job] / machine_procs
        if favor_small:
            size = 1.0 - size
        priority[k] = -(weight_age * age + weight_job_size * size)
    return pending[np.argsort(priority, kind="mergesort")]  # stable: ties stay in order
