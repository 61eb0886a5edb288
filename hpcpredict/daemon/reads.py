"""Heavy admin reads in a process of their own, so that they never hold the daemon's GIL.

``GET /errors`` judges every live job the store holds (pandas over the ``jobs``, ``predictions``
and ``corrections`` tables, hpcpredict/daemon/errors.py): 0.25-0.35 s of CPU for 5,000 jobs here,
2.9 s for 14,000 in issue 17. Run in the HTTP thread, that is CPU time under the GIL the event
loop needs for every PREDICT: with ``GET /errors`` in a loop, connect-ask-close PREDICTs fell
from 7,400/s to 2,100/s, p99 from 4.7 to 14 ms, max 89 ms (docs/performance.md). A separate
process shares the machine's cores but not the GIL.

One worker, niced (`READ_WORKER_NICE`; reads wait for each other: an admin console does not need
more, and a loop of reads then costs the machine one core at most, lent by the daemon and the
plugin rather than taken from them), started on the first read with ``spawn`` (the daemon
has threads: ``fork`` would copy their locks mid-use), stopped with the daemon. The worker opens
the store from its URL for each read (a `Store` is cheap to open and side-effect free) and
answers JSON-ready records, so no ORM row or pandas object crosses the process boundary.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor

from sqlalchemy.engine import make_url

from hpcpredict.daemon.store import Store

READ_TIMEOUT_S = 120.0  # a read longer than this is answered 500; the worker finishes it anyway
# The worker's niceness: admin reads are background work. With GET /errors in a loop on the
# 2-core development machine, the worker at the daemon's priority took a core from the plugin's
# PREDICTs; niced, the kernel gives it what the daemon and slurmctld leave. Unlike the store
# writer (a thread: niced, it would be descheduled holding the GIL the loop waits for), it shares
# nothing with the daemon that the daemon could wait on.
READ_WORKER_NICE = 10


class ReadWorker:
    """`errors(...)` computed in the worker process (or in the caller's thread for an in-memory
    SQLite store, which another process cannot see)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # HTTP threads may ask together for the first time
        self._closed = False

    def errors(self, user_id: int | None, since_s: int | None) -> list[dict[str, object]]:
        """Per-user error statistics as JSON records (`errors.user_error_statistics`)."""
        if _in_memory(self.url):
            return user_error_records(self.url, user_id, since_s)
        return self._executor().submit(user_error_records, self.url, user_id, since_s).result(READ_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("the daemon is stopping")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=os.nice, initargs=(READ_WORKER_NICE,))
            return self._pool


def user_error_records(url: str, user_id: int | None, since_s: int | None) -> list[dict[str, object]]:
    """In the worker: open the store, judge its jobs, close it."""
    from hpcpredict.daemon.errors import user_error_statistics  # pandas: only where it runs

    store = Store(url)
    try:
        frame = user_error_statistics(store, user_id=user_id, since_s=since_s)
    finally:
        store.close()
    return json.loads(frame.to_json(orient="records", double_precision=15))


def _in_memory(url: str) -> bool:
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")
