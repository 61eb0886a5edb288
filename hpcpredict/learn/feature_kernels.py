"""The per-user feature state's arithmetic (`features.FeatureState`) as compiled loops over arrays.

Why compiled: per job, the learner computed x_j in Python (about twenty attribute reads, a
struct pack), recorded the submission, then expanded and scored x_j in a compiled call; starts and
ends updated Python objects and a heap (docs/journal/performance-2026-11.md, "Issue 31, round 3:
the feature state compiled"). Here the state is four arrays that `FeatureState` owns and these
kernels update, and a submission (features, record, Phi, w . Phi) is one compiled call.

The arrays (`FeatureState` allocates and grows them; the kernels never resize), two because
numba's dispatch costs per array argument:

* ``users`` (float64, one row per user, the ``*_AT`` columns): the running sums of
  `FeatureState`'s module doc, and the first and last of the user's running jobs (``HEAD_AT``,
  ``TAIL_AT``; -1: none), a doubly linked list of slots in start order. Counts and slot numbers
  are held as floats: exact below 2^53, and every formula reads the counts as floats anyway (an
  int divided or multiplied by a float is converted first).
* ``slots`` (float64, one row per running job): its processors and start time, and the previous
  and next slot of its user's list. Which job a slot holds `FeatureState` keeps (job ids are any
  int64, not all exact as floats).

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
from hpcpredict.learn.nag_kernels import _c_function, learn_step_within_scale, quadratic_terms

# Columns of `users`.
(N_COMPLETED_AT, SUM_RUN_AT, LAST_RUN_AT, SECOND_LAST_RUN_AT, THIRD_LAST_RUN_AT, LAST_END_AT,
 N_SUBMITTED_AT, SUM_SUBMITTED_PROCS_AT, N_RUNNING_AT, RUNNING_PROCS_AT, RUNNING_SUM_START_AT,
 EARLIEST_START_AT, HEAD_AT, TAIL_AT) = range(14)
USER_COLUMNS = 14
# Columns of `slots`.
PROCS_AT, START_AT, PREV_AT, NEXT_AT = range(4)
SLOT_COLUMNS = 4
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
def features_and_score(
    users: np.ndarray, row: int, procs: float, requested_s: float, now_s: float, local_s: float,
    x: np.ndarray, w: np.ndarray, phi: np.ndarray,
) -> float:  # pragma: no cover - compiled
    """`features_into` `x`, Phi(x) into `phi` and f = w . Phi, recording nothing (a peek)."""
    features_into(users, row, procs, requested_s, now_s, local_s, x)
    quadratic_terms(x, phi)
    return np.dot(w, phi)


@compiled
def submit_and_score(
    users: np.ndarray, row: int, procs: float, requested_s: float, now_s: float, local_s: float,
    w: np.ndarray, phi: np.ndarray,
) -> float:  # pragma: no cover - compiled
    """The learner's whole submission in one call: `submit` into Phi's linear terms (x_j is
    phi[1:21]), Phi(x_j) into `phi`, and f = w . Phi (`nag_kernels.expand_and_score`'s
    arithmetic: its BLAS ddot). The expansion reads x from the terms it does not write."""
    x = phi[1:1 + 20]
    submit(users, row, procs, requested_s, now_s, local_s, x)
    quadratic_terms(x, phi)
    return np.dot(w, phi)


@compiled
def _earliest_start_s(slots: np.ndarray, head: int) -> float:  # pragma: no cover - compiled
    """The smallest start time in the list of running slots from `head` (not empty)."""
    earliest_s = slots[head, START_AT]
    slot = int(slots[head, NEXT_AT])
    while slot != NO_SLOT:
        start_s = slots[slot, START_AT]
        if start_s < earliest_s:
            earliest_s = start_s
        slot = int(slots[slot, NEXT_AT])
    return earliest_s


@compiled
def leave_running(users: np.ndarray, slots: np.ndarray, row: int, slot: int) -> None:  # pragma: no cover - compiled
    """Running slot `slot` of user `row` leaves the running jobs (without a completion). The
    sums are reset to 0 exactly when none is left, so rounding never accumulates across busy
    periods."""
    prev = slots[slot, PREV_AT]
    after = slots[slot, NEXT_AT]
    if prev != NO_SLOT:
        slots[int(prev), NEXT_AT] = after
    else:
        users[row, HEAD_AT] = after
    if after != NO_SLOT:
        slots[int(after), PREV_AT] = prev
    else:
        users[row, TAIL_AT] = prev
    n_running = users[row, N_RUNNING_AT] - 1.0
    users[row, N_RUNNING_AT] = n_running
    if n_running > 0.0:
        users[row, RUNNING_PROCS_AT] -= slots[slot, PROCS_AT]
        start_s = slots[slot, START_AT]
        users[row, RUNNING_SUM_START_AT] -= start_s
        if start_s <= users[row, EARLIEST_START_AT]:
            users[row, EARLIEST_START_AT] = _earliest_start_s(slots, int(users[row, HEAD_AT]))
    else:
        users[row, RUNNING_PROCS_AT] = 0.0
        users[row, RUNNING_SUM_START_AT] = 0.0
        users[row, EARLIEST_START_AT] = 0.0


@compiled
def start_running(
    users: np.ndarray, slots: np.ndarray, row: int, slot: int, procs: float, start_s: float,
) -> None:  # pragma: no cover - compiled
    """A job of user `row` starts at `start_s` in slot `slot`, not in the user's list (a free
    slot, or its own after `leave_running`: a repeated start event restarts its clock)."""
    n_before = users[row, N_RUNNING_AT]
    users[row, N_RUNNING_AT] = n_before + 1.0
    users[row, RUNNING_PROCS_AT] += procs
    users[row, RUNNING_SUM_START_AT] += start_s
    if n_before == 0.0 or start_s < users[row, EARLIEST_START_AT]:
        users[row, EARLIEST_START_AT] = start_s
    tail = users[row, TAIL_AT]
    slots[slot, PROCS_AT] = procs
    slots[slot, START_AT] = start_s
    slots[slot, PREV_AT] = tail
    slots[slot, NEXT_AT] = NO_SLOT
    if tail != NO_SLOT:
        slots[int(tail), NEXT_AT] = slot
    else:
        users[row, HEAD_AT] = slot
    users[row, TAIL_AT] = slot


@compiled
def end_job(
    users: np.ndarray, slots: np.ndarray, row: int, slot: int, run_s: float, end_s: float,
) -> None:  # pragma: no cover - compiled
    """A job of user `row` ended: out of the running jobs (`slot`; `NO_SLOT` if it was not
    running), then its user's last completed job."""
    if slot != NO_SLOT:
        leave_running(users, slots, row, slot)
    users[row, N_COMPLETED_AT] += 1.0
    users[row, SUM_RUN_AT] += run_s
    users[row, THIRD_LAST_RUN_AT] = users[row, SECOND_LAST_RUN_AT]
    users[row, SECOND_LAST_RUN_AT] = users[row, LAST_RUN_AT]
    users[row, LAST_RUN_AT] = run_s
    users[row, LAST_END_AT] = end_s


@compiled
def learn_and_end(
    phi: np.ndarray, table: np.ndarray, constants: np.ndarray, t: int, n_sum: float, run_s: float,
    q: float, check_scale: bool, factor: float, users: np.ndarray, slots: np.ndarray, row: int,
    slot: int, end_s: float,
) -> tuple[bool, float]:  # pragma: no cover - compiled
    """The learner's end of a job in one call: `nag_kernels.learn_step_within_scale` on the loss
    of (f, `run_s`, `q`) (returns whether it stepped and the new N), then `end_job` with the
    same runtime."""
    stepped, _, n_sum = learn_step_within_scale(phi, table, constants, t, n_sum, run_s, q,
                                                check_scale, factor)
    end_job(users, slots, row, slot, run_s, end_s)
    return stepped, n_sum
