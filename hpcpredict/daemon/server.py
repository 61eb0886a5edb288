"""``hpcpredict serve``: the Unix socket for the SLURM plugin and the HTTP JSON API for admins.

Threads (issue 17: the PREDICT path never waits on the database, the spool or an HTTP read):

* the asyncio event loop serves the socket. It answers PING and PREDICT from memory, owns the
  learner (every learning step runs here, service.py says why), and parses every line;
* the store writer (writer.py) runs every database write: the events (SUBMIT/START/END/LIMIT)
  from the socket and the SLURM watcher, the spooled reports in chunks, the final checkpoint. An
  event is answered once its transaction has committed; answers on one connection keep the order
  of its requests. Past the writer's backlog an event is answered ``ERR busy`` at once;
* the HTTP API runs in its own thread (the standard library's threading server, enough for an
  admin console) and reads the database there, on its own connections; it hands to the loop
  (`on_loop`) only what reads the learner in memory (health, metrics' gauges, POST /predict).
  The heavy read, per-user error statistics (GET /errors), runs in a worker process (reads.py):
  its pandas work would otherwise hold the GIL the loop needs.

Security: the socket is created with a umask that keeps it private from the first instant, then
given `DaemonConfig.socket_mode` (0600: only the daemon's own user, i.e. slurmctld's SlurmUser,
may connect) and optionally a group. The HTTP API binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import gc
import grp
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import select

from hpcpredict.daemon import user_errors
from hpcpredict.daemon.config import DaemonConfig, parse_host_port
from hpcpredict.daemon.handlers import EVENT_VERBS, Handlers, internal_error
from hpcpredict.daemon.lock import StoreLock, StoreLockedError, lock_store
from hpcpredict.daemon.paths import state_dir
from hpcpredict.daemon.reads import ReadWorker
from hpcpredict.daemon.protocol import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    ProtocolError,
    Request,
    format_error,
)
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.spool import SPOOL_CHUNK_LINES, SpoolIngestion
from hpcpredict.daemon.store import JobRow, PredictionRow
from hpcpredict.jobs import JobRequest
from hpcpredict.daemon.writer import DEFAULT_MAX_BACKLOG, StoreWriter, WriterBusyError, WriterStoppedError

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0  # a socket client silent this long is disconnected
SPOOL_INTERVAL_S = 30.0  # how often completion reports spooled meanwhile are ingested
SPOOL_BUSY_RETRY_S = 0.5  # the writer's backlog is full: the spool waits, live events go first
# Events of one connection waiting for the writer; past it the connection is not read until they
# drain, so a client pipelining 3,000 ENDs is slowed by its socket buffer, not refused, and
# cannot fill the writer's backlog alone.
MAX_EVENTS_IN_FLIGHT = 64
GIL_SWITCH_INTERVAL_S = 0.0005  # Daemon.run says why
WARM_UP_AT_S = 1_700_000_000  # any time: the made-up job of Daemon._warm_up
WATCHER_WAIT_S = 30.0  # how long the SLURM watcher waits for room in the writer's backlog
MAX_HTTP_BODY_BYTES = 64 * 1024
_T = TypeVar("_T")


class DaemonError(RuntimeError):
    """The daemon cannot start as configured (socket in use, bad path...)."""


class Daemon:
    """The running daemon: `run()` serves until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(
        self,
        config: DaemonConfig,
        service: PredictionService,
        *,
        lock: StoreLock | None = None,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
    ) -> None:
        """`lock`: the store's lock when the caller took it before opening the service (the CLI
        does, so that a second ``serve`` does not even replay); otherwise `run` takes it.
        `max_backlog`: events the store writer may hold before answering ``ERR busy``."""
        self.config = config
        self.service = service
        self.lock = lock
        self.handlers = Handlers(service)
        self.started_at = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.writer = StoreWriter(max_backlog=max_backlog)
        self.spool_ingested = threading.Event()  # set once the spool found at start is ingested
        self.reads = ReadWorker(service.store.url)  # GET /errors, off the daemon's GIL
        self._stop: asyncio.Event | None = None
        self._http: ThreadingHTTPServer | None = None
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
        # Whatever is alive now (imports, the restored model) is left out of the cyclic garbage
        # collector's full passes: on a big heap one holds the GIL, and so PREDICT, for tens of
        # milliseconds (85 ms measured in the stall test's process).
        gc.collect()
        gc.freeze()
        # The loop and the store writer share the GIL: a PREDICT arriving while the writer runs
        # Python waits for it to let go, up to the switch interval (5 ms by default), once or
        # twice per request. 0.5 ms keeps that wait under the p99 goal of 2 ms while events flow.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
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
            logger.info("stopped")

    async def _serve(self, path: Path) -> None:
        self._warm_up()
        server = await self._start_socket(path)
        spool = asyncio.create_task(self._spool_forever())  # reports of jobs ended while down
        try:
            if self.config.http:
                self._start_http()
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
            spool.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await spool
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
            self.reads.close()
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

    def _start_watcher(self) -> None:
        """With ``slurm = true``: the SLURM watcher and corrector, in its own thread."""
        if not self.config.slurm:
            return
        from hpcpredict.slurm.adapter import select_backend
        from hpcpredict.slurm.watcher import SlurmWatcher

        def call(verb: str, fields: dict[str, object]) -> dict[str, object]:
            request = Request(verb, fields)
            if verb in EVENT_VERBS:  # the watcher's thread waits for the writer, never the loop
                return self.writer.submit(lambda: self.handlers.call(request), wait_s=WATCHER_WAIT_S).result()
            return self.on_loop(lambda: self.handlers.call(request))

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
    async def _start_socket(self, path: Path) -> asyncio.AbstractServer:
        _clear_stale_socket(path)
        _socket_folder(path)
        loop = asyncio.get_running_loop()
        previous = os.umask(0o177)  # private from the first instant; chmod below widens it
        try:
            server = await loop.create_unix_server(
                lambda: _LineProtocol(self.handlers, self.writer, loop), path=str(path)
            )
        finally:
            os.umask(previous)
        os.chmod(path, self.config.socket_mode)
        if self.config.socket_group:
            try:
                os.chown(path, -1, grp.getgrnam(self.config.socket_group).gr_gid)
            except KeyError:
                server.close()
                raise DaemonError(f"socket_group: no such group {self.config.socket_group!r}") from None
        return server

    # ------------------------------------------------------------------ the HTTP API
    def _start_http(self) -> None:
        host, port = parse_host_port(self.config.http)
        daemon = self

        class Handler(_ApiHandler):
            api = daemon

        try:
            self._http = ThreadingHTTPServer((host, port), Handler)
        except OSError as error:
            raise DaemonError(f"http: cannot listen on {host}:{port} ({error.strerror})") from error
        self._http.daemon_threads = True
        self.http_address = self._http.server_address[:2]  # type: ignore[assignment]
        threading.Thread(target=self._http.serve_forever, name="hpcpredict-http", daemon=True).start()

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

    def metrics_text(self) -> str:
        """The Prometheus page: the site's totals read here (the HTTP thread), the learner's
        gauges on the loop."""
        site_totals = user_errors.site_totals(self.service.store)
        return self.on_loop(lambda: self._metrics_text(site_totals))

    def _metrics_text(self, site_totals: dict[str, float]) -> str:
        readiness = self.service.readiness(time.time())
        gauges = {
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
            "hpcpredict_writer_backlog": ("Events waiting for the store writer (ERR busy past "
                                          f"{self.writer.max_backlog}).", self.writer.backlog),
        }
        if self.watcher is not None:
            gauges["hpcpredict_starvation_guard_active"] = (
                "1 while a pending job has waited past the starvation guard (limits at requests).",
                int(self.watcher.guard.active),
            )
        for key, value in site_totals.items():
            name, help_text = user_errors.SITE_GAUGES[key]
            gauges[name] = (help_text, value)
        counters = {
            "hpcpredict_event_failures_total": ("Events whose transaction failed.", self.service.event_failures),
            "hpcpredict_model_rebuilds_total": ("Learner rebuilt from the store after a commit in doubt.",
                                                self.service.rebuilds),
            "hpcpredict_writer_refused_total": ("Events answered ERR busy: the store writer's backlog "
                                                "was full.", self.writer.refused),
        }
        return self.handlers.metrics.render(gauges, counters)

    def recent_predictions(self, limit: int) -> list[dict[str, object]]:
        statement = (
            select(PredictionRow, JobRow)
            .join(JobRow, JobRow.job_id == PredictionRow.job_id)
            .order_by(PredictionRow.id.desc())
            .limit(limit)
        )
        with self.service.store.session() as session:
            return [
                {
                    "job_id": job.job_id,
                    "user_id": job.user_id,
                    "procs": job.procs,
                    "requested_s": job.requested_s,
                    "predicted_s": prediction.predicted_s,
                    "predicted_at_s": prediction.predicted_at_s,
                    "status": job.status,
                    "run_s": job.run_s,
                }
                for prediction, job in session.execute(statement)
            ]


