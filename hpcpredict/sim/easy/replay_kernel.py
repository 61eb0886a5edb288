"""The whole replay loop of `simulation.Simulation` as one compiled function, for the
configurations that need nothing but arrays (`compiled_replay.why_python_loop` says which;
its `replay` drives this one).

Why: after the scheduling pass, the feature state and the learner were compiled, a replay was
still ~30 Python calls per job between compiled kernels, ~80% of a whole `hpcpredict simulate`
(docs/journal/performance-2026-11.md, "The whole command after round 3").
Here the events, the corrections, the decisions, the starts and the learner's work run in one
compiled loop over the arrays the Python objects already own (the waiting queue's and the running
profiles' tables, the learner's NAG table and per-user features); it calls the same kernels the
Python loop calls (`backfill_kernel`, `profile_kernel`, `feature_kernels`), in the same order,
on the same values, so the schedules and every prediction are those of the Python loop, bit for
bit (tests/test_replay_kernel.py compares both on the real logs, and `benchmarks/
schedule_hashes.py` gives the same hashes).

What the Python loop keeps as objects is held here in arrays: the termination heap (time, start
sequence, job) in `heap`; the learner's pending Phi of each job submitted and not yet ended in a
row of `pool` (`pool_of[job]`; the same row numbers the job's running slot in `slots`); the
running jobs not yet pinned by a guarded decision in `unpinned` (`unpinned_at[job]` its place,
-1: none); the scalars in `state` (the *_AT names below) and the learner's N in `n_sum`.

The loop stops before an event and returns to Python when `finished` reaches `stop_at` (progress
is reported between calls), when a submission finds no free pool row (the caller grows the pool
and calls again), or when something the Python loop would raise for happened (the caller raises
it). Every stop leaves the state consistent: calling again resumes at the same event.
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
from hpcpredict.sim.easy.backfill_kernel import (
    CANDIDATES_ROW,
    ENDED_NOT_RUNNING,
    GUARDED,
    NO_BACKFILLING,
    NO_ESTIMATES,
    PREDICTION_ROW,
    PROCS_ROW,
    SHORTEST_FIRST,
    SJBF_KEY_ROW,
    STARTED_ROW,
    UNGUARDED,
    GUARD_DUE_ROW,
    WAITING_ROW,
    consider_new_job_pass,
    schedule_pass,
)
from hpcpredict.sim.engine.profile_kernel import (
    END_ROW,
    JOB_ROW,
    META_ROW,
    MOVED_AT_ROW,
    MOVED_END_ROW,
    NEVER,
    SIZE,
    move,
    postpone,
    reservation,
)

# `config`: predictor, correction, backfilling order (backfill_kernel's), guard on, its
# "promise" rule, negative outputs as |f| (the learner's rule, else 1 s), the learner's outlier
# check from this many steps on, SURVIVAL's min_history.
(PREDICTOR_AT, CORRECTION_AT, ORDER_AT, GUARD_AT, PROMISE_AT, ABS_NEGATIVE_AT,
 OUTLIER_AFTER_AT, SURVIVAL_MIN_AT) = range(8)
CONFIG_SIZE = 8
# `state`: the next submission, jobs finished, the next start sequence, the heap's size, the
# waiting queue's candidates (how many, how many of them in key order), how many wait, its head
# cursor; the reservation (1 if any, head, shadow time, extra, guard stage) and whether
# corrections moved the plan since; NAG's t; how many unpinned; free pool rows; after an error
# stop, the job and the value at fault; SURVIVAL's corrections by its estimate and by its
# INCREMENTAL fallback.
(NEXT_SUBMISSION_AT, FINISHED_AT, SEQUENCE_AT, HEAP_SIZE_AT, CANDIDATES_AT, SORTED_AT,
 WAITING_AT, HEAD_AT, RESERVED_AT, RESERVED_HEAD_AT, SHADOW_AT, EXTRA_AT, STAGE_AT,
 PLAN_MOVED_AT, STEPS_AT, UNPINNED_AT, FREE_ROWS_AT, ERROR_JOB_AT, ERROR_VALUE_AT,
 ESTIMATED_AT, FALLBACKS_AT) = range(21)
STATE_SIZE = 21
# Why `replay` returned.
DONE, PAUSED, POOL_FULL, BAD_CORRECTION, NOT_RUNNING, NEVER_FITS = range(6)
# The heap's rows.
HEAP_TIME, HEAP_SEQUENCE, HEAP_JOB = range(3)


@compiled
def heap_push(heap: np.ndarray, size: int, time_s: int, sequence: int, job: int) -> None:  # pragma: no cover - compiled
    """`heapq.heappush` of (time_s, sequence, job) on a heap of `size` entries."""
    position = size
    while position > 0:
        parent = (position - 1) >> 1
        parent_time = heap[HEAP_TIME, parent]
        if parent_time < time_s or (parent_time == time_s and heap[HEAP_SEQUENCE, parent] < sequence):
            break
        heap[HEAP_TIME, position] = parent_time
        heap[HEAP_SEQUENCE, position] = heap[HEAP_SEQUENCE, parent]
        heap[HEAP_JOB, position] = heap[HEAP_JOB, parent]
        position = parent
    heap[HEAP_TIME, position] = time_s
    heap[HEAP_SEQUENCE, position] = sequence
    heap[HEAP_JOB, position] = job


@compiled
def heap_pop(heap: np.ndarray, size: int) -> int:  # pragma: no cover - compiled
    """Take the first (time, sequence) entry off a heap of `size` entries; its job. The keys
    are unique (sequences are), so the order is `heapq`'s."""
    job = heap[HEAP_JOB, 0]
    size -= 1
    time_s, sequence, last = heap[HEAP_TIME, size], heap[HEAP_SEQUENCE, size], heap[HEAP_JOB, size]
    position = 0
    while True:
        child = 2 * position + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (heap[HEAP_TIME, right] < heap[HEAP_TIME, child] or (
                heap[HEAP_TIME, right] == heap[HEAP_TIME, child]
                and heap[HEAP_SEQUENCE, right] < heap[HEAP_SEQUENCE, child])):
            child = right
        child_time = heap[HEAP_TIME, child]
        if time_s < child_time or (time_s == child_time and sequence < heap[HEAP_SEQUENCE, child]):
            break
        heap[HEAP_TIME, position] = child_time
        heap[HEAP_SEQUENCE, position] = heap[HEAP_SEQUENCE, child]
        heap[HEAP_JOB, position] = heap[HEAP_JOB, child]
        position = child
    if size > 0:
        heap[HEAP_TIME, position] = time_s
        heap[HEAP_SEQUENCE, position] = sequence
        heap[HEAP_JOB, position] = last
    return job


