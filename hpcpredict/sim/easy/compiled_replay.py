"""Replay in the compiled loop (`replay_kernel.replay`) when the configuration is one it
models (`simulation.Simulation.run` asks `covered`): the published schedulers and the learned default, which are what
`hpcpredict simulate`, `tune` and the campaigns replay most.

What the loop models: FCFS, EASY and EASY-SJBF; the starvation guard off, or on with the
"wait", "xfactor" or "promise" rule (no slack stage); the requested, clairvoyant, AVE2 and
learned predictors, the learned one with its default options (raw features, no censoring, no
calibration) and no job
pending from before; the requested-time, incremental and doubling corrections, and SURVIVAL
with an empty history (`corrections.survival`: its Kaplan-Meier kernel is the one both loops
call); decisions at
submissions and terminations only, the O(1) path for lone submissions on; job ids unique (the
Python objects key their state by job id). Anything else replays in the Python loop, which
stays the reference for every option (tests/test_replay_kernel.py holds the two equal).

The predictor's learned state is the one the Python loop would leave: the kernel updates the
learner's own arrays in place (NAG's table, the per-user features), and t, N and AVE2's
histories are written back, as are SURVIVAL's history and counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hpcpredict.corrections.policies import (
    INCREMENTAL_STEPS_S,
    DoublingCorrection,
    IncrementalCorrection,
    RequestedTimeCorrection,
)
from hpcpredict.corrections.policies import CorrectionPolicy
from hpcpredict.corrections.survival import SurvivalCorrection
from hpcpredict.learn.baselines import Ave2Predictor, ClairvoyantPredictor, Predictor, RequestedPredictor
from hpcpredict.learn.feature_kernels import SLOT_COLUMNS
from hpcpredict.sim.easy import replay_kernel as K
from hpcpredict.sim.easy.backfill_kernel import NO_BACKFILLING, SHORTEST_FIRST, SUBMISSION_ORDER
from hpcpredict.sim.engine.profile import never_fits
from hpcpredict.sim.engine.profile_kernel import META_ROW, TOTAL
from hpcpredict.sim.easy.schedulers import Scheduler

if TYPE_CHECKING:
    from hpcpredict.learn.predictor import LearnedPredictor

_ORDERS = {None: NO_BACKFILLING, "fcfs": SUBMISSION_ORDER, "shortest_prediction": SHORTEST_FIRST}
CORRECTION_KINDS = {RequestedTimeCorrection: K.TO_REQUEST, IncrementalCorrection: K.INCREMENTAL,
                    DoublingCorrection: K.DOUBLING, SurvivalCorrection: K.SURVIVAL}
_FIRST_POOL_ROWS = 1024  # the learner's pending rows at first; doubled when a submission finds none


def predictor_kind(predictor: object) -> int | None:
    """`replay_kernel`'s code for the predictor, or None when the loop does not model it."""
    kind = type(predictor)
    if kind is RequestedPredictor:
        return K.REQUESTED
    if kind is ClairvoyantPredictor:
        return K.CLAIRVOYANT
    if kind is Ave2Predictor:
        return K.AVE2
    from hpcpredict.learn.predictor import LearnedPredictor

    if kind is not LearnedPredictor:
        return None
    learner: LearnedPredictor = predictor  # type: ignore[assignment]
    plain = not learner._robust and not learner.censor_at_limit and learner.calibration is None
    idle = not learner._pending_phi and not learner.features._slot_of
    return K.LEARNED if plain and idle else None


def covered(
    scheduler: Scheduler, predictor: Predictor, correction: CorrectionPolicy, job_ids: np.ndarray,
    *, exhaustive: bool, decide_on_correction: bool,
) -> bool:
    """Does the compiled loop model this configuration (module doc)?"""
    if exhaustive or decide_on_correction:
        return False
    if scheduler.backfill_order not in _ORDERS:
        return False
    if scheduler.has_estimate_stage:
        return False
    return models_predictor_and_correction(predictor, correction, job_ids)


def models_predictor_and_correction(
    predictor: Predictor, correction: CorrectionPolicy, job_ids: np.ndarray,
) -> bool:
    """Do the compiled loops (this one's and the SLURM model's) model this predictor and this
    correction on these jobs (module doc)?"""
    if type(correction) not in CORRECTION_KINDS or predictor_kind(predictor) is None:
        return False
    if isinstance(correction, SurvivalCorrection) and not correction.history.is_empty():
        return False  # a history from before (the daemon's): the kernel starts from none
    return len(np.unique(job_ids)) == len(job_ids)


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


