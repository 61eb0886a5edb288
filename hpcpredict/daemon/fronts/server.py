"""``hpcpredict serve``: the daemon's life cycle around its two fronts.

The PREDICT path never waits on the database, the spool or an HTTP read (docs/daemon.md).

* The asyncio event loop serves the plugin's Unix socket (`socket_server`) and the admin HTTP
  API (`http_api`, aiohttp on the same loop, its reads of the store in worker processes). It
  answers PING and PREDICT from memory, parses every line, and owns the learner: every learning
  step runs here (service.py says why).
* The store writer (writer.py), one thread, runs every database write: the events
  (SUBMIT/START/END/LIMIT) from the socket and from the SLURM watcher, the spooled reports in
  chunks, the final checkpoint. An event is answered once its transaction has committed; past
  the writer's backlog it is answered ``ERR busy`` at once.
* The SLURM watcher runs in its own thread: its events go to the writer (it waits for room
  there), anything else to the loop (`on_loop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import gc
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hpcpredict.daemon.core.config import DaemonConfig, DaemonError, parse_host_port
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.core.integrity_watch import DEFAULT_INTERVAL_S as DEFAULT_INTEGRITY_INTERVAL_S
from hpcpredict.daemon.core.integrity_watch import IntegrityWatch
from hpcpredict.daemon.fronts.http_auth import BearerAuth, TokenFileError, load_token, require_token_off_loopback
from hpcpredict.daemon.core.lock import StoreLock, StoreLockedError, lock_store
from hpcpredict.daemon.core.open_files import raise_open_files_limit
from hpcpredict.daemon.fronts.protocol import PROTOCOL_VERSION, check_event
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.fronts.socket_server import SocketServer, start_socket
from hpcpredict.daemon.core.spool import SPOOL_CHUNK_LINES, SpoolIngestion
from hpcpredict.daemon.core.writer import DEFAULT_MAX_BACKLOG, StoreWriter, WriterBusyError, WriterStoppedError
from hpcpredict.daemon.core.systemd_notify import notify
from hpcpredict.job_events import JobEvent
from hpcpredict.jobs import JobRequest
from hpcpredict.slurm.failsafe import read_status

if TYPE_CHECKING:
    from hpcpredict.daemon.fronts.http_api import AdminApi, HttpLimits

logger = logging.getLogger(__name__)

SPOOL_INTERVAL_S = 30.0  # how often completion reports spooled meanwhile are ingested
SPOOL_BUSY_RETRY_S = 0.5  # the writer's backlog is full: the spool waits, live events go first
GIL_SWITCH_INTERVAL_S = 0.0005  # Daemon.run says why
WARM_UP_AT_S = 1_700_000_000  # any time: the made-up job of Daemon._warm_up
WATCHER_WAIT_S = 30.0  # how long the SLURM watcher waits for room in the writer's backlog
# ... and for its event to be recorded: past that the event stays queued (recorded when the writer
# gets to it), the watcher logs an error and goes on to the other jobs, and sends it again at the
# next poll (the service takes a resent event once): a stuck writer must not stop the corrections.
WATCHER_RECORD_S = 60.0
_T = TypeVar("_T")


class Daemon:
    """The running daemon: `run()` serves until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(
        self,
        config: DaemonConfig,
        service: PredictionService,
        *,
        lock: StoreLock | None = None,
        http_limits: HttpLimits | None = None,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        integrity_interval_s: float | None = DEFAULT_INTEGRITY_INTERVAL_S,
    ) -> None:
        """`lock`: the store's lock when the caller took it before opening the service (the CLI
        does, so that a second ``serve`` does not even replay); otherwise `run` takes it.
        `http_limits`: the admin API's bounds (`HttpLimits`' defaults unless given).
        `max_backlog`: events the store writer may hold before answering ``ERR busy``.
        `integrity_interval_s`: the least time between two quick_checks of a SQLite store while
        serving (integrity_watch.py); None: none."""
        self.config = config
        self.service = service
        self.lock = lock
        self.handlers = Handlers(service)
        self.started_at = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.writer = StoreWriter(max_backlog=max_backlog)
        self.spool_ingested = threading.Event()  # set once the spool found at start is ingested
        self._stop: asyncio.Event | None = None
        self.http_limits = http_limits
        self._http: AdminApi | None = None
        self.http_address: tuple[str, int] | None = None
        self.socket_server: SocketServer | None = None  # the plugin's socket, while serving
        self.ready = threading.Event()  # set once both endpoints accept connections
        self.watcher = None  # the SLURM watcher, when config.slurm
        self.integrity_interval_s = integrity_interval_s
        self.open_files_limit: int | None = None  # the soft limit `run` raised
        self.integrity_watch: IntegrityWatch | None = None  # while serving a SQLite store

    # ------------------------------------------------------------------ life cycle
    def run(self, *, install_signal_handlers: bool = True) -> None:
        own_lock = self.lock is None
        if own_lock:
            try:
                self.lock = lock_store(self.service.store.engine)
            except StoreLockedError as error:
                raise DaemonError(str(error)) from None
        # Whatever is alive now (imports, the restored model) is left out of the cyclic garbage
        # collector's full passes: on a big heap one holds the GIL, and so PREDICT, for tens of
        # milliseconds (85 ms measured in the stall test's process).
        gc.collect()
        gc.freeze()
        # The loop and the store writer share the GIL: a PREDICT arriving while the writer runs
        # Python waits for it to let go, up to the switch interval (5 ms by default), once or
        # twice per request. 0.5 ms keeps that wait under the p99 goal of 2 ms while events flow.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        # Every connection is a descriptor: the soft limit (1,024 under systemd) would stop
        # accept() long before the hard one the unit sets (open_files.py).
        self.open_files_limit = raise_open_files_limit()
        try:
            asyncio.run(self._main(install_signal_handlers))
        finally:
            if own_lock and self.lock is not None:
                # Closed connections first: releasing a SQLite store's lock closes a descriptor
                # of the file, which drops the process's POSIX locks on it (lock.py). The pool
                # opens new connections if the caller goes on using the store.
                self.service.store.engine.dispose()
                self.lock.release()
                self.lock = None

    def stop(self) -> None:
        """Ask a running daemon to stop (from any thread)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # already stopped: the loop is closed
                loop.call_soon_threadsafe(stop.set)

    async def _main(self, install_signal_handlers: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop = asyncio.Event()
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._stop.set)
        path = Path(self.config.socket)
        previous_on_learner = self.service.on_learner
        self.service.on_learner = self._on_learner
        self.writer.start()
        try:
            await self._serve(path)
        finally:
            # Queued events are committed (their learning steps need the loop: it still runs),
            # then the checkpoint, so that the next start replays nothing.
            await self._loop.run_in_executor(None, self.writer.stop)
            await self._loop.run_in_executor(None, self.service.close)
            self.service.on_learner = previous_on_learner
            if self.ready.is_set():  # a start that failed says why, not "stopped"
                logger.info("stopped")

    async def _serve(self, path: Path) -> None:
        self._warm_up()
        server = self.socket_server = start_socket(path, self.config, self.handlers, self.writer,
                                                   open_files_limit=self.open_files_limit)
        spool = asyncio.create_task(self._spool_forever())  # reports of jobs ended while down
        try:
            if self.config.http:
                await self._start_http()
            logger.info(
                "serving on %s%s (model: %d updates, event %d)",
                path,
                f" and http://{self.http_address[0]}:{self.http_address[1]}" if self.http_address else "",
                self.service.model_updates,
                self.service.last_event_seq,
            )
            self.service.readiness(time.time())  # logs "ready: ..." or "not ready, ..." once
            self._start_watcher()
            if self.integrity_interval_s is not None and self.service.store.engine.dialect.name == "sqlite":
                self.integrity_watch = IntegrityWatch(self.service, self.integrity_interval_s)
                self.integrity_watch.start()
            self.ready.set()
            notify("READY=1", f"STATUS=serving on {path} (model: {self.service.model_updates} updates)")
            await self._stop.wait()
        finally:
            if self.ready.is_set():
                notify("STOPPING=1")
            if self.watcher is not None:  # its calls need the loop: stop it from a thread
                await asyncio.get_running_loop().run_in_executor(None, self.watcher.stop)
            if self.integrity_watch is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.integrity_watch.stop)
            server.close()
            await server.wait_closed()
            spool.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await spool
            if self._http is not None:
                await self._http.stop()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _warm_up(self) -> None:
        """Before the socket opens, a scratch learner (the site's hyperparameters, not the
        daemon's model) predicts and learns one made-up job: the first call of the learner's
        compiled kernels loads them (numba: ~0.2 s even from its on-disk cache), and that must
        not be the first PREDICT the plugin waits on, or a learning step PREDICTs wait behind."""
        scratch = self.config.predictor_factory()
        job = JobRequest(job_id=1, submit_s=WARM_UP_AT_S, procs=1, requested_s=3600, user_id=0)
        scratch.peek(job, job.submit_s)
        scratch.predict(job, job.submit_s)
        scratch.job_started(job, job.submit_s + 1)
        scratch.job_ended(job, 600, job.submit_s + 601, killed_at_limit=False)
        if self.config.correction == "survival":
            # SURVIVAL's Kaplan-Meier kernel too: loaded (or, with no cache folder, compiled) now
            # rather than under numba's lock at the watcher's first correction.
            from hpcpredict.corrections.survival import conditional_quantile_s

            conditional_quantile_s([600, 1200], [900], 300, self.config.survival_quantile)

    def _start_watcher(self) -> None:
        """With ``slurm = true``: the SLURM watcher and corrector, in its own thread."""
        if not self.config.slurm:
            return
        from hpcpredict.slurm.adapter import select_backend
        from hpcpredict.slurm.watcher import SlurmWatcher

        def record(event: JobEvent) -> object:
            """The typed event, as it is, to the service on the writer (the watcher's thread
            waits for the writer, never the loop), held to the protocol's limits first."""
            check_event(event)
            future = self.writer.submit(lambda: self.service.record(event), wait_s=WATCHER_WAIT_S)
            try:
                return future.result(WATCHER_RECORD_S)
            except concurrent.futures.TimeoutError:  # the watcher's log line names the job
                raise DaemonError(f"the store writer has not recorded {type(event).__name__} in "
                                  f"{WATCHER_RECORD_S:g} s: it stays queued, and the watcher sends "
                                  "it again at its next look") from None

        backend = select_backend(self.config.slurm_backend)
        self.watcher = SlurmWatcher(
            backend,
            record,
            self.service.job_status,
            margin_s=self.config.correction_margin_s,
            interval_s=self.config.slurm_interval_s,
            policy=self.service.correction,  # the policy the service feeds (SURVIVAL's history)
            guard_settings=self.config.guard,
            heartbeat=self.config.failsafe.heartbeat,
            stale_after_s=self.config.failsafe.stale_after_s,
            full_every_s=self.config.slurm_full_listing_s,
        )
        self.handlers.lowering_hold = self.watcher.holds_lowering
        self.handlers.least_lowered_s = self.watcher.least_lowered_s
        self.watcher.start()
        logger.info("watching SLURM (%s backend) every %g s", backend.name, self.config.slurm_interval_s)

    # ------------------------------------------------------------------ the store writer
    def _on_learner(self, function: Callable[[], _T]) -> _T:
        """`PredictionService.on_learner`: run on the loop, the learner's thread (service.py)."""
        if threading.get_ident() == self._loop_thread:
            return function()
        return self.on_loop(function, timeout_s=None)

    async def _on_writer(self, task: Callable[[], _T]) -> _T:
        """Run `task` on the store writer and wait for it without blocking the loop; while the
        backlog is full, wait for room (for the daemon's own work: clients get ``ERR busy``)."""
        while True:
            try:
                future = self.writer.submit(task)
            except WriterBusyError:
                await asyncio.sleep(SPOOL_BUSY_RETRY_S)
                continue
            return await asyncio.wrap_future(future)

    def _spool_line(self, line: bytes) -> bytes:
        """One spooled line, on the writer (the metrics, kept on the loop, do not count it)."""
        request = self.handlers.parse(line)
        return request if isinstance(request, bytes) else self.handlers.answer(request)[0]

    async def _spool_forever(self) -> None:
        """Ingest the completion reports spooled by jobcomp.lua now, then every interval: in
        chunks of `SPOOL_CHUNK_LINES`, each a task of the writer, so that live events run between
        chunks and the loop never waits (spool.py)."""
        while True:
            ingestion = SpoolIngestion(self.config.spool)
            try:
                if await self._on_writer(ingestion.take):
                    while not await self._on_writer(lambda: ingestion.ingest_chunk(self._spool_line, SPOOL_CHUNK_LINES)):
                        pass
            except OSError as error:
                logger.error("cannot ingest the spool %s: %s", self.config.spool, error)
            except WriterStoppedError:
                return
            finally:
                # After a chunk still running (the writer owns the file): a no-op once done;
                # when stopping, the file stays and the next start finishes it.
                with contextlib.suppress(WriterBusyError, WriterStoppedError):
                    self.writer.submit(ingestion.close)
            self.spool_ingested.set()
            await asyncio.sleep(SPOOL_INTERVAL_S)

    # ------------------------------------------------------------------ the socket
    # ------------------------------------------------------------------ the HTTP API
    async def _start_http(self) -> None:
        """The admin API; refused beyond loopback without a token, or with an unsafe token file."""
        from hpcpredict.daemon.fronts.http_api import AdminApi  # aiohttp: only when the API is on

        host, port = parse_host_port(self.config.http)
        try:
            require_token_off_loopback(host, self.config.http_token_file)
            token = load_token(self.config.http_token_file) if self.config.http_token_file else None
        except TokenFileError as error:
            raise DaemonError(str(error)) from None
        api = AdminApi(self, BearerAuth(token), self.http_limits)
        try:
            await api.start(host, port)
        except OSError as error:
            await api.stop()
            raise DaemonError(f"http: cannot listen on {host}:{port} ({error.strerror})") from error
        self._http = api
        self.http_address = api.address

    def on_loop(self, function: Callable[[], _T], timeout_s: float | None = 10.0) -> _T:
        """Run `function` on the event loop's thread (the learner's owner) and wait for it. Only
        what reads or changes memory goes there, never a database read (module doc)."""
        assert self._loop is not None
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def call() -> None:
            try:
                future.set_result(function())
            except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(error)

        self._loop.call_soon_threadsafe(call)
        return future.result(timeout_s)

    def health(self) -> dict[str, object]:
        """``status``: "ok"; "not_ready" (answering, with the users' requests: `reasons`); or
        "unhealthy" (events fail, the learner awaits a rebuild, or the store is damaged),
        answered with HTTP 503."""
        readiness = self.service.readiness(time.time())
        age = readiness.history
        if not self.service.healthy:
            status = "unhealthy"
        else:
            status = "ok" if readiness.ready else "not_ready"
        return {
            "status": status,
            "ready": readiness.ready,
            "reasons": [reason.value for reason in readiness.reasons],
            "readiness": readiness.describe(),
            "trained_jobs": readiness.trained_jobs,
            "min_trained_jobs": readiness.min_trained_jobs,
            "failing_events": self.service.failing_events,
            "event_failures": self.service.event_failures,
            "store_damage": self.service.store_damage,
            "history_age_days": age.age_days,
            "stale_history": age.stale,
            "warning": age.warning(),
            "protocol_version": PROTOCOL_VERSION,
            "model_updates": self.service.model_updates,
            "last_event_seq": self.service.last_event_seq,
            "uptime_s": round(time.time() - self.started_at, 3),
            "socket": self.config.socket,
            "slurm": None if self.watcher is None else dataclasses.asdict(self.watcher.report),
            "watcher": None if self.watcher is None else {
                "heartbeat": self.watcher.heartbeat,
                "heartbeat_age_s": round(self.watcher.heartbeat_age_s(), 3),
                "stale_after_s": self.watcher.stale_after_s,
                "stale": self.watcher.is_stale(),
            },
            "failsafe": self._failsafe_health(),
            "starvation_guard": None if self.watcher is None else {
                "after_s": self.watcher.guard_s, "xfactor": self.watcher.xfactor,
                "slack_s": self.watcher.slack_s, "slack_after_s": self.watcher.slack_after_s,
                **dataclasses.asdict(self.watcher.guard)
            },
        }

    def _failsafe_health(self) -> dict[str, object] | None:
        """The failsafe's last status (its own process writes it at every look), with its age:
        None when no failsafe has written one where the configuration says."""
        status = read_status(self.config.failsafe.status)
        if status is None:
            return None
        return {**dataclasses.asdict(status), "age_s": round(max(0.0, time.time() - status.time_s), 3)}

    def metric_values(self) -> tuple[dict[str, tuple[str, float]], dict[str, tuple[str, float]]]:
        """(gauges, counters) of the service's state, name -> (help, value); from memory, for
        the loop's thread (the store's site-wide totals are added off the loop, `http_api`)."""
        readiness = self.service.readiness(time.time())
        gauges: dict[str, tuple[str, float]] = {
            "hpcpredict_ready": ("1 when PREDICT answers the model's predictions, 0 when it answers "
                                 "the users' requests (see /health's reasons).", int(readiness.ready)),
            "hpcpredict_min_trained_jobs": ("Learned jobs needed before predictions are used.",
                                            readiness.min_trained_jobs),
            "hpcpredict_healthy": ("0 while events fail or the learner awaits a rebuild.",
                                   int(self.service.healthy)),
            "hpcpredict_failing_events": ("Events failed in a row (0 once one commits).",
                                          self.service.failing_events),
            "hpcpredict_store_damaged": ("1 once the store's file is found damaged (events refused "
                                         "until it is restored).", int(self.service.store_damage is not None)),
            "hpcpredict_model_updates": ("Learning steps taken by the model.", self.service.model_updates),
            "hpcpredict_last_event_seq": ("Sequence number of the last event applied.", self.service.last_event_seq),
            "hpcpredict_uptime_seconds": ("Seconds since the daemon started.", time.time() - self.started_at),
            "hpcpredict_writer_backlog": ("Events waiting for the store writer (ERR busy past "
                                          f"{self.writer.max_backlog}).", self.writer.backlog),
        }
        if self.watcher is not None:
            gauges["hpcpredict_starvation_guard_active"] = (
                "1 while a pending job has waited past the starvation guard (limits at requests).",
                int(self.watcher.guard.active),
            )
            gauges["hpcpredict_starvation_guard_slack"] = (
                "1 while the starvation guard's slack stage is on (pending limits at requests less "
                "the slack).",
                int(self.watcher.guard.slack),
            )
            gauges["hpcpredict_watcher_heartbeat_age_seconds"] = (
                "Seconds since the watcher's last look that vouched for every lowered limit (the "
                f"failsafe restores limits past {self.watcher.stale_after_s:g}).",
                self.watcher.heartbeat_age_s(),
            )
            gauges["hpcpredict_watcher_stale"] = (
                "1 while the watcher's heartbeat is older than the failsafe's bound (PREDICT holds "
                "lowering).", int(self.watcher.is_stale()),
            )
        failsafe = read_status(self.config.failsafe.status)
        if failsafe is not None:
            gauges["hpcpredict_failsafe_status_age_seconds"] = (
                "Seconds since the failsafe's last look (it looks every "
                f"{self.config.failsafe.interval_s:g} s).", max(0.0, time.time() - failsafe.time_s),
            )
            gauges["hpcpredict_failsafe_restoring"] = (
                "1 while the failsafe finds the watcher's heartbeat stale and puts lowered limits "
                "back to the requests.", int(failsafe.state == "restoring"),
            )
            gauges["hpcpredict_failsafe_restored"] = (
                "Limits the failsafe put back since it started.", failsafe.restored_total,
            )
            gauges["hpcpredict_failsafe_lowered_left"] = (
                "Lowered jobs still below their requests after the failsafe's last restoring look "
                "(its SLURM commands failed).", failsafe.lowered_left,
            )
        counters = {
            "hpcpredict_event_failures_total": ("Events whose transaction failed.", self.service.event_failures),
            "hpcpredict_model_rebuilds_total": ("Learner rebuilt from the store after a commit in doubt.",
                                                self.service.rebuilds),
            "hpcpredict_writer_refused_total": ("Events answered ERR busy: the store writer's backlog "
                                                "was full.", self.writer.refused),
        }
        return gauges, counters
