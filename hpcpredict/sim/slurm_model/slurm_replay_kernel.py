"""The SLURM model's whole replay loop (`slurm_backfill.simulate_slurm`) as one compiled function,
for the configurations that need nothing but arrays (`slurm_backfill` says which and drives it).

Why: with its backfill pass compiled, a `--scheduler slurm-backfill` replay was still half Python:
the event loop, the guard, the corrections, the starts and the predictor's calls, ~1.5 million
events on CEA-Curie (36 s of CPU, the compiled pass 15 s of it), and `hpcpredict tune --scheduler
slurm-backfill` replays a site's history 150 times. Here the events run in one compiled loop that
calls the kernels the Python loop calls (`slurm_backfill_kernel`, `profile_kernel`, and the
predictor and correction kernels the EASY loop shares, `replay_kernel`), in the same order, on the
same values: the schedules and every prediction are the Python loop's, bit for bit
(tests/test_slurm_backfill.py compares both; the Python loop stays the reference for every
option).

The events: submissions are read in order from the job columns (a submission's sequence is its
index, as in the Python loop's heap); the others are in `heap` keyed by (time x 8 + kind, start
sequence), which is the Python heap's (time, kind, sequence) order, kinds as `instants.Instant`.
The pending jobs are `pending[:state[PENDING_AT]]` in submission order; the running jobs still on
a limit below their request (the guard's to raise) `lowered[:state[LOWERED_AT]]`, `lowered_at[job]`
a job's place (-1: none). The loop stops as `replay_kernel.replay` does (progress, the learner's
pool full, an error) and resumes at the same event.
"""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled
from hpcpredict.corrections.correction_kernel import corrected_limit_s
from hpcpredict.corrections.limits import SURVIVAL
from hpcpredict.corrections.survival_kernel import history_ended, running_add
from hpcpredict.learn.feature_kernels import start_running
from hpcpredict.learn.nag_kernels import W_ROW
from hpcpredict.learn.predictor_kernel import heard_end, predicted_at_submission
from hpcpredict.learn.rules import LEARNED
from hpcpredict.sim.engine.profile_kernel import META_ROW, TOTAL, USED, free_now, insert, move, remove
from hpcpredict.sim.easy.replay_kernel import (
    DONE,
    PAUSED,
    POOL_FULL,
    HEAP_JOB,
    HEAP_TIME,
    heap_pop,
    heap_push,
    raise_to_requests,
    set_add,
    set_discard,
)
from hpcpredict.sim.slurm_model.slurm_backfill_kernel import NEVER_FITS as PASS_NEVER_FITS
from hpcpredict.sim.slurm_model.slurm_backfill_kernel import backfill_pass, priority_order

# Event kinds, in their order at one instant (`instants.Instant`'s values), and the key's shift.
PREDICTION_OVER, SUBMISSION, TERMINATION, BACKFILL = 0, 1, 2, 4
KIND_BITS = 3
# `config`: predictor, correction, the guard on, negative outputs as |f|, the learner's outlier
# check from this many steps on, SURVIVAL's min_history, the correction lead, the machine's
# processors; the SLURM settings (slurm_params.SlurmParams): multifactor priority, its age and
# size weights, max age, favour small, bf_max_job_test, bf_window, bf_resolution, bf_interval,
# bf_job_part_count_reserve.
(PREDICTOR_AT, CORRECTION_AT, GUARD_AT, ABS_NEGATIVE_AT, OUTLIER_AFTER_AT, SURVIVAL_MIN_AT,
 LEAD_AT, MACHINE_AT, MULTIFACTOR_AT, WEIGHT_AGE_AT, WEIGHT_SIZE_AT, MAX_AGE_AT, FAVOR_SMALL_AT,
 MAX_TEST_AT, WINDOW_AT, RESOLUTION_AT, INTERVAL_AT, RESERVE_AT) = range(18)
CONFIG_SIZE = 18
# `state`: the next submission, jobs finished, the next sequence, the heap's size, how many
# pending, how many lowered, guarded, changed since the last pass, a pass scheduled, NAG's t, free
# pool rows, after an error stop the job and the value at fault, SURVIVAL's corrections by its
# estimate and by its fallback.
(NEXT_SUBMISSION_AT, FINISHED_AT, SEQUENCE_AT, HEAP_SIZE_AT, PENDING_AT, LOWERED_AT, GUARDED_AT,
 CHANGED_AT, PASS_SCHEDULED_AT, STEPS_AT, FREE_ROWS_AT, ERROR_JOB_AT, ERROR_VALUE_AT, ESTIMATED_AT,
 FALLBACKS_AT) = range(15)
