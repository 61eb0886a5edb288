"""Damage to the SQLite store while the daemon runs is found, said and acted on.

`serve` runs SQLite's ``PRAGMA quick_check`` at start (cli/daemon.py). Garbage written into the
file later (a failing disk, a careless ``dd``, a bad restore over the live file) went unnoticed:
events kept committing into pages nobody read, ``/health`` said ok, and the damage was found at
the next restart with every event since then in doubt. Two things catch it now:

* any statement of an event that meets a damaged page ("database disk image is malformed")
  marks the store damaged at once (service.py, `store_damage`);
* this watch runs ``quick_check`` again periodically, in a thread of its own with its own
  connection. In WAL mode a reader never blocks the writer, and the sqlite3 module lets go of
  the GIL while SQLite works, so neither the event loop nor the store writer waits for it.

**Bounded cost.** A check reads every page of the file (about 0.3 s per 100 MB here). After a
check that took d seconds the next one starts ``max(interval_s, d / MAX_SHARE)`` later, so the
checks take at most `MAX_SHARE` (5%) of one core whatever the store's size. **Bounded delay.**
Damage is found within one period plus one check: with the default 60 s interval and a store
whose check takes under 3 s, within 63 s of being written.

Found damage makes the service unhealthy (``/health`` 503 ``"status": "unhealthy"`` with
``store_damage``, PING ``healthy=0``, ``hpcpredict_store_damaged 1``), refuses every event with
``ERR store_damaged`` (jobcomp.lua spools the completion reports, the plugin's PREDICT is still
answered from memory) and is logged once with what to do. PostgreSQL checks its own pages:
nothing to watch there.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.exc import DBAPIError

from hpcpredict.daemon.core.service import PredictionService

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 60.0
MAX_SHARE = 0.05  # of one core: the checks' time over the time between their starts, at most


class IntegrityWatch:
    """A thread running `Store.integrity_problems` every period until `stop`."""

    def __init__(self, service: PredictionService, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.service = service
        self.interval_s = interval_s
        self.checks = 0  # completed checks (the test waits on it)
        self.last_check_s: float | None = None  # how long the last check took
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="integrity-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def check_once(self) -> list[str]:
        """One quick_check; marks the service's store damaged when it finds anything."""
        began = time.monotonic()
        try:
            problems = self.service.store.integrity_problems()
        except DBAPIError as error:  # a file too damaged to even check
            problems = [str(error.orig)]
        self.last_check_s = time.monotonic() - began
        self.checks += 1
        if problems:
            more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
            self.service.mark_damaged(f"SQLite quick_check: {problems[0]}{more}")
        return problems

    def _run(self) -> None:
        wait_s = self.interval_s
        while not self._stop.wait(wait_s):
            if self.service.store_damage is not None:
                return  # said once; nothing more to find until a restart
            try:
                self.check_once()
            except Exception:  # noqa: BLE001 - the watch must never take the daemon down
                logger.exception("integrity check failed to run")
            wait_s = max(self.interval_s, (self.last_check_s or 0.0) / MAX_SHARE)