@compiled
def set_add(members: np.ndarray, place_of: np.ndarray, state: np.ndarray, count_at: int,
            job: int) -> None:  # pragma: no cover - compiled
    """Add `job` to a set of jobs kept as `members[:state[count_at]]`, `place_of[job]` its place
    (-1: not in it): the running jobs a guard may still raise (both loops keep one)."""
    place = state[count_at]
    members[place] = job
    place_of[job] = place
    state[count_at] = place + 1


@compiled
def set_discard(members: np.ndarray, place_of: np.ndarray, state: np.ndarray, count_at: int,
                job: int) -> None:  # pragma: no cover - compiled
    """Take `job` out of such a set if it is in it (the last member takes its place)."""
    place = place_of[job]
    if place >= 0:
        last = state[count_at] - 1
        moved = members[last]
        members[place] = moved
        place_of[moved] = place
        place_of[job] = -1
        state[count_at] = last


@compiled
def raise_to_requests(members: np.ndarray, place_of: np.ndarray, state: np.ndarray, count_at: int,
                      profile: np.ndarray, start_s: np.ndarray, prediction_s: np.ndarray,
                      requested_s: np.ndarray) -> None:  # pragma: no cover - compiled
    """The guard's act on such a set of running jobs: each planned to its request from now on,
    and the set emptied (a job at its request is never lowered or corrected again)."""
    for place in range(state[count_at]):
        job = members[place]
        move(profile, job, start_s[job] + prediction_s[job], start_s[job] + requested_s[job])
        prediction_s[job] = requested_s[job]
        place_of[job] = -1
    state[count_at] = 0