class _LineProtocol(asyncio.Protocol):
    """One socket connection: lines in, one answer line each, in order.

    A `Protocol` rather than asyncio streams: no task per connection and no timer task per
    line, which is what the plugin's connect-ask-close pattern pays for at every ``sbatch``.
    A client that stops reading its answers is paused (flow control), one that sends nothing
    for `IDLE_TIMEOUT_S` is disconnected, and a line over `MAX_LINE_BYTES` is answered
    ``too_long`` and the connection closed (it cannot be resynchronised).

    PING and PREDICT are answered here, on the loop. An event is handed to the store writer and
    answered when it has committed; answers wait in `pending` so that they leave in the order of
    their requests. Past `MAX_EVENTS_IN_FLIGHT` events waiting, the connection is not read until
    they drain; past the writer's backlog, an event is answered ``ERR busy`` at once.
    """

    def __init__(self, handlers: Handlers, writer: StoreWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.handlers = handlers
        self.writer = writer
        self.loop = loop
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None
        # Answers not written yet, in request order: [future or None, answer or None, verb, began].
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.in_flight = 0  # events handed to the writer, not answered yet
        self.paused_by_client = False  # the client does not read its answers (pause_writing)
        self.paused_by_events = False  # too many events in flight
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.handlers.metrics.connections += 1
        self.idle = self.loop.call_later(IDLE_TIMEOUT_S, transport.close)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._read_lines()

    def _read_lines(self) -> None:
        assert self.transport is not None
        while not self.paused_by_events:
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) > MAX_LINE_BYTES:
                    self._too_long()
                elif self.eof:
                    self._last_line()
                return
            if end > MAX_LINE_BYTES + 1:
                self._too_long()
                return
            line = bytes(self.buffer[:end]).rstrip(b"\r")
            del self.buffer[: end + 1]
            self._serve(line)
            if self.transport.is_closing():
                return
            if self.idle is not None:
                self.idle.cancel()
                self.idle = self.loop.call_later(IDLE_TIMEOUT_S, self.transport.close)

    def _serve(self, line: bytes) -> None:
        began = time.perf_counter()
        request = self.handlers.parse(line)
        if isinstance(request, bytes):
            self._reply(request)
            return
        if request.verb not in EVENT_VERBS:
            answer, outcome = self.handlers.answer(request)
            self.handlers.metrics.observe(request.verb, outcome, time.perf_counter() - began)
            self._reply(answer)
            return
        try:
            future = self.writer.submit(functools.partial(self.handlers.answer, request))
        except (WriterBusyError, WriterStoppedError) as error:
            code = "busy" if isinstance(error, WriterBusyError) else "unavailable"
            self.handlers.metrics.observe(request.verb, code, time.perf_counter() - began)
            self._reply(format_error(code, str(error)))
            return
        self.pending.append([future, None, request.verb, began])
        self.in_flight += 1
        if self.in_flight >= MAX_EVENTS_IN_FLIGHT and not self.paused_by_events:
            self.paused_by_events = True
            self._update_reading()
        future.add_done_callback(self._event_done)

    def _reply(self, answer: bytes) -> None:
        assert self.transport is not None
        if self.pending:  # behind an event's answer
            self.pending.append([None, answer, "", 0.0])
        else:
            self.transport.write(answer)

    def _event_done(self, future: concurrent.futures.Future[Any]) -> None:
        """On the writer's thread: wake the loop to write what is ready."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to answer
            self.loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        """Write the answers at the head of `pending` that are ready, in order."""
        assert self.transport is not None
        while self.pending:
            future, answer, verb, began = self.pending[0]
            if future is not None:
                if not future.done():
                    break
                answer, outcome = future.result()  # Handlers.answer never raises
                self.handlers.metrics.observe(verb, outcome, time.perf_counter() - began)
                self.in_flight -= 1
            self.pending.popleft()
            if not self.transport.is_closing():
                self.transport.write(answer)
        if self.paused_by_events and self.in_flight <= MAX_EVENTS_IN_FLIGHT // 2:
            self.paused_by_events = False
            self._update_reading()
            self._read_lines()  # lines already received while paused
        if self.eof and not self.pending and not self.buffer and not self.transport.is_closing():
            self.transport.close()

    def _update_reading(self) -> None:
        assert self.transport is not None
        if self.transport.is_closing():
            return
        if self.paused_by_client or self.paused_by_events:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        """The client sent everything: answer what is left (a last line may lack its newline),
        then close; keep the connection open for writing while events are being committed."""
        self.eof = True
        self._read_lines()
        assert self.transport is not None
        if not self.pending and not self.buffer:
            return False  # close once the answers are written
        return True

    def _last_line(self) -> None:
        if self.buffer.strip():
            line = bytes(self.buffer).strip()
            self.buffer.clear()
            self._serve(line)
        else:
            self.buffer.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()

    def pause_writing(self) -> None:
        self.paused_by_client = True  # a client not reading its answers gets no new ones
        self._update_reading()

    def resume_writing(self) -> None:
        self.paused_by_client = False
        self._update_reading()

    def _too_long(self) -> None:
        assert self.transport is not None
        self.transport.write(format_error("too_long", f"request longer than {MAX_LINE_BYTES} bytes"))
        self.handlers.metrics.observe("?", "too_long", 0.0)
        self.buffer.clear()
        self.transport.close()


class _ApiHandler(BaseHTTPRequestHandler):
    """JSON over HTTP: GET /health /metrics /errors /users /users/<uid>/errors /predictions,
    POST /predict. Every failure is a JSON ``{"error": ..., "code": ...}`` with its status."""

    api: Daemon
    server_version = "hpcpredict"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base
        logger.debug("http %s - %s", self.address_string(), format % args)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        parts = [part for part in url.path.split("/") if part]
        try:
            if method == "GET" and parts == ["health"]:
                health = self.api.on_loop(self.api.health)
                unhealthy = health["status"] == "unhealthy"
                self._json(HTTPStatus.SERVICE_UNAVAILABLE if unhealthy else HTTPStatus.OK, health)
            elif method == "GET" and parts == ["metrics"]:
                self._send(HTTPStatus.OK, self.api.metrics_text().encode(), "text/plain; version=0.0.4")
            elif method == "POST" and parts == ["predict"]:
                fields = self._body_fields()
                answer = self.api.on_loop(lambda: self.api.handlers.predict(fields))
                self._json(HTTPStatus.OK, {"prediction_s": answer["prediction"], "time_limit_s": answer["time_limit"],
                                           "ready": answer["ready"], "reason": answer.get("reason", "")})
            elif method == "GET" and parts == ["users"]:
                self._json(HTTPStatus.OK, user_errors.user_totals(self.api.service.store))
            elif method == "GET" and parts == ["errors"]:
                self._json(HTTPStatus.OK, self._errors(None, query))
            elif method == "GET" and len(parts) == 3 and parts[0] == "users" and parts[2] == "errors":
                uid = _int_or_error(parts[1], "user id")
                rows = self._errors(uid, query)
                if not rows:
                    raise _HttpError(HTTPStatus.NOT_FOUND, "unknown_user", f"no judged jobs for user {uid}")
                self._json(HTTPStatus.OK, rows[0])
            elif method == "GET" and parts == ["predictions"]:
                limit = _int_or_error(query.get("limit", "50"), "limit")
                if not 1 <= limit <= 1000:
                    raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "limit must be in 1..1000")
                self._json(HTTPStatus.OK, self.api.recent_predictions(limit))
            else:
                raise _HttpError(HTTPStatus.NOT_FOUND, "not_found", f"no endpoint {method} {url.path}")
        except _HttpError as error:
            self._json(error.status, {"error": error.message, "code": error.code})
        except ProtocolError as error:
            self._json(HTTPStatus.BAD_REQUEST, {"error": str(error), "code": error.code})
        except Exception:  # noqa: BLE001 - one bad request must not kill the thread
            message = internal_error(f"http {method} {self.path[:200]}")
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message, "code": "internal"})

    def _errors(self, uid: int | None, query: dict[str, str]) -> list[dict[str, object]]:
        since = query.get("since")
        since_s = None if since is None else _int_or_error(since, "since (Unix seconds)")
        return self.api.reads.errors(uid, since_s)  # in a process of its own (reads.py)

    def _body_fields(self) -> dict[str, Any]:
        length = _int_or_error(self.headers.get("Content-Length", "0"), "Content-Length")
        if length > MAX_HTTP_BODY_BYTES:
            self.close_connection = True
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_long", f"body over {MAX_HTTP_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", f"body is not JSON: {error}") from None
        if not isinstance(body, dict):
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "body must be a JSON object of job fields")
        return body

    def _json(self, status: int, value: object) -> None:
        self._send(status, json.dumps(value, allow_nan=False, default=str).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _int_or_error(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", f"{what}: expected an integer, got {text!r}") from None


def _socket_folder(path: Path) -> None:
    """Create the socket's folder only when it is the default state directory: a mistyped
    --socket must not make /nonexistent/ as root (systemd's RuntimeDirectory= makes /run/hpcpredict)."""
    if path.parent.is_dir():
        return
    if path.parent != state_dir():
        raise DaemonError(f"socket {path}: folder {path.parent} does not exist (create it, or use "
                          "RuntimeDirectory= in the systemd unit)")
    path.parent.mkdir(parents=True, exist_ok=True)


def _clear_stale_socket(path: Path) -> None:
    """Remove a socket file left by a daemon that died; refuse if one is still answering.

    Only "connection refused" (nobody listens) and "no such file" mean stale. Anything else, above
    all EAGAIN (a live daemon whose accept queue is full) or a timeout, means someone may be
    there: unlinking its socket would steal a busy daemon's path.
    """
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise DaemonError(f"{path} exists and is not a socket: refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        path.unlink(missing_ok=True)  # nobody listens: a leftover
        return
    except OSError as error:
        raise DaemonError(
            f"{path}: a daemon may still be serving there (probe: {error.strerror or error}); refusing to "
            "replace its socket"
        ) from None
    finally:
        probe.close()
    raise DaemonError(f"another daemon is already serving on {path}")
