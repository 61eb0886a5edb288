"""Replay in the compiled loop (`replay_kernel.replay`) when the configuration is one it
models: `why_python_loop` is the one declaration of which ones (`Simulation.run` asks it, and
`simulate` says which loop ran and why). In short: FCFS, EASY and EASY-SJBF, the guard off or on
with any rule but not its slack stage, decisions at submissions and terminations only with the
O(1) path for lone submissions, unique job ids, and a predictor and a correction whose classes
declare a compiled form (`replay_state`: the published baselines, the learner with its default
options, the stateless corrections, SURVIVAL) in a state the loop starts from. Anything else
replays in the Python loop, which stays the reference for every option (tests/test_replay_kernel.py
holds the two equal).

The predictor and the correction hand their state to the loop through their own `to_arrays`
and take back what it did through `from_arrays` (`replay_state`), so that the objects are left
as the Python loop leaves them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hpcpredict.corrections.policies import INCREMENTAL_STEPS_S, CorrectionPolicy
from hpcpredict.learn.baselines import Predictor
from hpcpredict.replay_state import CorrectionArrays, PredictorArrays, ReplayJobs, why_python_for
from hpcpredict.sim.easy import replay_kernel as K
from hpcpredict.sim.easy.backfill_kernel import NO_BACKFILLING, SHORTEST_FIRST, SUBMISSION_ORDER
from hpcpredict.sim.engine.profile import never_fits
from hpcpredict.sim.engine.profile_kernel import META_ROW, TOTAL
from hpcpredict.sim.easy.schedulers import Scheduler

_ORDERS = {None: NO_BACKFILLING, "fcfs": SUBMISSION_ORDER, "shortest_prediction": SHORTEST_FIRST}


def why_python_loop(
    scheduler: Scheduler, predictor: Predictor, correction: CorrectionPolicy, job_ids: np.ndarray,
    *, exhaustive: bool, decide_on_correction: bool,
) -> str | None:
    """Why this configuration replays in the Python loop, or None when the compiled one models
    it (module doc)."""
    if exhaustive:
        return "exhaustive decisions"
    if decide_on_correction:
        return "decisions at corrections"
    if scheduler.backfill_order not in _ORDERS:
        return f"backfilling order {scheduler.backfill_order}"
    if scheduler.has_estimate_stage:
        return "the guard's slack stage"
    return why_python_for_jobs(predictor, correction, job_ids)


def why_python_for_jobs(
    predictor: Predictor, correction: CorrectionPolicy, job_ids: np.ndarray,
) -> str | None:
    """Why neither compiled loop (this one, the SLURM model's) can replay this predictor and
    this correction on these jobs, or None when both can."""
    reason = why_python_for(predictor, "predictor") or why_python_for(correction, "correction")
    if reason is None and len(np.unique(job_ids)) != len(job_ids):
        return "job ids that repeat (the objects key their state by job id)"
    return reason


@dataclass
class ReplayColumns:
    """What a replay leaves per job, as `simulation.SimulationResult` holds it (lists)."""

    start_s: list[int]
    initial_prediction_s: list[int]
    final_prediction_s: list[int]
    corrections: list[int]
    backfilled: list[bool]
    first_reserved_start_s: list[int]


@dataclass
class JobArrays:
    """What both compiled loops write per job: the learner's pool row, then `ReplayColumns`'
    columns as arrays (start -1 and no promise, -1, until there is one)."""

    pool_of: np.ndarray
    start_s: np.ndarray
    prediction_s: np.ndarray
    initial_s: np.ndarray
    corrections: np.ndarray
    backfilled: np.ndarray
    first_reserved_s: np.ndarray

    @classmethod
    def empty(cls, count: int) -> JobArrays:
        int64 = np.int64
        return cls(np.full(count, -1, dtype=int64), np.full(count, -1, dtype=int64),
                   np.zeros(count, dtype=int64), np.zeros(count, dtype=int64),
                   np.zeros(count, dtype=int64), np.zeros(count, dtype=np.bool_),
                   np.full(count, -1, dtype=int64))

    def columns(self) -> ReplayColumns:
        return ReplayColumns(
            start_s=self.start_s.tolist(),
            initial_prediction_s=self.initial_s.tolist(),
            final_prediction_s=self.prediction_s.tolist(),
            corrections=self.corrections.tolist(),
            backfilled=self.backfilled.tolist(),
            first_reserved_start_s=self.first_reserved_s.tolist(),
        )


@dataclass
class Machine:
    """The replay's job columns (int64 arrays) and the tables the Python objects own
    (`simulation.Simulation` builds them: the waiting queue's, with the guard's due times
    written, and the running profiles'; `by_request` None when the guard is off)."""

    job_ids: np.ndarray
    user_ids: np.ndarray
    submit_s: np.ndarray
    run_s: np.ndarray
    procs: np.ndarray
    requested_s: np.ndarray
    queue: np.ndarray
    profile: np.ndarray
    by_request: np.ndarray | None
    # the jobs' field a learner keys its histories by with the user (`history_keys`), or None
    history_attribute: np.ndarray | None = None


def replay(
    machine: Machine, scheduler: Scheduler, predictor: Predictor, correction: CorrectionPolicy,
    progress: Callable[[int], None] | None, progress_every: int,
) -> ReplayColumns:
    """Replay in the compiled loop (`why_python_loop` must say None), reporting progress as
    the Python loop does (every `progress_every` jobs finished, then the total)."""
    count = len(machine.job_ids)
    guard = scheduler.guard is not None
    int64 = np.int64
    replay_jobs = ReplayJobs.of(machine.job_ids, machine.user_ids, machine.submit_s, machine.history_attribute)
    predictor_arrays = predictor.to_arrays(replay_jobs)  # type: ignore[attr-defined]
    correction_arrays = correction.to_arrays(replay_jobs)  # type: ignore[attr-defined]
    jobs = JobArrays.empty(count)
    heap = np.zeros((3, max(count, 1)), dtype=int64)
    unpinned = np.zeros(max(count, 1), dtype=int64)
    unpinned_at = np.full(count, -1, dtype=int64)
    state = np.zeros(K.STATE_SIZE, dtype=int64)
    state[K.STEPS_AT] = predictor_arrays.steps
    config = np.zeros(K.CONFIG_SIZE, dtype=int64)
    config[K.PREDICTOR_AT] = predictor_arrays.kind
    config[K.CORRECTION_AT] = correction_arrays.kind
    config[K.ORDER_AT] = _ORDERS[scheduler.backfill_order]
    config[K.GUARD_AT] = guard
    config[K.PROMISE_AT] = guard and scheduler.guard.rule == "promise"
    config[K.ABS_NEGATIVE_AT] = predictor_arrays.abs_negative
    config[K.OUTLIER_AFTER_AT] = predictor_arrays.outlier_after
    config[K.SURVIVAL_MIN_AT] = correction_arrays.min_history
    history_row = replay_jobs.user_row
    steps_s = np.array(INCREMENTAL_STEPS_S, dtype=int64)
    profile = machine.profile
    by_request = machine.by_request if machine.by_request is not None else profile

    def replay_until(stop_at: int, pool: np.ndarray, slots: np.ndarray, free_rows: np.ndarray) -> int:
        return K.replay(
            machine.submit_s, machine.run_s, machine.procs, machine.requested_s,
            predictor_arrays.user_row, predictor_arrays.local_s, predictor_arrays.oracle_s,
            machine.queue, profile, by_request, predictor_arrays.nag_table,
            predictor_arrays.constants, predictor_arrays.factor, predictor_arrays.users, slots,
            pool, jobs.pool_of, free_rows, predictor_arrays.last_two,
            jobs.start_s, jobs.prediction_s, jobs.initial_s, jobs.corrections, jobs.backfilled,
            jobs.first_reserved_s, heap, unpinned, unpinned_at, state, predictor_arrays.n_sum,
            config, steps_s, stop_at, history_row, correction_arrays.history,
            correction_arrays.links, correction_arrays.links_first, correction_arrays.quantile,
        )

    run_loop(replay_until, state, K.FINISHED_AT, K.FREE_ROWS_AT, predictor_arrays.pool,
             predictor_arrays.slots, count, progress, progress_every,
             lambda status: _raise(machine, correction, status, state))
    hand_back(predictor, predictor_arrays, correction, correction_arrays, replay_jobs, state,
              K.STEPS_AT, K.ESTIMATED_AT, K.FALLBACKS_AT)
    return jobs.columns()


def hand_back(
    predictor: Predictor, predictor_arrays: PredictorArrays, correction: CorrectionPolicy,
    correction_arrays: CorrectionArrays, jobs: ReplayJobs, state: np.ndarray, steps_at: int,
    estimated_at: int, fallbacks_at: int,
) -> None:
    """After a compiled loop (either), leave in the predictor and the correction what it did:
    the counters it kept in `state`, then their own `from_arrays`."""
    predictor_arrays.steps = int(state[steps_at])
    correction_arrays.estimated = int(state[estimated_at])
    correction_arrays.fallbacks = int(state[fallbacks_at])
    predictor.from_arrays(predictor_arrays, jobs)  # type: ignore[attr-defined]
    correction.from_arrays(correction_arrays, jobs)  # type: ignore[attr-defined]


def run_loop(
    replay_until: Callable[[int, np.ndarray, np.ndarray, np.ndarray], int], state: np.ndarray,
    finished_at: int, free_rows_at: int, pool: np.ndarray, slots: np.ndarray, count: int,
    progress: Callable[[int], None] | None, progress_every: int, fail: Callable[[int], None],
) -> None:
    """Call a compiled loop (this one's or the SLURM model's: `replay_until(stop_at, pool,
    slots, free_rows)`) until every job has ended: reporting progress as the Python loops do
    (every `progress_every` jobs finished, then the total), growing the learner's pool when it
    is full (`state[free_rows_at]` free rows), and `fail` for any other stop. Both kernels' first
    three stops are `replay_kernel`'s DONE, PAUSED and POOL_FULL."""
    free_rows = np.arange(len(pool) - 1, -1, -1, dtype=np.int64)
    state[free_rows_at] = len(free_rows)
    reported = 0
    while True:
        stop_at = count + 1 if progress is None else reported + progress_every
        status = replay_until(stop_at, pool, slots, free_rows)
        if status == K.DONE:
            break
        if status == K.PAUSED:
            assert progress is not None
            reported = int(state[finished_at]) - int(state[finished_at]) % progress_every
            progress(reported)
        elif status == K.POOL_FULL:
            pool, slots, free_rows = grown_pool(pool, slots)
            state[free_rows_at] = len(pool) // 2
        else:
            fail(status)
    finished = int(state[finished_at])
    if progress is not None:
        if finished - reported >= progress_every:  # (the last event reached a multiple)
            progress(finished - finished % progress_every)
        progress(finished)
    if finished != count:
        raise AssertionError(f"{count - finished} jobs never finished")


def grown_pool(pool: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Twice the rows, the old ones kept (rows in use stay where they are); the new rows free."""
    rows = len(pool)
    grown_pool = np.zeros((2 * rows, pool.shape[1]))
    grown_pool[:rows] = pool
    grown_slots = np.zeros((2 * rows, slots.shape[1]))
    grown_slots[:rows] = slots
    free_rows = np.zeros(2 * rows, dtype=np.int64)
    free_rows[:rows] = np.arange(2 * rows - 1, rows - 1, -1)
    return grown_pool, grown_slots, free_rows


def bad_correction(correction: CorrectionPolicy, value_s: int, job_id: int,
                   requested_s: int) -> AssertionError:
    """The error for a correction that did not raise a limit within the request (both loops)."""
    return AssertionError(f"correction {correction.name} gave {value_s} s for job {job_id} "
                          f"(request {requested_s} s)")


def _raise(machine: Machine, correction: CorrectionPolicy, status: int, state: np.ndarray) -> None:
    """The error the Python loop raises for what stopped the compiled one."""
    job = int(state[K.ERROR_JOB_AT])
    if status == K.BAD_CORRECTION:
        raise bad_correction(correction, int(state[K.ERROR_VALUE_AT]), int(machine.job_ids[job]),
                             int(machine.requested_s[job]))
    if status == K.NOT_RUNNING:
        raise KeyError(f"job {job} is not running")
    if status == K.NEVER_FITS:
        raise never_fits(machine.procs[job], int(machine.profile[META_ROW, TOTAL]))
    raise AssertionError(f"compiled replay stopped with status {status}")
