"""The daemon's store writer: one thread that runs every database write, in arrival order.

Why a thread of its own (issue 17): a transaction costs about a millisecond on SQLite and more on
PostgreSQL, may wait ``busy_timeout`` (5 s) for a reader holding the file, and a burst of 3,000
ENDs or 8,000 spooled reports is seconds of them. Run on the asyncio loop, that stalled every
PREDICT past the SLURM plugin's 300 ms timeout. Here the loop only parses a request and hands the
event over; the answer is written when the writer has committed it (an event is acknowledged
only once durable, as before).

One thread, not a pool, as Home Assistant's recorder (homeassistant/components/recorder/core.py)
does: events are committed one at a time in the order they were handed over, so the log order,
the commit order and the learning order are one order (service.py: the model equals its
checkpoint plus the committed events replayed in log order).

Backpressure: the queue is bounded. `submit` refuses a task past `max_backlog` with
`WriterBusyError` (the socket answers ``ERR busy``; jobcomp.lua spools such reports and the
daemon ingests them later, the plugin fails open), rather than letting the backlog, and the wait
of every client behind it, grow without limit. Threads that may wait (the SLURM watcher) pass
``wait_s`` and are held back instead.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

DEFAULT_MAX_BACKLOG = 1000  # tasks; about a second of events at ~1 ms each (docs/performance.md)
_T = TypeVar("_T")
_STOP = object()  # the sentinel that ends the thread once everything before it has run


class WriterBusyError(RuntimeError):
    """The writer's backlog is full: the task was not queued (the caller may retry later)."""


class WriterStoppedError(RuntimeError):
    """The writer is stopping or stopped: no new task is accepted."""


class StoreWriter:
    """A thread draining a bounded queue of tasks (callables), each run once, in order.

    A task's result or exception is delivered through the `concurrent.futures.Future` that
    `submit` returns; a failing task never stops the thread.
    """

    def __init__(self, *, max_backlog: int = DEFAULT_MAX_BACKLOG, name: str = "hpcpredict-writer") -> None:
        if max_backlog < 1:
            raise ValueError(f"max_backlog must be >= 1 task, got {max_backlog}")
        self.max_backlog = max_backlog
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_backlog)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._accepting = False
        self._busy_since: float | None = None  # monotonic time the backlog was first found full
        self.refused = 0  # tasks refused because the backlog was full, since start

    @property
    def backlog(self) -> int:
        """Tasks queued and not started yet."""
        return self._queue.qsize()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    def start(self) -> None:
        self._accepting = True
        self._thread.start()

    def submit(self, task: Callable[[], _T], *, wait_s: float = 0.0) -> concurrent.futures.Future[_T]:
        """Queue `task`; its future. Past the backlog bound: wait up to `wait_s` for room (never
        on the event loop: it passes 0), then `WriterBusyError`."""
        if not self._accepting:
            raise WriterStoppedError("the daemon is stopping: no new event is accepted")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        try:
            if wait_s > 0:
                self._queue.put((task, future), timeout=wait_s)
            else:
                self._queue.put_nowait((task, future))
        except queue.Full:
            self.refused += 1
            if self._busy_since is None:  # one log line per busy period, not one per refusal
                self._busy_since = time.monotonic()
                logger.warning(
                    "the store writer's backlog is full (%d tasks): events are answered ERR busy "
                    "until it drains (is the database slow?)", self.max_backlog,
                )
            raise WriterBusyError(
                f"the daemon's store writer has {self.max_backlog} events waiting; retry later"
            ) from None
        return future

    def stop(self, timeout_s: float | None = None) -> bool:
        """Refuse new tasks, run those already queued, end the thread; False if it did not end
        within `timeout_s`."""
        if not self._accepting:
            return not self._thread.is_alive()
        self._accepting = False
        self._queue.put(_STOP)  # blocks while full: the tasks before it drain
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            task, future = item  # type: ignore[misc]
            if self._busy_since is not None and self._queue.qsize() < self.max_backlog // 2:
                logger.warning("the store writer's backlog drained after %.1f s (%d refused so far)",
                               time.monotonic() - self._busy_since, self.refused)
                self._busy_since = None
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(task())
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the task
                future.set_exception(error)
