"""A discrete-event clock: a heap of (time, priority, sequence, payload), nothing about jobs.

`priority` encodes the order of events at the same instant and the monotonic sequence number
makes the rest of the order deterministic (first scheduled, first served), as in SimPy's core.
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Generic, TypeVar

Payload = TypeVar("Payload")


class EventQueue(Generic[Payload]):
    __slots__ = ("_heap", "_sequence")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Payload]] = []
        self._sequence = count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time_s: int, priority: int, payload: Payload) -> None:
        heapq.heappush(self._heap, (time_s, priority, next(self._sequence), payload))

    def peek(self) -> tuple[int, int] | None:
        """(time, priority) of the next event, or None when there is none."""
        if not self._heap:
            return None
        time_s, priority, _, _ = self._heap[0]
        return time_s, priority

    def pop(self) -> tuple[int, int, Payload]:
        time_s, priority, _, payload = heapq.heappop(self._heap)
        return time_s, priority, payload