@dataclass
class PredictorArrays:
    """What the kernel reads of the predictor: per job, its user's row and (learner) the local
    time of its submission or (clairvoyant) its oracle runtime; the learner's NAG table, step
    constants and features, and the pool of pending rows; AVE2's histories. Empty arrays stand
    for what the predictor does not use (the kernel's signature is one for all)."""

    user_row: np.ndarray
    local_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    oracle_s: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_two: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    nag_table: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))
    constants: np.ndarray = field(default_factory=lambda: np.zeros(1))
    factor: float = 0.0
    users: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    pool: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    slots: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    steps: int = 0
    n_sum: np.ndarray = field(default_factory=lambda: np.zeros(1))
    abs_negative: int = 0
    outlier_after: int = 0

    @classmethod
    def of(
        cls, predictor: Predictor, kind: int, job_ids: np.ndarray, submit_s: np.ndarray,
        distinct_users: np.ndarray, first_seen: np.ndarray, user_row: np.ndarray,
    ) -> PredictorArrays:
        if kind == K.CLAIRVOYANT:
            runtimes = predictor._runtimes_s  # type: ignore[attr-defined]
            return cls(user_row, oracle_s=np.fromiter(
                (runtimes[job_id] for job_id in job_ids.tolist()), dtype=np.int64,
                count=len(job_ids)))
        if kind == K.AVE2:
            last_two = np.full((len(distinct_users), 2), -1, dtype=np.int64)
            histories = predictor._last_two_s  # type: ignore[attr-defined]
            for row, user_id in enumerate(distinct_users.tolist()):
                history = histories.get(user_id)
                if history is not None:
                    last_two[row] = (history[0], -1 if history[1] is None else history[1])
            return cls(user_row, last_two=last_two)
        if kind != K.LEARNED:
            return cls(user_row)
        from hpcpredict.learn.predictor import OUTLIER_AFTER_STEPS, OUTLIER_SCALE_FACTOR

        learner: LearnedPredictor = predictor  # type: ignore[assignment]
        features = learner.features
        # Each user's row of the learner's features, made in the order users first appear, as
        # the Python loop makes them (zeroed, as at a first submission), before the replay, so
        # that the kernel never grows the table.
        rows = np.zeros(len(distinct_users), dtype=np.int64)
        for k in np.argsort(first_seen).tolist():
            rows[k] = features._row(int(distinct_users[k]))
        nag = learner.nag
        return cls(
            rows[user_row], local_s=features._clock.local_seconds(submit_s),
            nag_table=nag.table, constants=learner._step_constants, factor=OUTLIER_SCALE_FACTOR,
            users=features.table, pool=np.zeros((_FIRST_POOL_ROWS, nag.n_coords)),
            slots=np.zeros((_FIRST_POOL_ROWS, SLOT_COLUMNS)), steps=nag.state.t,
            n_sum=np.array([nag.state.n_sum]), abs_negative=int(learner._abs_negative),
            outlier_after=OUTLIER_AFTER_STEPS)

    def write_back(self, predictor: Predictor, kind: int, distinct_users: np.ndarray,
                   steps: int) -> None:
        """Leave in the predictor's objects what the kernel kept in arrays: NAG's t and N (its
        table and the features were updated in place), AVE2's histories."""
        if kind == K.LEARNED:
            state = predictor.nag.state  # type: ignore[attr-defined]
            state.t = steps
            state.n_sum = float(self.n_sum[0])
        elif kind == K.AVE2:
            histories = predictor._last_two_s  # type: ignore[attr-defined]
            for row, user_id in enumerate(distinct_users.tolist()):
                last, previous = self.last_two[row].tolist()
                if last >= 0:
                    histories[user_id] = (last, None if previous < 0 else previous)


