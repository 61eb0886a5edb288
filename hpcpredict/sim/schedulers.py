"""Scheduling decisions: FCFS, EASY and EASY-SJBF backfilling (method.md §7).

A scheduler is a decision function: given the time, the waiting queue, the running profile and
the jobs' current predictions, it returns the jobs to start now, in start order. It never predicts
and never mutates the engine; the simulation applies its decisions. EASY-SJBF is EASY with a
different backfilling order (a sort key), nothing else.

EASY rule, as in the reference's CPU-snapshot implementation: start jobs from the head of the
queue while they fit; reserve the first that does not at the shadow time (earliest predicted time
enough processors are free); then start any other waiting job that fits now and either ends (by
its prediction) by the shadow time or uses no more than the extra processors left at the shadow
time. Backfilled jobs that run past the shadow time consume the extra processors.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hpcpredict.sim.profile import RunningProfile


class WaitingQueue:
    """Waiting jobs (indices into the simulation's arrays) in submission order and by prediction.

    Job indices are assigned in submission order, so the index is the FCFS tie-breaker
    everywhere (the reference's stable sort of a list kept in submission order).
    """

    __slots__ = ("_fcfs", "_by_prediction")

    def __init__(self) -> None:
        self._fcfs: dict[int, None] = {}  # insertion-ordered set
        self._by_prediction: list[tuple[int, int]] = []  # (prediction_s, job index), sorted

    def __len__(self) -> int:
        return len(self._fcfs)

    def __bool__(self) -> bool:
        return bool(self._fcfs)

    def add(self, job: int, prediction_s: int) -> None:
        self._fcfs[job] = None
        insort(self._by_prediction, (prediction_s, job))

    def remove(self, job: int, prediction_s: int) -> None:
        del self._fcfs[job]
        position = bisect_left(self._by_prediction, (prediction_s, job))
        del self._by_prediction[position]

    def head(self) -> int:
        return next(iter(self._fcfs))

    def fcfs(self) -> Iterable[int]:
        return self._fcfs.keys()

    def shortest_prediction_first(self) -> Iterable[int]:
        return (job for _, job in self._by_prediction)


@dataclass(frozen=True)
class Scheduler:
    """A backfilling policy. `backfill_order` None means no backfilling (FCFS)."""

    name: str
    backfill_order: str | None  # None | "fcfs" | "shortest_prediction"

    def select(
        self,
        now_s: int,
        waiting: WaitingQueue,
        profile: RunningProfile,
        procs: Sequence[int],
        prediction_s: Sequence[int],
    ) -> list[int]:
        """Jobs to start at `now_s`, head-of-queue starts first, then backfilled ones.

        `profile` is not modified; the caller starts the returned jobs in order.
        """
        free = profile.free_now(now_s)
        started: list[int] = []
        queue = iter(waiting.fcfs())
        head = -1
        for job in queue:
            if procs[job] > free:
                head = job
                break
            started.append(job)
            free -= procs[job]
        if head < 0 or self.backfill_order is None or free == 0:
            return started
        if len(waiting) - len(started) <= 1:
            return started
        pending = [(now_s + prediction_s[job], procs[job]) for job in started]
        shadow_s, extra = profile.reservation(procs[head], now_s, pending)
        taken = set(started)
        taken.add(head)
        order = waiting.fcfs() if self.backfill_order == "fcfs" else waiting.shortest_prediction_first()
        for job in order:
            need = procs[job]
            if need > free or job in taken:
                continue
            if now_s + prediction_s[job] > shadow_s:
                if need > extra:
                    continue
                extra -= need
            started.append(job)
            free -= need
            if free == 0:
                break
        return started


SCHEDULERS: dict[str, Scheduler] = {
    scheduler.name: scheduler
    for scheduler in (
        Scheduler("fcfs", None),
        Scheduler("easy", "fcfs"),
        Scheduler("easy-sjbf", "shortest_prediction"),
    )
}
