"""Scheduling decisions: FCFS, EASY and EASY-SJBF backfilling (docs/method.md §7).

A scheduler decides which waiting jobs start now; it never predicts and never touches the event
queue. Each decision is applied at once through the `start` callback, because a start changes what
fits next. EASY-SJBF is EASY with another backfilling order (a sort key), nothing else.

EASY rule, as in the reference's CPU-snapshot implementation: start jobs from the head of the
queue while they fit; reserve the first that does not at the shadow time (earliest predicted time
at which enough processors are free); then, in backfilling order, start any other waiting job that
fits now and either ends (by its prediction) by the shadow time or uses no more than the extra
processors left at the shadow time. Backfilled jobs running past the shadow time consume the extra.

Why the scan is vectorised: a backfilling pass visits the whole queue (hundreds to thousands of
jobs on CEA-Curie) at every event. Starting a job only lowers the free and extra processors, so a
job that is not eligible stays so for the rest of the pass; the pass is therefore exactly "start
the first eligible job in backfilling order, repeat", and "first eligible" is a numpy reduction
over the waiting window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hpcpredict.sim.profile import RunningProfile

_NO_KEY = np.iinfo(np.int64).max


class WaitingQueue:
    """Waiting jobs, in submission order, as compact numpy arrays for vectorised scans.

    Job indices are assigned in submission order and jobs are submitted in index order, so the
    index is the FCFS order and the tie-breaker of every other order (the reference's stable sort
    of a list kept in submission order). `sjbf_key` packs (prediction, index) in one int64 for
    shortest-prediction-first order. Removal only clears `is_waiting`; the compact list of
    candidates is rebuilt when more than half of it is stale, so each job costs O(1) amortised.
    """

    __slots__ = ("procs", "prediction_s", "sjbf_key", "is_waiting", "_order", "_size", "count")

    def __init__(self, procs: np.ndarray) -> None:
        size = len(procs)
        self.procs = procs
        self.prediction_s = np.zeros(size, dtype=np.int64)
        self.sjbf_key = np.full(size, _NO_KEY, dtype=np.int64)
        self.is_waiting = np.zeros(size, dtype=bool)
        self._order = np.empty(max(16, min(size, 1024)), dtype=np.int64)  # indices, ascending
        self._size = 0  # used length of _order, stale entries included
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, job: int, prediction_s: int) -> None:
        if self._size and job <= self._order[self._size - 1]:
            raise AssertionError(f"job {job} submitted out of order")
        if self._size == len(self._order):
            self._compact()
            if self._size == len(self._order):
                self._order = np.concatenate([self._order, np.empty_like(self._order)])
        self._order[self._size] = job
        self._size += 1
        self.prediction_s[job] = prediction_s
        self.sjbf_key[job] = (prediction_s << 32) | job
        self.is_waiting[job] = True
        self.count += 1

    def remove(self, job: int) -> None:
        self.is_waiting[job] = False
        self.count -= 1

    def head(self) -> int:
        """The oldest waiting job (the queue must not be empty)."""
        order, is_waiting = self._order, self.is_waiting
        for position in range(self._size):
            job = int(order[position])
            if is_waiting[job]:
                if position > 64:  # many stale entries in front: drop them
                    self._compact()
                return job
        raise IndexError("head of an empty queue")

    def candidates(self) -> np.ndarray:
        """Indices of the waiting jobs (maybe with some stale ones), in submission order."""
        if self._size - self.count > max(64, self.count):
            self._compact()
        return self._order[: self._size]

    def _compact(self) -> None:
        order = self._order[: self._size]
        kept = order[self.is_waiting[order]]
        self._order[: len(kept)] = kept
        self._size = len(kept)

    def waiting_jobs(self) -> list[int]:
        """Waiting job indices in submission order (for tests and reports)."""
        order = self._order[: self._size]
        return [int(job) for job in order[self.is_waiting[order]]]


StartJob = Callable[[int, bool], None]  # (job index, backfilled?)


@dataclass(frozen=True)
class Scheduler:
    """A backfilling policy. `backfill_order` None means no backfilling (FCFS)."""

    name: str
    backfill_order: str | None  # None | "fcfs" | "shortest_prediction"

    def schedule(
        self, now_s: int, waiting: WaitingQueue, profile: RunningProfile, start: StartJob
    ) -> Reservation | None:
        """Start every job the policy starts at `now_s`, in start order.

        Returns the head's reservation as it stands after backfilling (None if there is none),
        which stays valid until the running profile changes.
        """
        free = profile.free_now(now_s)
        procs = waiting.procs
        while waiting.count:
            head = waiting.head()
            if procs[head] > free:
                break
            free -= int(procs[head])
            start(head, False)
        if self.backfill_order is None or waiting.count == 0:
            return None
        head = waiting.head()
        shadow_s, extra = profile.reservation(int(procs[head]), now_s)
        if waiting.count > 1 and free > 0:
            extra = self._backfill(now_s, waiting, head, free, shadow_s, extra, start)
        return Reservation(head, shadow_s, extra)

    def _backfill(
        self,
        now_s: int,
        waiting: WaitingQueue,
        head: int,
        free: int,
        shadow_s: int,
        extra: int,
        start: StartJob,
    ) -> int:
        """Backfill around the head's reservation; returns the extra processors left."""
        jobs = waiting.candidates()
        procs = waiting.procs[jobs]
        eligible = waiting.is_waiting[jobs] & (procs <= free) & (jobs != head)
        if not eligible.any():
            return extra
        ends_by_shadow = (waiting.prediction_s[jobs] + now_s) <= shadow_s
        eligible &= ends_by_shadow | (procs <= extra)
        keys = waiting.sjbf_key[jobs] if self.backfill_order == "shortest_prediction" else None
        while True:
            if keys is None:
                position = int(eligible.argmax())
            else:
                position = int(np.where(eligible, keys, _NO_KEY).argmin())
            if not eligible[position]:
                return extra
            need = int(procs[position])
            start(int(jobs[position]), True)
            free -= need
            if not ends_by_shadow[position]:
                extra -= need
            if free == 0:
                return extra
            eligible[position] = False
            eligible &= (procs <= free) & (ends_by_shadow | (procs <= extra))

    def consider_new_job(
        self,
        now_s: int,
        waiting: WaitingQueue,
        profile: RunningProfile,
        reservation: Reservation,
        job: int,
        start: StartJob,
    ) -> Reservation:
        """Decide for a newly submitted job when nothing else changed since the last decision.

        Then every other waiting job is exactly as (in)eligible as at that decision, the head and
        its reservation are unchanged, and the only possible start is the new job's: the same
        decision a full pass would take (the simulation checks when this holds).
        """
        if self.backfill_order is None:
            return reservation
        need = int(waiting.procs[job])
        if need > profile.free_now(now_s):
            return reservation
        if now_s + int(waiting.prediction_s[job]) <= reservation.shadow_s:
            start(job, True)
            return reservation
        if need <= reservation.extra:
            start(job, True)
            return Reservation(reservation.head, reservation.shadow_s, reservation.extra - need)
        return reservation


@dataclass(frozen=True, slots=True)
class Reservation:
    """EASY's promise to the head job: it starts by `shadow_s`; `extra` processors spare then."""

    head: int
    shadow_s: int
    extra: int


SCHEDULERS: dict[str, Scheduler] = {
    scheduler.name: scheduler
    for scheduler in (
        Scheduler("fcfs", None),
        Scheduler("easy", "fcfs"),
        Scheduler("easy-sjbf", "shortest_prediction"),
    )
}