@compiled
def replay(
    submit_s: np.ndarray, run_s: np.ndarray, procs: np.ndarray, requested_s: np.ndarray,
    user_row: np.ndarray, local_s: np.ndarray, oracle_s: np.ndarray,
    queue: np.ndarray, profile: np.ndarray, by_request: np.ndarray,
    nag: np.ndarray, constants: np.ndarray, factor: float, users: np.ndarray, slots: np.ndarray,
    pool: np.ndarray, pool_of: np.ndarray, free_rows: np.ndarray, last_two: np.ndarray,
    start_s: np.ndarray, prediction_s: np.ndarray, initial_s: np.ndarray, corrections: np.ndarray,
    backfilled: np.ndarray, first_reserved_s: np.ndarray,
    heap: np.ndarray, unpinned: np.ndarray, unpinned_at: np.ndarray,
    state: np.ndarray, n_sum: np.ndarray, config: np.ndarray, steps_s: np.ndarray, stop_at: int,
    history_row: np.ndarray, history: np.ndarray, links: np.ndarray, links_first: np.ndarray,
    quantile: float,
) -> int:  # pragma: no cover - compiled
    """Replay from the event `state` points at until every job has ended (DONE) or a stop
    (module doc); `Simulation._run`'s loop and handlers, with the same names where they fit.

    Per job: its columns (`user_row`: its user's row of `users` and `last_two`; `local_s`: the
    submission's local seconds for the time-of-day features; `oracle_s`: CLAIRVOYANT's answer)
    and the result columns. `queue`,
    `profile` and `by_request` are the waiting queue's and the running profiles' tables (the
    running profile again as `by_request` when the guard is off). The learner (LEARNED): its
    NAG table and step constants, the outlier factor, the per-user features `users`, and the
    pool's `slots`; AVE2: each user's last two runtimes in `last_two` (-1: none). `steps_s`:
    INCREMENTAL's steps. SURVIVAL: its history (`history_row`, `history`, `links`,
    `links_first`: above) and quantile."""
    count = len(submit_s)
    predictor, correction, order = config[PREDICTOR_AT], config[CORRECTION_AT], config[ORDER_AT]
    guard, promise, abs_negative = config[GUARD_AT] != 0, config[PROMISE_AT] != 0, config[ABS_NEGATIVE_AT] != 0
    outlier_after = config[OUTLIER_AFTER_AT]
    survival, min_history = correction == SURVIVAL, config[SURVIVAL_MIN_AT]
    guard_profile = by_request if guard else profile
    by_key = order == SHORTEST_FIRST
    weights = nag[W_ROW]
    waiting_row = queue[WAITING_ROW]
    while True:
        # The next event: a submission goes before a termination at the same instant.
        index = state[NEXT_SUBMISSION_AT]
        heap_size = state[HEAP_SIZE_AT]
        if index < count and (heap_size == 0 or submit_s[index] <= heap[HEAP_TIME, 0]):
            now_s = submit_s[index]
            is_submission = True
        elif heap_size > 0:
            now_s = heap[HEAP_TIME, 0]
            is_submission = False
        else:
            return DONE
        if state[FINISHED_AT] >= stop_at:
            return PAUSED
        if is_submission and predictor == LEARNED and state[FREE_ROWS_AT] == 0:
            return POOL_FULL
        # Predictions running out by then are corrected first (`Simulation._correct_until`).
        size = profile[META_ROW, SIZE]
        if size > 0 and profile[END_ROW, 0] <= now_s:
            moves = 0
            for position in range(size):
                end_s = profile[END_ROW, position]
                if end_s > now_s:
                    break
                job = profile[JOB_ROW, position]
                job_run_s = run_s[job]
                if prediction_s[job] >= job_run_s:
                    continue
                job_start_s, job_requested_s = start_s[job], requested_s[job]
                done, at_s = corrections[job], end_s
                while True:
                    elapsed = at_s - job_start_s
                    new_prediction, estimated = corrected_limit_s(
                        correction, steps_s, history, links, links_first, history_row[job],
                        start_s, at_s, job_requested_s, initial_s[job], done, elapsed,
                        min_history, quantile)
                    if survival:
                        state[ESTIMATED_AT if estimated else FALLBACKS_AT] += 1
                    if not elapsed < new_prediction <= job_requested_s:
                        state[ERROR_JOB_AT] = job
                        state[ERROR_VALUE_AT] = new_prediction
                        return BAD_CORRECTION
                    done += 1
                    at_s = job_start_s + new_prediction
                    if new_prediction >= job_run_s or at_s > now_s:
                        break
                corrections[job] = done
                profile[MOVED_AT_ROW, moves] = position
                profile[MOVED_END_ROW, moves] = at_s
                moves += 1
                prediction_s[job] = new_prediction
            if moves:
                postpone(profile, moves)
                state[PLAN_MOVED_AT] = 1
        ended_job, ended_end_s, ended_request_end_s = -1, 0, 0
        decide = True
        if is_submission:
            state[NEXT_SUBMISSION_AT] = index + 1
            # `Simulation._submission`: the prediction, the queue, then a decision.
            predicted = predicted_at_submission(
                index, now_s, predictor, abs_negative, requested_s, procs, user_row, local_s,
                oracle_s, users, weights, pool, pool_of, free_rows, state, FREE_ROWS_AT, last_two)
            prediction_s[index] = predicted
            initial_s[index] = predicted
            queue_was_empty = state[WAITING_AT] == 0
            candidates = state[CANDIDATES_AT]
            queue[CANDIDATES_ROW, candidates] = index
            state[CANDIDATES_AT] = candidates + 1
            queue[PREDICTION_ROW, index] = predicted
            queue[SJBF_KEY_ROW, index] = (predicted << 32) | index
            waiting_row[index] = 1
            state[WAITING_AT] += 1
            # The O(1) path for a lone new submission (`Simulation._submission`'s conditions).
            if (not queue_was_empty and state[RESERVED_AT] != 0
                    and not (profile[META_ROW, SIZE] > 0 and profile[END_ROW, 0] <= now_s)):
                stage = state[STAGE_AT]
                head = state[RESERVED_HEAD_AT]
                same_stage = (stage == GUARDED or not guard
                              or (GUARDED if now_s >= queue[GUARD_DUE_ROW, head] else UNGUARDED) == stage)
                if same_stage:
                    valid = True
                    if state[PLAN_MOVED_AT] != 0:  # `Simulation._still_valid`
                        if stage != UNGUARDED:
                            valid = False
                        else:
                            shadow_s, extra = reservation(profile, queue[PROCS_ROW, head], now_s)
                            if shadow_s == NEVER:
                                state[ERROR_JOB_AT] = head
                                return NEVER_FITS
                            if shadow_s != state[SHADOW_AT] or extra > state[EXTRA_AT]:
                                valid = False
                            else:
                                state[EXTRA_AT] = extra
                    if valid:
                        decide = False
                        if order != NO_BACKFILLING:
                            started, extra = consider_new_job_pass(
                                queue, profile, guard_profile, now_s, index, state[SHADOW_AT],
                                state[EXTRA_AT], stage, guard, NO_ESTIMATES)
                            if started:
                                state[WAITING_AT] -= 1
                                _start(index, True, now_s, run_s, procs, user_row, predictor,
                                       users, slots, pool_of, start_s, backfilled, heap,
                                       unpinned, unpinned_at, state, guard)
                                if survival:
                                    running_add(links, links_first, history_row[index], index)
                                state[EXTRA_AT] = extra
                        _remember(state, first_reserved_s, unpinned, unpinned_at, profile,
                                  start_s, prediction_s, requested_s)
        else:
            # `Simulation._termination`: the learner, then a decision that takes the job out of
            # the running profiles first.
            job = heap_pop(heap, heap_size)
            state[HEAP_SIZE_AT] = heap_size - 1
            job_run_s = run_s[job]
            heard_end(job, now_s, predictor, run_s, procs, user_row, pool, pool_of, free_rows, nag,
                      constants, n_sum, outlier_after, factor, users, slots, last_two, state,
                      FREE_ROWS_AT, STEPS_AT)
            if survival:
                history_ended(history, links, links_first, history_row[job], job, job_run_s,
                              state[FINISHED_AT])
            if guard:
                set_discard(unpinned, unpinned_at, state, UNPINNED_AT, job)
            state[FINISHED_AT] += 1
            ended_job = job
            ended_end_s = start_s[job] + prediction_s[job]
            ended_request_end_s = start_s[job] + requested_s[job]
        if decide:
            # `Simulation._decide` / `Scheduler.schedule`: one full pass.
            if not by_key and state[SORTED_AT] != 0:
                queue[CANDIDATES_ROW, :state[CANDIDATES_AT]].sort()
                state[SORTED_AT] = 0
            head, started_count, from_head, kept, reserved, shadow_s, extra, stage = schedule_pass(
                queue, state[CANDIDATES_AT], state[SORTED_AT], profile, guard_profile, now_s,
                state[HEAD_AT], state[WAITING_AT], order, guard, promise, NO_ESTIMATES, ended_job,
                ended_end_s, ended_request_end_s)
            if reserved == ENDED_NOT_RUNNING:
                state[ERROR_JOB_AT] = ended_job
                return NOT_RUNNING
            state[WAITING_AT] -= started_count
            state[HEAD_AT] = head
            if kept >= 0:
                state[CANDIDATES_AT] = kept
                state[SORTED_AT] = kept if by_key else 0
            started_jobs = queue[STARTED_ROW]
            for position in range(started_count):
                job = started_jobs[position]
                _start(job, position >= from_head, now_s, run_s, procs,
                       user_row, predictor, users, slots, pool_of, start_s, backfilled, heap,
                       unpinned, unpinned_at, state, guard)
                if survival:
                    running_add(links, links_first, history_row[job], job)
            if reserved and shadow_s == NEVER:
                state[ERROR_JOB_AT] = head
                return NEVER_FITS
            state[RESERVED_AT] = 1 if reserved else 0
            state[RESERVED_HEAD_AT] = head
            state[SHADOW_AT] = shadow_s
            state[EXTRA_AT] = extra
            state[STAGE_AT] = stage
            _remember(state, first_reserved_s, unpinned, unpinned_at, profile, start_s,
                      prediction_s, requested_s)


