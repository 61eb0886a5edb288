"""``hpcpredict serve``: the daemon's life cycle around its two fronts.

One thread owns the `PredictionService` (it is single-threaded by design, service.py): the
asyncio event loop. It serves the plugin's Unix socket (`socket_server`) and the admin HTTP API
(`http_api`, aiohttp on the same loop, its reads of the store in worker processes). The
SLURM watcher runs in its own thread and hands every call to the loop (`on_loop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hpcpredict.daemon.config import DaemonConfig, DaemonError, parse_host_port
from hpcpredict.daemon.handlers import Handlers
from hpcpredict.daemon.http_auth import BearerAuth, TokenFileError, load_token, require_token_off_loopback
from hpcpredict.daemon.lock import StoreLock, StoreLockedError, lock_store
from hpcpredict.daemon.protocol import PROTOCOL_VERSION, Request
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.socket_server import start_socket
from hpcpredict.daemon.spool import ingest_spool

if TYPE_CHECKING:
    from hpcpredict.daemon.http_api import AdminApi, HttpLimits

logger = logging.getLogger(__name__)

SPOOL_INTERVAL_S = 30.0  # how often completion reports spooled meanwhile are ingested
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
    ) -> None:
        """`lock`: the store's lock when the caller took it before opening the service (the CLI
        does, so that a second ``serve`` does not even replay); otherwise `run` takes it.
        `http_limits`: the admin API's bounds (`HttpLimits`' defaults unless given)."""
        self.config = config
        self.service = service
        self.lock = lock
        self.handlers = Handlers(service)
        self.started_at = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.http_limits = http_limits
        self._http: AdminApi | None = None
        self.http_address: tuple[str, int] | None = None
        self.ready = threading.Event()  # set once both endpoints accept connections
        self.watcher = None  # the SLURM watcher, when config.slurm

    # ------------------------------------------------------------------ life cycle
    def run(self, *, install_signal_handlers: bool = True) -> None:
        own_lock = self.lock is None
        if own_lock:
            try:
                self.lock = lock_store(self.service.store.engine)
            except StoreLockedError as error:
                raise DaemonError(str(error)) from None
        try:
            asyncio.run(self._main(install_signal_handlers))
        finally:
            if own_lock and self.lock is not None:
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
        self._stop = asyncio.Event()
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(signum, self._stop.set)
        path = Path(self.config.socket)
        self._ingest_spool()  # reports of jobs that ended while the daemon was down
        server = await start_socket(path, self.config, self.handlers)
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
            self.ready.set()
            await self._stop.wait()
        finally:
            if self.watcher is not None:  # its calls need the loop: stop it from a thread
                await asyncio.get_running_loop().run_in_executor(None, self.watcher.stop)
            server.close()
            await server.wait_closed()
            if self._http is not None:
                await self._http.stop()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            self.service.close()  # checkpoint: the next start replays nothing
            logger.info("stopped")

    def _start_watcher(self) -> None:
        """With ``slurm = true``: the SLURM watcher and corrector, in its own thread."""
        if not self.config.slurm:
            return
        from hpcpredict.slurm.adapter import select_backend
        from hpcpredict.slurm.watcher import SlurmWatcher

        def call(verb: str, fields: dict[str, object]) -> dict[str, object]:
            return self.on_loop(lambda: self.handlers.call(Request(verb, fields)))

        backend = select_backend(self.config.slurm_backend)
        self.watcher = SlurmWatcher(
            backend,
            call,
            self.service.job_status,
            margin_s=self.config.correction_margin_s,
            interval_s=self.config.slurm_interval_s,
            policy=self.service.correction,  # the policy the service feeds (SURVIVAL's history)
            guard_s=self.config.starvation_guard_s,
        )
        watcher = self.watcher
        self.handlers.lowering_hold = lambda: "starvation_guard" if watcher.guard.active else None
        self.watcher.start()
        logger.info("watching SLURM (%s backend) every %g s", backend.name, self.config.slurm_interval_s)

    def _ingest_spool(self) -> None:
        """Apply the completion reports spooled by jobcomp.lua, then again every interval."""
        try:
            ingest_spool(self.config.spool, self.handlers.handle_line)
        except OSError as error:
            logger.error("cannot ingest the spool %s: %s", self.config.spool, error)
        assert self._loop is not None
        self._loop.call_later(SPOOL_INTERVAL_S, self._ingest_spool)

    # ------------------------------------------------------------------ the socket
    # ------------------------------------------------------------------ the HTTP API
    async def _start_http(self) -> None:
        """The admin API; refused beyond loopback without a token, or with an unsafe token file."""
        from hpcpredict.daemon.http_api import AdminApi  # aiohttp: only when the API is on

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

    def on_loop(self, function: Callable[[], _T], timeout_s: float = 10.0) -> _T:
        """Run `function` on the event loop's thread (the service's owner) and wait for it."""
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
        "unhealthy" (events fail, or the learner awaits a rebuild), answered with HTTP 503."""
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
            "history_age_days": age.age_days,
            "stale_history": age.stale,
            "warning": age.warning(),
            "protocol_version": PROTOCOL_VERSION,
            "model_updates": self.service.model_updates,
            "last_event_seq": self.service.last_event_seq,
            "uptime_s": round(time.time() - self.started_at, 3),
            "socket": self.config.socket,
            "slurm": None if self.watcher is None else dataclasses.asdict(self.watcher.report),
            "starvation_guard": None if self.watcher is None else {
                "after_s": self.watcher.guard_s, **dataclasses.asdict(self.watcher.guard)
            },
        }

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
            "hpcpredict_model_updates": ("Learning steps taken by the model.", self.service.model_updates),
            "hpcpredict_last_event_seq": ("Sequence number of the last event applied.", self.service.last_event_seq),
            "hpcpredict_uptime_seconds": ("Seconds since the daemon started.", time.time() - self.started_at),
        }
        if self.watcher is not None:
            gauges["hpcpredict_starvation_guard_active"] = (
                "1 while a pending job has waited past the starvation guard (limits at requests).",
                int(self.watcher.guard.active),
            )
        counters = {
            "hpcpredict_event_failures_total": ("Events whose transaction failed.", self.service.event_failures),
            "hpcpredict_model_rebuilds_total": ("Learner rebuilt from the store after a commit in doubt.",
                                                self.service.rebuilds),
        }
        return gauges, counters