STATE_SIZE = 15
# Why `replay` returned: `replay_kernel`'s first three (`compiled_replay.run_loop` reads them), then
# this loop's errors.
BAD_CORRECTION, NEVER_FITS, OVER_ALLOCATED = range(3, 6)


@compiled
def _push(heap: np.ndarray, state: np.ndarray, time_s: int, kind: int, job: int) -> None:  # pragma: no cover - compiled
    """An event after every one already at (time_s, kind): the Python loop's next sequence."""
    sequence = state[SEQUENCE_AT]
    heap_push(heap, state[HEAP_SIZE_AT], (time_s << KIND_BITS) | kind, sequence, job)
    state[SEQUENCE_AT] = sequence + 1
    state[HEAP_SIZE_AT] += 1


@compiled
def _plan_correction(job: int, heap: np.ndarray, state: np.ndarray, start_s: np.ndarray,
                     prediction_s: np.ndarray, run_s: np.ndarray, requested_s: np.ndarray,
                     lead_s: int) -> None:  # pragma: no cover - compiled
    """`simulate_slurm`'s `plan_correction`."""
    due_s = max(0, prediction_s[job] - lead_s)
    if due_s < run_s[job] and prediction_s[job] < requested_s[job]:
        _push(heap, state, start_s[job] + due_s, PREDICTION_OVER, job)