@compiled
def _start(
    job: int, was_backfilled: bool, now_s: int, run_s: np.ndarray, procs: np.ndarray,
    user_row: np.ndarray, predictor: int, users: np.ndarray, slots: np.ndarray,
    pool_of: np.ndarray, start_s: np.ndarray, backfilled: np.ndarray, heap: np.ndarray,
    unpinned: np.ndarray, unpinned_at: np.ndarray, state: np.ndarray, guard: bool,
) -> None:  # pragma: no cover - compiled
    """`Simulation._start`: a job the scheduler started (it is in the running profiles)."""
    start_s[job] = now_s
    backfilled[job] = was_backfilled
    if guard:
        set_add(unpinned, unpinned_at, state, UNPINNED_AT, job)
    if predictor == LEARNED:
        start_running(users, slots, user_row[job], pool_of[job], float(procs[job]), float(now_s))
    sequence = state[SEQUENCE_AT]
    heap_push(heap, state[HEAP_SIZE_AT], now_s + run_s[job], sequence, job)
    state[SEQUENCE_AT] = sequence + 1
    state[HEAP_SIZE_AT] += 1


@compiled
def _remember(
    state: np.ndarray, first_reserved_s: np.ndarray, unpinned: np.ndarray,
    unpinned_at: np.ndarray, profile: np.ndarray, start_s: np.ndarray, prediction_s: np.ndarray,
    requested_s: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """`Simulation._remember`: the reservation (in `state`) is kept; the head's first promise
    noted; after a guarded decision, the running jobs pinned to their requests."""
    state[PLAN_MOVED_AT] = 0
    if state[RESERVED_AT] == 0:
        return
    head = state[RESERVED_HEAD_AT]
    if first_reserved_s[head] < 0:
        first_reserved_s[head] = state[SHADOW_AT]
    if state[STAGE_AT] != UNGUARDED and state[UNPINNED_AT] > 0:
        raise_to_requests(unpinned, unpinned_at, state, UNPINNED_AT, profile, start_s, prediction_s,
                          requested_s)
