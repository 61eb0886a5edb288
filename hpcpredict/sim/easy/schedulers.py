"""Scheduling decisions: FCFS, EASY and EASY-SJBF backfilling (docs/method.md §7).

A scheduler decides which waiting jobs start now; it never predicts and never touches the event
queue. Each decision is applied at once through the `start` callback, because a start changes what
fits next. EASY-SJBF is EASY with another backfilling order (a sort key), nothing else.

EASY rule, as in the reference's CPU-snapshot implementation: start jobs from the head of the
queue while they fit; reserve the first that does not at the shadow time (earliest predicted time
at which enough processors are free); then, in backfilling order, start any other waiting job that
fits now and either ends (by its prediction) by the shadow time or uses no more than the extra
processors left at the shadow time. Backfilled jobs running past the shadow time consume the extra.

Why the scan is compiled: a backfilling pass visits the whole queue (hundreds to thousands of
jobs on CEA-Curie) at every event, so it is one numba loop over the waiting queue's arrays
(`backfill_kernel.py`, which says why one pass in backfilling order decides what "start the
first eligible job, repeat" decides).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hpcpredict.sim.easy.backfill_kernel import (
    GUARD_DUE_ROW,
    NO_BACKFILLING,
    PREDICTION_ROW,
    PROCS_ROW,
    PROMISED_ROW,
    QUEUE_ROWS,
    REQUESTED_ROW,
    SHORTEST_FIRST,
    SJBF_KEY_ROW,
    STARTED_ROW,
    CANDIDATES_ROW,
    ESTIMATE_DUE_ROW,
    ESTIMATE_ROW,
    ESTIMATED,
    ESTIMATES_AS_LIMITS,
    GUARDED,
    NO_ESTIMATES,
    UNGUARDED,
    SUBMISSION_ORDER,
    ENDED_NOT_RUNNING,
    WAITING_ROW,
    WORK_ROW,
    consider_new_job_pass,
    schedule_pass,
)
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.sim.easy.backfill_orders import BACKFILL_ORDERS
from hpcpredict.sim.engine.profile import RunningProfile, never_fits
from hpcpredict.sim.engine.profile_kernel import NEVER

_NO_KEY = np.iinfo(np.int64).max
# WaitingQueue's attributes that are views of its table's rows (rebound after a copy):
# is_waiting is 1 while waiting, else 0; work is the backfilling pass's scratch space.
_ROW_VIEWS = {
    "procs": PROCS_ROW, "prediction_s": PREDICTION_ROW, "requested_s": REQUESTED_ROW,
    "sjbf_key": SJBF_KEY_ROW, "is_waiting": WAITING_ROW, "work": WORK_ROW,
    "guard_due_s": GUARD_DUE_ROW, "promised": PROMISED_ROW, "started": STARTED_ROW,
    "_order": CANDIDATES_ROW, "estimate_s": ESTIMATE_ROW, "estimate_due_s": ESTIMATE_DUE_ROW,
}
# Memoryviews of five of those rows and of the candidate list, rebuilt with them (never pickled).
_MEMORY_VIEWS = ("_prediction_view", "_key_view", "_waiting_view", "_guard_due_view", "_order_view",
                 "_estimate_view")


class WaitingQueue:
    """Waiting jobs, in submission order, as compact numpy arrays for vectorised scans.

    Job indices are assigned in submission order and jobs are submitted in index order, so the
    index is the FCFS order and the tie-breaker of every other order (the reference's stable sort
    of a list kept in submission order). `sjbf_key` packs (prediction, index) in one int64 for
    shortest-prediction-first order. Removal only clears `is_waiting`; each backfilling pass
    drops the stale entries of the list of candidates as it reads them (`started_by_pass`), so
    each job costs O(1) amortised; the list is a row of the table, as long as the jobs (each is
    added once), so it never grows (docs/journal/performance-2026-11.md, "Issue 31, round 3: the
    scheduling pass compiled").
    """

    __slots__ = (
        "table", "_size", "_sorted", "count", "_head", "procs_list", "prediction_list",
        "waiting_list", "requested_list", "submit_list", "_last_added", "_submit_array",
        *_ROW_VIEWS, *_MEMORY_VIEWS,
    )

    def __init__(
        self,
        procs: np.ndarray,
        requested_s: np.ndarray | None = None,
        submit_s: list[int] | None = None,
    ) -> None:
        size = len(procs)
        # Per job index, one int64 table for the compiled backfilling pass (one array to
        # dispatch instead of six, `backfill_kernel`); the named attributes are its rows.
        self.table = np.zeros((QUEUE_ROWS, size), dtype=np.int64)
        self._bind_rows()
        self.procs[:] = procs
        # Requested times and submit times, read only by the starvation guard.
        if requested_s is not None:
            self.requested_s[:] = requested_s
        self.requested_list: list[int] = self.requested_s.tolist()
        self.submit_list: list[int] = submit_s if submit_s is not None else [0] * size
        # When the starvation guard falls due for each job (`Scheduler.guard_due`; the row
        # `promised` says whether the "promise" rule has fixed it yet: it does so once, when the
        # job is first the head).
        self.guard_due_s[:] = self.submit_list  # `set_guard_wait` sets them
        self._submit_array: np.ndarray | None = None  # (`_submits`)
        self.sjbf_key[:] = _NO_KEY
        # The candidates: the table's row `_order`, its first `_size` entries (stale ones
        # included), in submission order, or for SJBF the first `_sorted` in key order (the
        # backfilling pass leaves them so) and the jobs submitted since behind them.
        self._size = 0
        self._sorted = 0
        self._last_added = -1  # the last job added (jobs come in index order)
        self.count = 0
        # Lowest job index that may still be waiting. Jobs arrive in index order, so the head
        # (the lowest waiting index) only ever moves forward: a cursor finds it in O(1)
        # amortised, without reading numpy scalars from the compact list at every decision.
        self._head = 0
        # Plain-list mirrors of procs, prediction_s and is_waiting: reading one element of a
        # numpy array from Python costs about ten times a list's, and the head's start, the
        # guard and a lone new submission (Scheduler.consider_new_job) read single elements;
        # the arrays are for the compiled backfilling pass.
        self.procs_list: list[int] = self.procs.tolist()
        self.prediction_list: list[int] = [0] * size
        self.waiting_list: list[bool] = [False] * size

    def set_guard_wait(self, wait_s: int | np.ndarray) -> None:
        """The starvation guard falls due once a job has waited `wait_s`, one for all or one per
        job (earlier under the "promise" rule: `Scheduler.schedule`)."""
        self.guard_due_s[:] = self._submits() + wait_s

    def set_estimate_wait(self, wait_s: int | np.ndarray) -> None:
        """The guard's estimate stage falls due once a job has waited `wait_s`, one for all or
        one per job (the estimates themselves are written by `Simulation`)."""
        self.estimate_due_s[:] = self._submits() + wait_s

    def _submits(self) -> np.ndarray:
        """The submit times as an array, built the first time a guard's due times need it."""
        if self._submit_array is None:
            self._submit_array = np.asarray(self.submit_list, dtype=np.int64)
        return self._submit_array

    @property
    def guard_due_list(self) -> list[int]:
        """When the starvation guard falls due for each job, as a list."""
        return self.guard_due_s.tolist()

    def _bind_rows(self) -> None:
        """The named arrays (`_ROW_VIEWS`) as views of the table's rows, and the memoryviews
        `add` and `remove` write through (`_MEMORY_VIEWS`)."""
        for name, row in _ROW_VIEWS.items():
            setattr(self, name, self.table[row])
        self._prediction_view = memoryview(self.prediction_s)
        self._key_view = memoryview(self.sjbf_key)
        self._waiting_view = memoryview(self.is_waiting)
        self._guard_due_view = memoryview(self.guard_due_s)
        self._estimate_view = memoryview(self.estimate_s)
        self._order_view = memoryview(self._order)

    def __getstate__(self) -> dict[str, object]:
        """Pickle and deepcopy would turn the row views into copies apart from the table (the
        pass would read stale rows): the copy binds its rows to its own table again."""
        return {name: getattr(self, name) for name in self.__slots__
                if name not in _ROW_VIEWS and name not in _MEMORY_VIEWS}

    def __setstate__(self, saved: dict[str, object]) -> None:
        for name, value in saved.items():
            setattr(self, name, value)
        self._bind_rows()

    def __len__(self) -> int:
        return self.count

    def add(self, job: int, prediction_s: int) -> None:
        # The arrays are written through memoryviews: an element written from Python costs
        # about half what numpy's item assignment costs (once per submission and per start).
        if job <= self._last_added:
            raise AssertionError(f"job {job} submitted out of order")
        self._last_added = job
        self._order_view[self._size] = job  # (each job once: the row is long enough)
        self._size += 1
        self._prediction_view[job] = prediction_s
        self._key_view[job] = (prediction_s << 32) | job
        self._waiting_view[job] = 1
        self.prediction_list[job] = prediction_s
        self.waiting_list[job] = True
        self.count += 1

    def remove(self, job: int) -> None:
        self._waiting_view[job] = 0
        self.waiting_list[job] = False
        self.count -= 1

    def started_by_pass(self, jobs: list[int], head: int, kept: int, by_key: bool) -> None:
        """`schedule_pass` started `jobs` (it cleared their waiting row), moved the head cursor
        to `head` and, when `kept` >= 0, kept that many candidates (in key order if `by_key`)."""
        waiting = self.waiting_list
        for job in jobs:
            waiting[job] = False
        self.count -= len(jobs)
        self._head = head
        if kept >= 0:
            self._size = kept
            self._sorted = kept if by_key else 0

    def started_alone(self, job: int) -> None:
        """`consider_new_job_pass` started `job` (it cleared its waiting row)."""
        self.waiting_list[job] = False
        self.count -= 1

    def head(self) -> int:
        """The oldest waiting job (the queue must not be empty)."""
        if not self.count:
            raise IndexError("head of an empty queue")
        is_waiting, job = self.waiting_list, self._head
        while not is_waiting[job]:
            job += 1
        self._head = job
        return job

    def candidates(self) -> np.ndarray:
        """Indices of the waiting jobs (maybe with some stale ones), in submission order (or,
        after SJBF passes, partly in key order: `prepare_candidates`); the stale entries are
        dropped first when more than a fifth of the list is stale."""
        if self._size - self.count > max(4, self.count // 4):
            self._compact()
        self.prepare_candidates(False)
        return self._order[: self._size]

    def prepare_candidates(self, by_key: bool) -> tuple[int, int]:
        """(how many candidates, how many of the first in key order) for a pass in key order
        (`by_key`) or in submission order. The stale entries stay: the pass drops them as it
        reads them (a separate compaction would read them too)."""
        if not by_key and self._sorted:  # (a queue that served an SJBF pass before)
            self._order[: self._size].sort()
            self._sorted = 0
        return self._size, self._sorted

    def _compact(self) -> None:
        order = self._order[: self._size]
        waiting = self.is_waiting[order] != 0
        kept = order[waiting]
        self._sorted = int(np.count_nonzero(waiting[: self._sorted]))  # order is kept
        self._order[: len(kept)] = kept
        self._size = len(kept)



# (job index, backfilled?): told once the scheduler has moved the job from the waiting queue
# into the running profiles, in start order.
StartJob = Callable[[int, bool], None]


@dataclass(frozen=True)
class Scheduler:
    """A backfilling policy. `backfill_order` None means no backfilling (FCFS).

    The starvation guard (`guard`, None: off). Backfilling with predictions breaks EASY's promise
    to the head job: a job backfilled because it was predicted to end before the head's shadow
    time outlives its prediction, the shadow slides, and it can slide again and again. Once the
    head has waited the guard's time (`GuardSettings.wait_s`, or less by its rule), its reservation is computed
    from the running jobs' *requested* ends (`requested_profile`) and a candidate must end by the
    shadow time by its *request*, or fit in the extra processors: plain EASY's rule, whose
    reservation cannot slide, since no job outlives its request. The head then starts by the
    shadow time of its first guarded decision at the latest; backfilling order is unchanged.

    What the guard costs is modelled as it works live, where the only lever is SLURM's time
    limits: after a guarded decision every job then running is planned to its requested end for
    good (the simulation pins it; the live corrector raises its limit back to the request and
    never lowers a running job's limit again), while waiting jobs go back to their predictions
    once no head is due (the corrector lowers pending jobs' limits again).
    """

    name: str
    backfill_order: str | None  # None | "fcfs" | "shortest_prediction"
    # The starvation guard (None: off): when it falls due for a head (its wait, or sooner by its
    # "promise" or "xfactor" rule) and its slack stage before that: from the time a head has
    # waited `guard.slack_after_s` until the guard is due for it, its reservation is on the
    # guard's profile (the running jobs' requests) as under the guard, but a candidate in front of
    # it is judged on its request less `guard.slack_s`, never below its prediction
    # (`corrections.starvation.guard_slack_estimate_s`), and planned so in both profiles, as the
    # live guard sets that as its time limit: each job started in front of a head in the stage can
    # delay it by at most the slack (`Simulation`: the estimates, their ends, the moves). The guard
    # itself, once due, is unchanged: plain EASY's rule.
    guard: GuardSettings | None = None

    def guard_due(self, now_s: int, waiting: WaitingQueue, head: int) -> bool:
        """Has `head` waited long enough for the starvation guard?"""
        return self.guard is not None and now_s >= waiting._guard_due_view[head]

    @property
    def has_estimate_stage(self) -> bool:
        return self.guard is not None and self.guard.slack_s is not None

    @property
    def estimate_planning(self) -> int:
        """How the slack stage plans the jobs started in it (backfill_kernel's NO_ESTIMATES,
        ESTIMATES_AS_LIMITS): the slack's estimates are the time limits the live daemon sets
        (`hpcpredict.slurm.guard`), one per job, so they plan both profiles."""
        return ESTIMATES_AS_LIMITS if self.has_estimate_stage else NO_ESTIMATES

    def guard_stage(self, now_s: int, waiting: WaitingQueue, head: int) -> int:
        """The guard stage `head` is in at `now_s` (backfill_kernel's UNGUARDED, GUARDED,
        ESTIMATED), as `schedule_pass` decides it."""
        if self.guard is None:
            return UNGUARDED
        if now_s >= waiting._guard_due_view[head]:
            return GUARDED
        if self.has_estimate_stage and now_s >= waiting.estimate_due_s[head]:
            return ESTIMATED
        return UNGUARDED

    def schedule(
        self,
        now_s: int,
        waiting: WaitingQueue,
        profile: RunningProfile,
        start: StartJob,
        requested_profile: RunningProfile | None = None,
        ended: tuple[int, int, int] | None = None,
    ) -> Reservation | None:
        """Start every job the policy starts at `now_s`, in start order.

        Returns the head's reservation as it stands after backfilling (None if there is none),
        which stays valid until the running profile changes. `requested_profile` (the running
        jobs by requested end) is needed when the starvation guard is on. `ended` (job,
        predicted end, requested end): a job that ended at `now_s`, taken out of the running
        profiles first (a termination's decision, in the same compiled call).

        The pass is one compiled call (`backfill_kernel.schedule_pass`): it moves the jobs it
        starts from the waiting queue into the running profiles; `start` is then told of each,
        in start order. Under the "promise" rule, the first time a job is the head, when the
        guard falls due for it is fixed at plain EASY's promise (its shadow time on the running
        jobs' requests, which cannot slide), unless its wait reaches the guard's `wait_s` first.
        """
        guard = self.guard is not None
        if guard and requested_profile is None:
            raise ValueError("the starvation guard needs the running jobs by requested end")
        order = _PASS_ORDERS[self.backfill_order]
        ended_job, ended_end_s, ended_request_end_s = ended if ended is not None else _NOTHING_ENDED
        by_key = order == SHORTEST_FIRST
        candidate_count, sorted_count = waiting.prepare_candidates(by_key)
        head, count, from_head, kept, reserved, shadow_s, extra, guarded = schedule_pass(
            waiting.table, candidate_count, sorted_count, profile.table,
            requested_profile.table if guard else profile.table,
            now_s, waiting._head, waiting.count, order, guard, guard and self.guard.rule == "promise",
            self.estimate_planning, ended_job, ended_end_s, ended_request_end_s,
        )
        if reserved == ENDED_NOT_RUNNING:
            raise KeyError(f"job {ended_job} with predicted end {ended_end_s} (requested end "
                           f"{ended_request_end_s}) is not running")
        if count:
            jobs = waiting.started[:count].tolist()
            waiting.started_by_pass(jobs, head, kept, by_key)
            for position, job in enumerate(jobs):
                start(job, position >= from_head)
        else:
            waiting.started_by_pass([], head, kept, by_key)
        if not reserved:
            return None
        if shadow_s == NEVER:
            raise never_fits(waiting.procs_list[head], profile.total_procs)
        return Reservation(head, shadow_s, extra, guarded)

    def consider_new_job(
        self,
        now_s: int,
        waiting: WaitingQueue,
        profile: RunningProfile,
        reservation: Reservation,
        job: int,
        start: StartJob,
        requested_profile: RunningProfile | None = None,
    ) -> Reservation:
        """Decide for a newly submitted job when nothing else changed since the last decision.

        Then every other waiting job is exactly as (in)eligible as at that decision, the head and
        its reservation are unchanged, and the only possible start is the new job's: the same
        decision a full pass would take (the simulation checks when this holds). A job started
        moves from the waiting queue into the running profiles, as in a full pass, and `start`
        is told.
        """
        if self.backfill_order is None:
            return reservation
        guard = self.guard is not None
        if guard and requested_profile is None:
            raise ValueError("the starvation guard needs the running jobs by requested end")
        started, extra = consider_new_job_pass(
            waiting.table, profile.table, requested_profile.table if guard else profile.table,
            now_s, job, reservation.shadow_s, reservation.extra, reservation.guarded, guard,
            self.estimate_planning,
        )
        if not started:
            return reservation
        waiting.started_alone(job)
        start(job, True)
        if extra == reservation.extra:
            return reservation
        return Reservation(reservation.head, reservation.shadow_s, extra, reservation.guarded)


class Reservation(NamedTuple):
    """EASY's promise to the head job: it starts by `shadow_s`; `extra` processors spare then.

    A named tuple rather than a frozen dataclass: one is made at every scheduling decision, and
    a frozen dataclass's __init__ (object.__setattr__ per field) cost ~2% of a learned replay.
    """

    head: int
    shadow_s: int
    extra: int
    # The head's guard stage (backfill_kernel's UNGUARDED 0, GUARDED, ESTIMATED): truthy when the
    # reservation is on the guard's profile.
    guarded: int = UNGUARDED


_NOTHING_ENDED = (-1, 0, 0)
_PASS_ORDERS = {None: NO_BACKFILLING, "fcfs": SUBMISSION_ORDER,
                "shortest_prediction": SHORTEST_FIRST}

SCHEDULERS: dict[str, Scheduler] = {name: Scheduler(name, order) for name, order in BACKFILL_ORDERS.items()}