@compiled
def _note_change(now_s: int, heap: np.ndarray, state: np.ndarray, interval_s: int) -> None:  # pragma: no cover - compiled
    """`simulate_slurm`'s `note_change`: a pass at the interval's next multiple, if none is due."""
    state[CHANGED_AT] = 1
    if state[PASS_SCHEDULED_AT] == 0:
        _push(heap, state, -(-now_s // interval_s) * interval_s, BACKFILL, -1)
        state[PASS_SCHEDULED_AT] = 1


@compiled
def _check_guard(now_s: int, state: np.ndarray, pending: np.ndarray, submit_s: np.ndarray,
                 guard_wait_s: np.ndarray, lowered: np.ndarray, lowered_at: np.ndarray,
                 profile: np.ndarray, start_s: np.ndarray, prediction_s: np.ndarray,
                 requested_s: np.ndarray, heap: np.ndarray, interval_s: int) -> None:  # pragma: no cover - compiled
    """`simulate_slurm`'s `check_guard`: guarded while the first pending job has waited its
    guard wait; then the running jobs on lowered limits get their requests, for good."""
    guarded = state[PENDING_AT] > 0 and now_s - submit_s[pending[0]] >= guard_wait_s[pending[0]]
    state[GUARDED_AT] = 1 if guarded else 0
    if guarded and state[LOWERED_AT] > 0:
        raise_to_requests(lowered, lowered_at, state, LOWERED_AT, profile, start_s, prediction_s,
                          requested_s)
        _note_change(now_s, heap, state, interval_s)


@compiled
def _in_priority_order(now_s: int, pending: np.ndarray, count: int, submit_s: np.ndarray,
                       procs: np.ndarray, config: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """`SlurmBackfill.order`: the pending jobs by decreasing priority, in a new array."""
    if config[MULTIFACTOR_AT] == 0:
        return pending[:count].copy()
    return priority_order(pending[:count], now_s, submit_s, procs, config[MACHINE_AT],
                          config[WEIGHT_AGE_AT], config[WEIGHT_SIZE_AT], config[MAX_AGE_AT],
                          config[FAVOR_SMALL_AT] != 0)


@compiled
def replay(
    submit_s: np.ndarray, run_s: np.ndarray, procs: np.ndarray, requested_s: np.ndarray,
    guard_wait_s: np.ndarray, user_row: np.ndarray, local_s: np.ndarray, oracle_s: np.ndarray,
    profile: np.ndarray, nag: np.ndarray, constants: np.ndarray, factor: float,
    users: np.ndarray, slots: np.ndarray, pool: np.ndarray, pool_of: np.ndarray,
    free_rows: np.ndarray, last_two: np.ndarray,
    start_s: np.ndarray, prediction_s: np.ndarray, initial_s: np.ndarray,
    corrections: np.ndarray, backfilled: np.ndarray, first_reserved_s: np.ndarray,
    heap: np.ndarray, pending: np.ndarray, lowered: np.ndarray, lowered_at: np.ndarray,
    started: np.ndarray, jumped: np.ndarray, state: np.ndarray, n_sum: np.ndarray,
    config: np.ndarray, steps_s: np.ndarray, stop_at: int, history_row: np.ndarray,
    history: np.ndarray, links: np.ndarray, links_first: np.ndarray, quantile: float,
) -> int:  # pragma: no cover - compiled
    """Replay from the event `state` points at until every job has ended (DONE) or a stop
    (module doc); `simulate_slurm`'s loop and handlers, with their names. The columns and the
    predictor's and SURVIVAL's arrays are `replay_kernel.replay`'s; `profile` is the running
    profile's table, `guard_wait_s` how long each job waits before it turns the guard on;
    `started` and `jumped` the backfill pass's outputs (bf_max_job_test long)."""
    count = len(submit_s)
    predictor, correction = config[PREDICTOR_AT], config[CORRECTION_AT]
    guard, abs_negative = config[GUARD_AT] != 0, config[ABS_NEGATIVE_AT] != 0
    outlier_after, min_history, lead_s = config[OUTLIER_AFTER_AT], config[SURVIVAL_MIN_AT], config[LEAD_AT]
    survival = correction == SURVIVAL
    max_test, interval_s = config[MAX_TEST_AT], config[INTERVAL_AT]
    weights = nag[W_ROW]
    while True:
        index = state[NEXT_SUBMISSION_AT]
        heap_size = state[HEAP_SIZE_AT]
        if index < count and (heap_size == 0
                              or ((submit_s[index] << KIND_BITS) | SUBMISSION) < heap[HEAP_TIME, 0]):
            now_s, kind, job = submit_s[index], SUBMISSION, index
        elif heap_size > 0:
            key = heap[HEAP_TIME, 0]
            now_s, kind, job = key >> KIND_BITS, key & ((1 << KIND_BITS) - 1), heap[HEAP_JOB, 0]
        else:
            return DONE
        if state[FINISHED_AT] >= stop_at:
            return PAUSED
        if kind == SUBMISSION and predictor == LEARNED and state[FREE_ROWS_AT] == 0:
            return POOL_FULL
        if kind == SUBMISSION:
            state[NEXT_SUBMISSION_AT] = index + 1
        else:
            heap_pop(heap, heap_size)
            state[HEAP_SIZE_AT] = heap_size - 1
        main = False
        if kind == SUBMISSION:
            predicted = predicted_at_submission(
                job, now_s, predictor, abs_negative, requested_s, procs, user_row, local_s,
                oracle_s, users, weights, pool, pool_of, free_rows, state, FREE_ROWS_AT, last_two)
            prediction_s[job] = predicted
            initial_s[job] = predicted
            pending[state[PENDING_AT]] = job
            state[PENDING_AT] += 1
            main = True
        elif kind == TERMINATION:
            heard_end(job, now_s, predictor, run_s, procs, user_row, pool, pool_of, free_rows, nag,
                      constants, n_sum, outlier_after, factor, users, slots, last_two, state,
                      FREE_ROWS_AT, STEPS_AT)
            if survival:
                history_ended(history, links, links_first, history_row[job], job, run_s[job],
                              state[FINISHED_AT])
            remove(profile, start_s[job] + prediction_s[job], job)
            set_discard(lowered, lowered_at, state, LOWERED_AT, job)
            state[FINISHED_AT] += 1
            main = True
        if guard:
            _check_guard(now_s, state, pending, submit_s, guard_wait_s, lowered, lowered_at,
                         profile, start_s, prediction_s, requested_s, heap, interval_s)
        if kind == PREDICTION_OVER:
            limit = prediction_s[job]
            if limit >= requested_s[job]:
                continue  # given its request by the guard since this correction was planned
            new_prediction, estimated = corrected_limit_s(
                correction, steps_s, history, links, links_first, history_row[job], start_s,
                now_s, requested_s[job], initial_s[job], corrections[job], limit, min_history,
                quantile)
            if survival:
                state[ESTIMATED_AT if estimated else FALLBACKS_AT] += 1
            if not limit < new_prediction <= requested_s[job]:
                state[ERROR_JOB_AT] = job
                state[ERROR_VALUE_AT] = new_prediction
                return BAD_CORRECTION
            corrections[job] += 1
            move(profile, job, start_s[job] + limit, start_s[job] + new_prediction)
            prediction_s[job] = new_prediction
            _plan_correction(job, heap, state, start_s, prediction_s, run_s, requested_s, lead_s)
            _note_change(now_s, heap, state, interval_s)
        elif kind == BACKFILL:
            state[PASS_SCHEDULED_AT] = 0
            due = state[CHANGED_AT] != 0 and state[PENDING_AT] > 0
            state[CHANGED_AT] = 0
            if due:
                order = _in_priority_order(now_s, pending, state[PENDING_AT], submit_s, procs, config)
                starting = backfill_pass(
                    profile, now_s, order[:max_test],
                    requested_s if state[GUARDED_AT] != 0 else prediction_s, procs,
                    config[WINDOW_AT], config[RESOLUTION_AT], first_reserved_s, started, jumped,
                    config[RESERVE_AT])
                if starting == PASS_NEVER_FITS:
                    state[ERROR_JOB_AT] = started[0]
                    return NEVER_FITS
                for position in range(starting):
                    status = _start(started[position], jumped[position], now_s, run_s, procs,
                                    requested_s, user_row, predictor, users, slots, pool_of,
                                    start_s, prediction_s, backfilled, profile, heap, pending,
                                    lowered, lowered_at, state, lead_s, survival, history_row,
                                    links, links_first)
                    if status != DONE:
                        return status
        if main:
            # `main_pass`: in priority order, start while the next fits now.
            free = free_now(profile, now_s)
            order = _in_priority_order(now_s, pending, state[PENDING_AT], submit_s, procs, config)
            for candidate in order:
                if procs[candidate] > free:
                    break
                free -= procs[candidate]
                status = _start(candidate, False, now_s, run_s, procs, requested_s, user_row,
                                predictor, users, slots, pool_of, start_s, prediction_s,
                                backfilled, profile, heap, pending, lowered, lowered_at, state,
                                lead_s, survival, history_row, links, links_first)
                if status != DONE:
                    return status
            _note_change(now_s, heap, state, interval_s)


@compiled
def _start(
    job: int, was_backfilled: bool, now_s: int, run_s: np.ndarray, procs: np.ndarray,
    requested_s: np.ndarray, user_row: np.ndarray, predictor: int, users: np.ndarray,
    slots: np.ndarray, pool_of: np.ndarray, start_s: np.ndarray, prediction_s: np.ndarray,
    backfilled: np.ndarray, profile: np.ndarray, heap: np.ndarray, pending: np.ndarray,
    lowered: np.ndarray, lowered_at: np.ndarray, state: np.ndarray, lead_s: int,
    survival: bool, history_row: np.ndarray, links: np.ndarray, links_first: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """`simulate_slurm`'s `start`: DONE, or OVER_ALLOCATED (the job in ERROR_JOB_AT) where the
    Python loop's `RunningProfile.add` would raise."""
    waiting = state[PENDING_AT]
    place = 0
    while pending[place] != job:
        place += 1
    for later in range(place + 1, waiting):
        pending[later - 1] = pending[later]
    state[PENDING_AT] = waiting - 1
    start_s[job] = now_s
    backfilled[job] = was_backfilled
    if state[GUARDED_AT] != 0:  # it waited at its request: it runs with it
        prediction_s[job] = requested_s[job]
    elif prediction_s[job] < requested_s[job]:
        set_add(lowered, lowered_at, state, LOWERED_AT, job)
    if procs[job] > profile[META_ROW, TOTAL] - profile[META_ROW, USED] and procs[job] > free_now(profile, now_s):
        state[ERROR_JOB_AT] = job
        state[ERROR_VALUE_AT] = free_now(profile, now_s)
        return OVER_ALLOCATED
    insert(profile, now_s + prediction_s[job], job, procs[job])
    if predictor == LEARNED:
        start_running(users, slots, user_row[job], pool_of[job], float(procs[job]), float(now_s))
    if survival:
        running_add(links, links_first, history_row[job], job)
    _push(heap, state, now_s + run_s[job], TERMINATION, job)
    _plan_correction(job, heap, state, start_s, prediction_s, run_s, requested_s, lead_s)
    return DONE
