"""The daemon's store writer: one thread that runs every database write, in arrival order.

Why a thread of its own: a transaction costs about a millisecond on SQLite and more on
PostgreSQL, may wait ``busy_timeout`` (5 s) for a reader holding the file, and a burst of 3,000
ENDs or 8,000 spooled reports is seconds of them. Run on the asyncio loop, that stalled every
PREDICT past the SLURM plugin's 300 ms timeout. Here the loop only parses a request and hands the
event over; the answer is written when the writer has committed it (an event is acknowledged
only once durable, as before).

One thread, not a pool, as Home Assistant's recorder (homeassistant/components/recorder/core.py)
does: events are committed one at a time in the order they were handed over, so the log order,
the commit order and the learning order are one order (service.py: the model equals its
checkpoint plus the committed events replayed in log order).

Hand-offs: a socket event is a plain job in the queue (`run_soon`), not a
future with a done callback, and its answer comes back through a `LoopInbox`: the writer
appends it and wakes the loop only if the loop has not been woken for answers already, so
answers that pile up while the loop is busy (with PREDICTs, or a burst of events from many
clients) are delivered with one wake-up, and none waits for another event's commit. The
hand-offs are about a tenth of an event's CPU in the daemon; its SQL is most of the rest
(docs/performance.md).

Backpressure: the queue is bounded. `submit` and `run_soon` refuse a job past `max_backlog` with
`WriterBusyError` (the socket answers ``ERR busy``; jobcomp.lua spools such reports and the
daemon ingests them later, the plugin fails open), rather than letting the backlog, and the wait
of every client behind it, grow without limit. Threads that may wait (the SLURM watcher) pass
``wait_s`` and are held back instead.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

DEFAULT_MAX_BACKLOG = 1000  # tasks; about a second of events at ~1 ms each (docs/performance.md)
_T = TypeVar("_T")
_STOP = object()  # the sentinel that ends the thread once everything before it has run


class WriterBusyError(RuntimeError):
    """The writer's backlog is full: the task was not queued (the caller may retry later)."""


class WriterStoppedError(RuntimeError):
    """The writer is stopping or stopped: no new task is accepted."""


class StoreWriter:
    """A thread draining a bounded queue of jobs (callables), each run once, in order.

    `submit` queues a task and delivers its result or exception through a
    `concurrent.futures.Future` (the spool, the SLURM watcher); `run_soon` queues a job that
    delivers its own result (the socket's events, through a `LoopInbox`). A failing job never
    stops the thread.
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
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(task())
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits on the task
                future.set_exception(error)

        self.run_soon(job, wait_s=wait_s)
        return future

    def run_soon(self, job: Callable[[], None], *, wait_s: float = 0.0) -> None:
        """Queue `job`, which delivers its own result (and must not raise: what it raises is
        logged). Past the backlog bound: wait up to `wait_s` for room, then `WriterBusyError`."""
        if not self._accepting:
            raise WriterStoppedError("the daemon is stopping: no new event is accepted")
        try:
            if wait_s > 0:
                self._queue.put(job, timeout=wait_s)
            else:
                self._queue.put_nowait(job)
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
            job = self._queue.get()
            if job is _STOP:
                return
            if self._busy_since is not None and self._queue.qsize() < self.max_backlog // 2:
                logger.warning("the store writer's backlog drained after %.1f s (%d refused so far)",
                               time.monotonic() - self._busy_since, self.refused)
                self._busy_since = None
            try:
                job()  # type: ignore[operator]
            except BaseException:  # noqa: BLE001 - a job's own bug must not stop the writer
                logger.exception("a store writer job raised")


class LoopInbox:
    """Results handed from other threads (the store writer) to the event loop: `put` on the
    writer, each callback then runs on the loop with its result.

    One wake-up per batch: the loop is woken (``call_soon_threadsafe``, a write to its
    self-pipe) only when no wake-up is pending already; the results put meanwhile are run by that
    same wake-up. The flag is cleared before the loop drains, so a result put during the drain
    either is drained by it or wakes the loop again: none is left behind.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ready: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = collections.deque()
        self._woken = False

    def put(self, callback: Callable[..., None], *args: Any) -> None:
        """On any thread: run ``callback(*args)`` on the loop soon, after those put before."""
        self._ready.append((callback, args))
        if not self._woken:
            self._woken = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to answer
                self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._woken = False
        ready = self._ready
        while ready:
            callback, args = ready.popleft()
            try:
                callback(*args)
            except Exception:  # noqa: BLE001 - one bad callback must not strand the others
                logger.exception("a callback handed to the event loop raised")
