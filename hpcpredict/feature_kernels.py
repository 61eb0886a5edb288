"""The per-user feature state's arithmetic (`features.FeatureState`) as compiled loops over arrays.

Why compiled: per job, the learner computed x_j in Python (about twenty attribute reads, a
struct pack), recorded the submission, then expanded and scored x_j in a compiled call; starts and
ends updated Python objects and a heap (docs/performance.md, "Issue 31, round 3"). Here the
state is four arrays that `FeatureState` owns and these kernels update, and a submission
(features, record, Phi, w . Phi) is one compiled call.

The arrays (`FeatureState` allocates and grows them; the kernels never resize):

* ``users`` (float64, one row per user, the ``*_AT`` columns): the running sums of
  `FeatureState`'s module doc. Counts are held as floats: exact below 2^53, and every formula
  reads them as floats anyway (an int divided or multiplied by a float is converted first).
* ``user_links`` (int64, one row per user): the first and last of the user's running jobs
  (``HEAD``, ``TAIL``; -1: none), a doubly linked list of slots in start order.
* ``slots`` (float64, one row per running job): its processors and start time.
* ``slot_links`` (int64, one row per running job): the previous and next slot of its user's
  list, and the job's id (for `to_state` and the undo, which list a user's running jobs).

The longest elapsed time needs the earliest start among a user's running jobs: it is kept in
``EARLIEST_START_AT``, lowered on each start, and recomputed from the user's list only when the job
that held it leaves (a minimum is exact in any order, so the features equal the heap's of the
Python version it replaced bit for bit).

Why the results are bit for bit those of that Python version (tests/test_features_compiled.py,
hypothesis, against the reference kept in tests/feature_reference.py): the same IEEE operations
in the same order on the same float64 values (numba does not reorder without ``fastmath``);
Python's float ``%`` is what numba's ``%`` on floats implements (the sign of the divisor); and
cos and sin are the process's C functions, the ones CPython's `math.cos` and `math.sin` call
(bound as `nag_kernels` binds log and pow, for the same reason).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from hpcpredict.compiled import compiled
from hpcpredict.learn.nag_kernels import _c_function, quadratic_terms

# Columns of `users`.
(N_COMPLETED_AT, SUM_RUN_AT, LAST_RUN_AT, SECOND_LAST_RUN_AT, THIRD_LAST_RUN_AT, LAST_END_AT,
 N_SUBMITTED_AT, SUM_SUBMITTED_PROCS_AT, N_RUNNING_AT, RUNNING_PROCS_AT, RUNNING_SUM_START_AT,
 EARLIEST_START_AT) = range(12)
USER_COLUMNS = 12
# Columns of `user_links`.
HEAD, TAIL = range(2)
USER_LINK_COLUMNS = 2
# Columns of `slots` and of `slot_links`.
PROCS_AT, START_AT = range(2)
SLOT_COLUMNS = 2
PREV, NEXT, JOB_ID = range(3)
SLOT_LINK_COLUMNS = 3
NO_SLOT = -1

_DAY_S = 86_400.0  # features.DAY_S, as a float (the Python version converted it the same way)
_WEEK_S = 604_800.0
_TWO_PI = 2.0 * math.pi

_libm_cos = _c_function("cos", types.float64(types.float64))
_libm_sin = _c_function("sin", types.float64(types.float64))


@compiled
def features_into(
    users: np.ndarray, row: int, procs: float, requested_s: float, now_s: float, local_s: float,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """x_j of a job of `procs` processors asking `requested_s`, submitted at `now_s` (local
    seconds `local_s`) by the user of row `row` (-1: a user never seen), into `out` (20 floats).
    The formulas of docs/method.md §2 as `features.FeatureState.compute` documents them."""
    if row >= 0:
        u = users[row]
        n_completed = u[N_COMPLETED_AT]
        sum_run_s = u[SUM_RUN_AT]
        last_s = u[LAST_RUN_AT]
        second_s = u[SECOND_LAST_RUN_AT]
        third_s = u[THIRD_LAST_RUN_AT]
        last_end_s = u[LAST_END_AT]
        n_submitted = u[N_SUBMITTED_AT]
        sum_submitted_procs = u[SUM_SUBMITTED_PROCS_AT]
        n_running = u[N_RUNNING_AT]
        running_procs = u[RUNNING_PROCS_AT]
        running_sum_start_s = u[RUNNING_SUM_START_AT]
        earliest_start_s = u[EARLIEST_START_AT]
    else:
        n_completed = sum_run_s = last_s = second_s = third_s = last_end_s = 0.0
        n_submitted = sum_submitted_procs = n_running = running_procs = 0.0
        running_sum_start_s = earliest_start_s = 0.0
    if n_completed >= 3.0:
        ave2_s = (last_s + second_s) / 2.0
        ave3_s = (last_s + second_s + third_s) / 3.0
    elif n_completed == 2.0:
        ave2_s = (last_s + second_s) / 2.0
        ave3_s = ave2_s
    else:  # one job: its runtime; none: 0 (means over no jobs are 0)
        ave2_s = last_s
        ave3_s = last_s
    if n_completed != 0.0:
        mean_run_s = sum_run_s / n_completed
        break_s = now_s - last_end_s
    else:
        mean_run_s = 0.0
        break_s = 0.0
    procs_mean = (sum_submitted_procs + procs) / (n_submitted + 1.0)
    procs_ratio = procs / procs_mean if procs_mean > 0.0 else 0.0
    if n_running != 0.0:
        held = running_procs
        running_mean = held / n_running
        longest_s = now_s - earliest_start_s
        sum_elapsed_s = n_running * now_s - running_sum_start_s
    else:
        held = running_mean = longest_s = sum_elapsed_s = 0.0
    day = _TWO_PI * (local_s % _DAY_S) / _DAY_S
    week = _TWO_PI * (local_s % _WEEK_S) / _WEEK_S
    out[0] = requested_s
    out[1] = last_s
    out[2] = second_s
    out[3] = third_s
    out[4] = ave2_s
    out[5] = ave3_s
    out[6] = mean_run_s
    out[7] = procs
    out[8] = procs_mean
    out[9] = procs_ratio
    out[10] = running_mean
    out[11] = n_running
    out[12] = longest_s
    out[13] = sum_elapsed_s
    out[14] = held
    out[15] = break_s
    out[16] = _libm_cos(day)
    out[17] = _libm_sin(day)
    out[18] = _libm_cos(week)
    out[19] = _libm_sin(week)


@compiled
def record_submission(users: np.ndarray, row: int, procs: float) -> None:  # pragma: no cover - compiled
    """Count a submitted job of `procs` processors in its user's submissions (feature 9)."""
    users[row, N_SUBMITTED_AT] += 1.0
    users[row, SUM_SUBMITTED_PROCS_AT] += procs


