"""``hpcpredict serve``: the daemon's life cycle around its two fronts.

One thread owns the `PredictionService` (it is single-threaded by design, service.py): the
asyncio event loop, which serves the plugin's Unix socket (`socket_server`). The HTTP API runs
in its own thread (the standard library's threading server) and hands every call that touches
the service to the loop (`on_loop`); its reads of the database (`queries`) run in the HTTP thread
on their own connections. The HTTP API binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from hpcpredict.daemon import queries, user_errors
from hpcpredict.daemon.config import DaemonConfig, DaemonError, parse_host_port
from hpcpredict.daemon.handlers import Handlers, internal_error
from hpcpredict.daemon.lock import StoreLock, StoreLockedError, lock_store
from hpcpredict.daemon.protocol import PROTOCOL_VERSION, ProtocolError, Request
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.socket_server import start_socket
from hpcpredict.daemon.spool import ingest_spool

logger = logging.getLogger(__name__)

SPOOL_INTERVAL_S = 30.0  # how often completion reports spooled meanwhile are ingested
MAX_HTTP_BODY_BYTES = 64 * 1024
_T = TypeVar("_T")


class Daemon:
    """The running daemon: `run()` serves until `stop()` (or SIGTERM/SIGINT)."""

    def __init__(
        self, config: DaemonConfig, service: PredictionService, *, lock: StoreLock | None = None
    ) -> None:
        """`lock`: the store's lock when the caller took it before opening the service (the CLI
        does, so that a second ``serve`` does not even replay); otherwise `run` takes it."""
        self.config = config
        self.service = service
        self.lock = lock
        self.handlers = Handlers(service)
        self.started_at = time.time()
        self._loop: asyncio.AbstractEventLoop | None = None
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
            if self._http is not None:
                self._http.shutdown()
                self._http.server_close()
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

    def metrics_text(self) -> str:
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
        }
        if self.watcher is not None:
            gauges["hpcpredict_starvation_guard_active"] = (
                "1 while a pending job has waited past the starvation guard (limits at requests).",
                int(self.watcher.guard.active),
            )
        for key, value in user_errors.site_totals(self.service.store).items():
            name, help_text = user_errors.SITE_GAUGES[key]
            gauges[name] = (help_text, value)
        counters = {
            "hpcpredict_event_failures_total": ("Events whose transaction failed.", self.service.event_failures),
            "hpcpredict_model_rebuilds_total": ("Learner rebuilt from the store after a commit in doubt.",
                                                self.service.rebuilds),
        }
        return self.handlers.metrics.render(gauges, counters)


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
                self._send(HTTPStatus.OK, self.api.on_loop(self.api.metrics_text).encode(), "text/plain; version=0.0.4")
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
                self._json(HTTPStatus.OK, queries.recent_predictions(self.api.service.store, limit))
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
        return queries.error_rows(self.api.service.store, uid, since_s)

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