@dataclass
class SurvivalArrays:
    """SURVIVAL's history as `replay_kernel` holds it (its HISTORY_* layout); one row and no
    window when the correction is another."""

    history: np.ndarray
    links: np.ndarray
    links_first: np.ndarray
    min_history: int = 1
    quantile: float = 0.5

    @classmethod
    def of(cls, correction: CorrectionPolicy, users: int, jobs: int) -> SurvivalArrays:
        if not isinstance(correction, SurvivalCorrection):
            return cls(np.zeros((1, K.HISTORY_RUNS + 1), dtype=np.int64),
                       np.full((2, 1), -1, dtype=np.int64), np.full(1, -1, dtype=np.int64))
        return cls(np.zeros((users, K.HISTORY_RUNS + correction.history.window), dtype=np.int64),
                   np.full((2, max(jobs, 1)), -1, dtype=np.int64), np.full(users, -1, dtype=np.int64),
                   correction.min_history, correction.quantile)

    def write_back(self, correction: CorrectionPolicy, distinct_users: np.ndarray,
                   estimated: int, fallbacks: int) -> None:
        """Leave in the correction what the Python loop's would hold: its counts, and each user's
        last runtimes, oldest first, the users in the order of their first end (every job has
        ended: nobody runs), through the history's own `load_state`."""
        if not isinstance(correction, SurvivalCorrection):
            return
        correction.estimated += estimated
        correction.fallbacks += fallbacks
        window = correction.history.window
        ended = np.flatnonzero(self.history[:, K.HISTORY_COUNT] > 0)
        rows = []
        for row in ended[np.argsort(self.history[ended, K.HISTORY_FIRST_END], kind="stable")].tolist():
            count, place = int(self.history[row, K.HISTORY_COUNT]), int(self.history[row, K.HISTORY_NEXT])
            runs = self.history[row, K.HISTORY_RUNS:].tolist()
            in_order = runs[:count] if count < window else runs[place:] + runs[:place]
            rows.extend((int(distinct_users[row]), run_s, 0) for run_s in in_order)
        correction.load_state({"ended": np.array(rows, dtype=np.int64).reshape(-1, 3)})


def replay(
    machine: Machine, scheduler: Scheduler, predictor: Predictor, correction: CorrectionPolicy,
    progress: Callable[[int], None] | None, progress_every: int,
) -> ReplayColumns:
    """Replay in the compiled loop (the configuration must be `covered`), reporting progress as
    the Python loop does (every `progress_every` jobs finished, then the total)."""
    count = len(machine.job_ids)
    kind = predictor_kind(predictor)
    guard = scheduler.guard is not None
    int64 = np.int64
    # Users numbered by id (AVE2's rows; the learner's are its features' own).
    distinct_users, first_seen, user_row = np.unique(machine.user_ids, return_index=True,
                                                     return_inverse=True)
    arrays = PredictorArrays.of(predictor, kind, machine.job_ids, machine.submit_s,
                                distinct_users, first_seen, user_row.astype(int64))
    jobs = JobArrays.empty(count)
    heap = np.zeros((3, max(count, 1)), dtype=int64)
    unpinned = np.zeros(max(count, 1), dtype=int64)
    unpinned_at = np.full(count, -1, dtype=int64)
    state = np.zeros(K.STATE_SIZE, dtype=int64)
    state[K.STEPS_AT] = arrays.steps
    config = np.zeros(K.CONFIG_SIZE, dtype=int64)
    config[K.PREDICTOR_AT] = kind
    config[K.CORRECTION_AT] = CORRECTION_KINDS[type(correction)]
    config[K.ORDER_AT] = _ORDERS[scheduler.backfill_order]
    config[K.GUARD_AT] = guard
    config[K.PROMISE_AT] = guard and scheduler.guard.rule == "promise"
    config[K.ABS_NEGATIVE_AT] = arrays.abs_negative
    config[K.OUTLIER_AFTER_AT] = arrays.outlier_after
    survival = SurvivalArrays.of(correction, len(distinct_users), count)
    config[K.SURVIVAL_MIN_AT] = survival.min_history
    history_row = user_row.astype(int64)
    steps_s = np.array(INCREMENTAL_STEPS_S, dtype=int64)
    profile = machine.profile
    by_request = machine.by_request if machine.by_request is not None else profile

    def replay_until(stop_at: int, pool: np.ndarray, slots: np.ndarray, free_rows: np.ndarray) -> int:
        return K.replay(
            machine.submit_s, machine.run_s, machine.procs, machine.requested_s, arrays.user_row,
            arrays.local_s,
            arrays.oracle_s, machine.queue, profile, by_request,
            arrays.nag_table, arrays.constants, arrays.factor, arrays.users, slots, pool,
            jobs.pool_of, free_rows, arrays.last_two,
            jobs.start_s, jobs.prediction_s, jobs.initial_s, jobs.corrections, jobs.backfilled,
            jobs.first_reserved_s, heap, unpinned, unpinned_at, state, arrays.n_sum, config,
            steps_s, stop_at,
            history_row, survival.history, survival.links, survival.links_first, survival.quantile,
        )

    run_loop(replay_until, state, K.FINISHED_AT, K.FREE_ROWS_AT, arrays.pool, arrays.slots, count,
             progress, progress_every, lambda status: _raise(machine, correction, status, state))
    arrays.write_back(predictor, kind, distinct_users, int(state[K.STEPS_AT]))
    survival.write_back(correction, distinct_users, int(state[K.ESTIMATED_AT]),
                        int(state[K.FALLBACKS_AT]))
    return jobs.columns()


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