@compiled
def submit(
    users: np.ndarray, row: int, procs: float, requested_s: float, now_s: float, local_s: float,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The submission event: `features_into`, then `record_submission`, in one call."""
    features_into(users, row, procs, requested_s, now_s, local_s, out)
    record_submission(users, row, procs)


@compiled
def submit_and_score(
    users: np.ndarray, row: int, procs: float, requested_s: float, now_s: float, local_s: float,
    x: np.ndarray, w: np.ndarray, phi: np.ndarray,
) -> float:  # pragma: no cover - compiled
    """The learner's whole submission in one call: `submit` into `x`, Phi(x) into `phi`, and
    f = w . Phi (`nag_kernels.expand_and_score`'s arithmetic: its BLAS ddot)."""
    submit(users, row, procs, requested_s, now_s, local_s, x)
    quadratic_terms(x, phi)
    return np.dot(w, phi)


@compiled
def _earliest_start_s(slots: np.ndarray, slot_links: np.ndarray, head: int) -> float:  # pragma: no cover - compiled
    """The smallest start time in the list of running slots from `head` (not empty)."""
    earliest_s = slots[head, START_AT]
    slot = slot_links[head, NEXT]
    while slot != NO_SLOT:
        start_s = slots[slot, START_AT]
        if start_s < earliest_s:
            earliest_s = start_s
        slot = slot_links[slot, NEXT]
    return earliest_s


@compiled
def _unlink(
    users: np.ndarray, user_links: np.ndarray, slots: np.ndarray, slot_links: np.ndarray,
    row: int, slot: int,
) -> None:  # pragma: no cover - compiled
    """Take running slot `slot` out of user `row`'s running jobs. The sums are reset to 0
    exactly when none is left, so rounding never accumulates across busy periods."""
    prev = slot_links[slot, PREV]
    after = slot_links[slot, NEXT]
    if prev != NO_SLOT:
        slot_links[prev, NEXT] = after
    else:
        user_links[row, HEAD] = after
    if after != NO_SLOT:
        slot_links[after, PREV] = prev
    else:
        user_links[row, TAIL] = prev
    n_running = users[row, N_RUNNING_AT] - 1.0
    users[row, N_RUNNING_AT] = n_running
    if n_running > 0.0:
        users[row, RUNNING_PROCS_AT] -= slots[slot, PROCS_AT]
        start_s = slots[slot, START_AT]
        users[row, RUNNING_SUM_START_AT] -= start_s
        if start_s <= users[row, EARLIEST_START_AT]:
            users[row, EARLIEST_START_AT] = _earliest_start_s(slots, slot_links, user_links[row, HEAD])
    else:
        users[row, RUNNING_PROCS_AT] = 0.0
        users[row, RUNNING_SUM_START_AT] = 0.0
        users[row, EARLIEST_START_AT] = 0.0


@compiled
def start_running(
    users: np.ndarray, user_links: np.ndarray, slots: np.ndarray, slot_links: np.ndarray,
    row: int, slot: int, restart: bool, job_id: int, procs: float, start_s: float,
) -> None:  # pragma: no cover - compiled
    """Job `job_id` of user `row` starts at `start_s` in slot `slot` (free, or its own slot
    when `restart`: a repeated start event restarts its clock, as a removal then a start)."""
    if restart:
        _unlink(users, user_links, slots, slot_links, row, slot)
    n_before = users[row, N_RUNNING_AT]
    users[row, N_RUNNING_AT] = n_before + 1.0
    users[row, RUNNING_PROCS_AT] += procs
    users[row, RUNNING_SUM_START_AT] += start_s
    if n_before == 0.0 or start_s < users[row, EARLIEST_START_AT]:
        users[row, EARLIEST_START_AT] = start_s
    slots[slot, PROCS_AT] = procs
    slots[slot, START_AT] = start_s
    tail = user_links[row, TAIL]
    slot_links[slot, PREV] = tail
    slot_links[slot, NEXT] = NO_SLOT
    slot_links[slot, JOB_ID] = job_id
    if tail != NO_SLOT:
        slot_links[tail, NEXT] = slot
    else:
        user_links[row, HEAD] = slot
    user_links[row, TAIL] = slot


@compiled
def leave_running(
    users: np.ndarray, user_links: np.ndarray, slots: np.ndarray, slot_links: np.ndarray,
    row: int, slot: int,
) -> None:  # pragma: no cover - compiled
    """Running slot `slot` of user `row` leaves the running jobs without a completion."""
    _unlink(users, user_links, slots, slot_links, row, slot)


@compiled
def end_job(
    users: np.ndarray, user_links: np.ndarray, slots: np.ndarray, slot_links: np.ndarray,
    row: int, slot: int, run_s: float, end_s: float,
) -> None:  # pragma: no cover - compiled
    """A job of user `row` ended: out of the running jobs (`slot`; `NO_SLOT` if it was not
    running), then its user's last completed job."""
    if slot != NO_SLOT:
        _unlink(users, user_links, slots, slot_links, row, slot)
    users[row, N_COMPLETED_AT] += 1.0
    users[row, SUM_RUN_AT] += run_s
    users[row, THIRD_LAST_RUN_AT] = users[row, SECOND_LAST_RUN_AT]
    users[row, SECOND_LAST_RUN_AT] = users[row, LAST_RUN_AT]
    users[row, LAST_RUN_AT] = run_s
    users[row, LAST_END_AT] = end_s
