"""The admin JSON API over HTTP, served by aiohttp on the daemon's own event loop.

GET /health, /metrics (open); GET /summary, /errors, /users, /users/<uid>/errors,
/users/<uid>/explain, /jobs/<id>/explain, /predictions and POST /predict (per-user data: bearer
token, `http_auth`); GET /report, the sysadmin's page in HTML (`report_page`, the same page as
``hpcpredict report``; the token also as a Basic password, which a browser asks for). Every
other answer is JSON, ``{"error": ..., "code": ...}`` on failure, with a 4xx status for anything
the client got wrong.

Sharing the loop that answers the SLURM plugin is safe because nothing here blocks it:

* what comes from memory (`/health`, POST /predict, the metrics' counters) is computed on the
  loop, as cheap as a PREDICT on the socket;
* every read of the store (`queries`), and the rendering of /metrics, runs in a worker process
  (`StoreReads`), so a ``GET /errors`` over every judged job (seconds on a big store) never
  delays a PREDICT, not even through the GIL;
* connections and requests are bounded (`HttpLimits`): past the limits a client gets 503 at
  once rather than a queue, a connection that sends no complete request within
  `idle_timeout_s` is closed (idle or slowloris clients cannot pile up and make /health
  unreachable), and a request that takes longer than `request_timeout_s` is answered 503.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import multiprocessing
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web

from hpcpredict.daemon.views import queries
from hpcpredict.daemon.fronts.handlers import internal_error
from hpcpredict.daemon.fronts.http_auth import BearerAuth
from hpcpredict.daemon.fronts.protocol import ProtocolError, Request, get_int
from hpcpredict.daemon.core.store import Store

if TYPE_CHECKING:
    from hpcpredict.daemon.core.config import DaemonConfig
    from hpcpredict.daemon.core.service import PredictionService
    from hpcpredict.daemon.fronts.handlers import Handlers


class ServedDaemon(Protocol):
    """What the HTTP front reads of the running daemon (`server.Daemon` is one): named here so
    that this module needs nothing of the server's, which starts it."""

    config: DaemonConfig
    service: PredictionService
    handlers: Handlers

    def health(self) -> dict[str, object]: ...

    def metric_values(self) -> tuple[dict[str, tuple[str, float]], dict[str, tuple[str, float]]]: ...

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Endpoints showing users' jobs, runtimes or errors, or acting for a user: token required.
PER_USER_ENDPOINTS = frozenset({"summary", "errors", "users", "user_errors", "user_explain", "job_explain",
                                "predictions", "predict", "report"})
# Endpoints a browser opens: the token is taken as a Basic password too, and a 401 asks for it.
BROWSER_ENDPOINTS = frozenset({"report"})
# The live page is drawn at most this often (figures and all, in a read worker); fetches in between,
# and fetches while it is drawn, get the same page.
REPORT_MAX_AGE_S = 30.0
MAX_PREDICTIONS_LISTED = 1000


@dataclass(frozen=True)
class HttpLimits:
    """Bounds that keep the admin API from costing the plugin anything, whatever clients do."""

    # Open connections. At the cap, a new connection takes the place of the one idle longest
    # (no request in progress: just opened, or between keep-alive requests); only when every
    # connection has a request in progress is it answered 503 and closed. Before that rule, a
    # client holding every slot without asking anything kept /health and /metrics at 503. A
    # client that reopens its connections as they are closed churns them (about 4,000/s here,
    # as it did against the 503s before) but cannot keep a probe out: the probe's request is
    # read a turn of the loop after it connects, long before it becomes the idle longest.
    # Counted at connection_made, so one burst of accepts (at most `backlog`) can overshoot it.
    max_connections: int = 256
    # Requests being answered at once (/health excepted: a liveness probe must get through while
    # admin reads run), and store reads queued or running (a read whose request timed out still
    # holds its thread); beyond either, 503 at once.
    max_requests: int = 16
    # A connection with no complete request for this long (just opened, between keep-alive
    # requests, or trickling its headers) is closed.
    idle_timeout_s: float = 10.0
    # Reading the body and answering; longer is 408 (body) or 503 (answer).
    request_timeout_s: float = 30.0
    # Pending connections the kernel keeps while the loop is busy (the socket's listen backlog;
    # the standard library's server had 5).
    backlog: int = 128
    max_body_bytes: int = 64 * 1024
    # Worker processes for the store reads: two, so one slow /errors does not queue /metrics.
    # 0: threads of the daemon's process instead (tests that stub a read; in-memory stores).
    read_processes: int = 2


class StoreReads:
    """Where the admin API's reads of the store run: worker processes, each with its own engine
    (`queries.open_worker_store`), started at the first read; or threads, with `processes=0`.

    A worker that dies (killed, out of memory) breaks its pool: the reads then waiting fail, and
    the next read starts a new pool.
    """

    def __init__(self, store: Store, processes: int) -> None:
        self.store = store
        # An in-memory SQLite database exists in this process only: threads it must be.
        self.processes = processes if store.engine.url.database not in (None, "", ":memory:") else 0
        self._pool: concurrent.futures.Executor | None = None

    def submit(self, read: Callable[..., _T], *args: object) -> concurrent.futures.Future[_T]:
        """`read(store, *args)` (a function of `queries`) on a worker; a pool found broken is
        replaced once."""
        for _ in range(2):
            pool = self._pool if self._pool is not None else self._new_pool()
            self._pool = pool
            try:
                if self.processes:
                    future = pool.submit(queries.in_worker, read, *args)
                else:
                    future = pool.submit(read, self.store, *args)
            except concurrent.futures.BrokenExecutor:
                self.forget(pool)
                continue
            future.pool = pool  # type: ignore[attr-defined] # for `forget` when it breaks later
            return future
        raise concurrent.futures.BrokenExecutor("the read workers cannot be started")

    def forget(self, pool: concurrent.futures.Executor) -> None:
        """Stop `pool`, whose worker died, if it is still the current one (another read may have
        replaced it already); the next read starts a new one."""
        if self._pool is pool:
            self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def shutdown(self) -> None:
        """Stop the pool (reads running finish on their own)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _new_pool(self) -> concurrent.futures.Executor:
        if not self.processes:
            return concurrent.futures.ThreadPoolExecutor(2, "hpcpredict-http-read")
        # spawn, not fork: the daemon has threads (the watcher's, SQLAlchemy's pool), and a fork
        # would copy their locks in whatever state they are.
        return concurrent.futures.ProcessPoolExecutor(
            self.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=queries.open_worker_store,
            initargs=(self.store.engine.url.render_as_string(hide_password=False),),
        )


class AdminApi:
    """The HTTP front of a running daemon (`ServedDaemon`): `start()` on its loop, `stop()`
    before it ends."""

    def __init__(self, daemon: ServedDaemon, auth: BearerAuth, limits: HttpLimits | None = None) -> None:
        self.daemon = daemon
        self.auth = auth
        self.limits = HttpLimits() if limits is None else limits
        self.address: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self._reads = StoreReads(daemon.service.store, self.limits.read_processes)
        self._connections: dict[asyncio.BaseTransport, _Connection] = {}
        self._requests_in_flight = 0
        self._reads_pending = 0
        self._report: tuple[float, bytes] | None = None  # (drawn at, the page) for GET /report
        self._report_drawing: asyncio.Future[bytes] | None = None

    # ------------------------------------------------------------------ life cycle
    async def start(self, host: str, port: int) -> None:
        app = web.Application(middlewares=[self._guard], client_max_size=self.limits.max_body_bytes)
        app.router.add_get("/health", self.health, name="health")
        app.router.add_get("/metrics", self.metrics, name="metrics")
        app.router.add_get("/errors", self.errors, name="errors")
        app.router.add_get("/users", self.users, name="users")
        app.router.add_get("/users/{uid}/errors", self.user_errors, name="user_errors")
        app.router.add_get("/summary", self.summary, name="summary")
        app.router.add_get("/users/{uid}/explain", self.user_explain, name="user_explain")
        app.router.add_get("/jobs/{job_id}/explain", self.job_explain, name="job_explain")
        app.router.add_get("/predictions", self.predictions, name="predictions")
        app.router.add_post("/predict", self.predict, name="predict")
        app.router.add_get("/report", self.report, name="report")
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, keepalive_timeout=self.limits.idle_timeout_s,
            shutdown_timeout=1.0, logger=_ClientFaults(logger, {}),
        )
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        # Our own listening socket rather than a web.TCPSite: each connection goes through
        # `_accept` (the connection cap, the idle deadline), then to aiohttp's protocol.
        self._server = await loop.create_server(
            self._accept, host, port, backlog=self.limits.backlog, reuse_address=True
        )
        self.address = self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections.values()):
                connection.transport.close()
            await self._server.wait_closed()
        if self._runner is not None:
            await self._runner.cleanup()
        self._reads.shutdown()

    def _accept(self) -> asyncio.BaseProtocol:
        assert self._runner is not None and self._runner.server is not None
        if len(self._connections) >= self.limits.max_connections and not self._shed_one_idle():
            self.daemon.handlers.metrics.http_requests[("refused", HTTPStatus.SERVICE_UNAVAILABLE)] += 1
            return _Refuse()
        return _Connection(self, self._runner.server(), asyncio.get_running_loop())

    def _shed_one_idle(self) -> bool:
        """Close the connection idle longest: its slot is the new connection's. A server may
        close an idle connection at any time (RFC 9112 §9.6); a client holding hundreds without
        asking anything loses them first. False when every connection has a request running."""
        idle = [c for c in self._connections.values() if c.idle_since is not None]
        if not idle:
            return False
        victim = min(idle, key=lambda connection: connection.idle_since)
        self._connections.pop(victim.transport, None)  # its slot is free now
        victim.transport.close()
        self.daemon.handlers.metrics.http_requests[("shed_idle", HTTPStatus.SERVICE_UNAVAILABLE)] += 1
        return True

    # ------------------------------------------------------------------ every request
    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Limits, authentication, timeout and errors as JSON, around every endpoint."""
        connection = self._connections.get(request.transport)  # type: ignore[arg-type]
        if connection is not None:
            connection.request_started()
        endpoint = request.match_info.route.name or "unmatched"
        try:
            response = await self._answer(request, handler, endpoint)
        finally:
            if connection is not None:
                connection.request_done()
        self.daemon.handlers.metrics.http_requests[(endpoint, response.status)] += 1
        response.headers["Server"] = "hpcpredict"  # not aiohttp's and Python's versions
        return response

    async def _answer(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                      endpoint: str) -> web.StreamResponse:
        limited = endpoint != "health"
        try:
            if limited and self._requests_in_flight >= self.limits.max_requests:
                raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "busy",
                                 f"{self._requests_in_flight} requests are being answered; retry shortly")
            self._requests_in_flight += limited
            try:
                if endpoint in PER_USER_ENDPOINTS:
                    self._authenticate(request, browser=endpoint in BROWSER_ENDPOINTS)
                async with asyncio.timeout(self.limits.request_timeout_s):
                    return await handler(request)
            finally:
                self._requests_in_flight -= limited
        except _HttpError as error:
            return _error_response(error.status, error.code, error.message, error.headers)
        except ProtocolError as error:
            status = {"internal": HTTPStatus.INTERNAL_SERVER_ERROR,
                      "unavailable": HTTPStatus.SERVICE_UNAVAILABLE}.get(error.code, HTTPStatus.BAD_REQUEST)
            return _error_response(status, error.code, str(error))
        except web.HTTPException as error:  # aiohttp's own: no route, wrong method, body too large
            code = _HTTP_CODES.get(error.status, "bad_request")
            headers = {key: value for key, value in error.headers.items() if key in ("Allow",)}
            message = f"{error.reason}: {request.method} {request.path[:200]}"
            if error.status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                message = f"body over {self.limits.max_body_bytes} bytes"
            return _error_response(error.status, code, message, headers)
        except TimeoutError:
            return _error_response(HTTPStatus.SERVICE_UNAVAILABLE, "timeout",
                                   f"no answer within {self.limits.request_timeout_s:g} s; retry later")
        except Exception:  # noqa: BLE001 - one bad request must not cost the others anything
            message = internal_error(f"http {request.method} {request.path[:200]}")
            return _error_response(HTTPStatus.INTERNAL_SERVER_ERROR, "internal", message)

    def _authenticate(self, request: web.Request, *, browser: bool = False) -> None:
        if not self.auth.configured:
            raise _HttpError(HTTPStatus.FORBIDDEN, "auth_not_configured",
                             "per-user endpoints are off: set http_token_file (serve --http-token-file) "
                             "to serve them to clients presenting its token")
        if not self.auth.allows(request.headers.get("Authorization"), basic=browser):
            if browser:  # the browser asks for a user name and password: any name, the token
                raise _HttpError(HTTPStatus.UNAUTHORIZED, "unauthorized",
                                 "log in with any user name and the token of http_token_file as the password, "
                                 "or send Authorization: Bearer <token>",
                                 {"WWW-Authenticate": 'Basic realm="hpcpredict", charset="UTF-8"'})
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "unauthorized",
                             "send the token of http_token_file: Authorization: Bearer <token>",
                             {"WWW-Authenticate": 'Bearer realm="hpcpredict"'})

    async def _off_loop(self, read: Callable[..., _T], *args: object) -> _T:
        """`read(store, *args)` in a read worker; 503 when too many reads are queued or running."""
        if self._reads_pending >= self.limits.max_requests:
            raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "busy",
                             f"{self._reads_pending} reads of the store are running; retry shortly")
        loop = asyncio.get_running_loop()
        try:
            future = self._reads.submit(read, *args)
        except concurrent.futures.BrokenExecutor as error:
            raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", str(error)) from None
        self._reads_pending += 1

        def done(_: concurrent.futures.Future[_T]) -> None:
            # Released when the worker is done, not when the request gives up waiting for it;
            # after the daemon stopped there is no loop to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._read_done)

        future.add_done_callback(done)
        try:
            return await asyncio.wrap_future(future)
        except concurrent.futures.BrokenExecutor:
            self._reads.forget(future.pool)  # type: ignore[attr-defined]
            raise _HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable",
                             "the read worker died; retry (a new one starts)") from None

    def _read_done(self) -> None:
        self._reads_pending -= 1

    # ------------------------------------------------------------------ endpoints
    async def health(self, request: web.Request) -> web.Response:
        health = self.daemon.health()
        unhealthy = health["status"] == "unhealthy"
        return _json(HTTPStatus.SERVICE_UNAVAILABLE if unhealthy else HTTPStatus.OK, health)

    async def metrics(self, request: web.Request) -> web.Response:
        gauges, counters = self.daemon.metric_values()  # memory: here, on the loop
        counts = self.daemon.handlers.metrics.snapshot()
        body, content_type = await self._off_loop(
            queries.metrics_exposition, counts, gauges, counters, request.headers.get("Accept", ""), os.getpid()
        )
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def errors(self, request: web.Request) -> web.Response:
        since_s = _query_int(request, "since")
        return _encoded(await self._off_loop(queries.as_json, queries.error_rows, None, since_s))

    async def user_errors(self, request: web.Request) -> web.Response:
        uid = get_int({"uid": request.match_info["uid"]}, "uid", minimum=0)  # the uid column's range
        since_s = _query_int(request, "since")
        row = await self._off_loop(queries.user_error_row, uid, since_s)  # one row: small
        if row is None:
            raise _HttpError(HTTPStatus.NOT_FOUND, "unknown_user", f"no judged jobs for user {uid}")
        return _json(HTTPStatus.OK, row)

    async def summary(self, request: web.Request) -> web.Response:
        since_s = _query_int(request, "since")
        db_url = self.daemon.service.store.engine.url.render_as_string(hide_password=True)
        return _json(HTTPStatus.OK, await self._off_loop(queries.summary, since_s, db_url))

    async def user_explain(self, request: web.Request) -> web.Response:
        uid = get_int({"uid": request.match_info["uid"]}, "uid", minimum=0)
        return await self._explain("user", uid)

    async def job_explain(self, request: web.Request) -> web.Response:
        job_id = get_int({"job_id": request.match_info["job_id"]}, "job_id", minimum=0)
        return await self._explain("job", job_id)

    async def _explain(self, kind: str, key: int) -> web.Response:
        """Why the model predicts what it does: restored from the store in a read worker (a
        checkpoint and the events after it), never from the loop's learner."""
        status, answer = await self._off_loop(queries.explain, kind, key, self.daemon.config)
        if status != HTTPStatus.OK:
            raise _HttpError(status, str(answer["code"]), str(answer["error"]))
        return _json(HTTPStatus.OK, answer)

    async def report(self, request: web.Request) -> web.Response:
        """The sysadmin's page, live: the daemon's state (/health, from memory, here) and the
        store's numbers and figures, drawn in a read worker. The plain page is drawn at most every
        `REPORT_MAX_AGE_S` and once for every fetch that arrives meanwhile; a page asking why a
        job (``?job=ID``) or a period (``?since=``) is drawn for its request."""
        job = _query_int(request, "job")
        since_s = _query_int(request, "since")
        if job is not None or since_s is not None:
            body = await self._draw_report(since_s, job)
        else:
            body = await self._plain_report()
        return web.Response(body=body, headers={"Content-Type": "text/html; charset=utf-8",
                                                "Cache-Control": "no-store"})

    async def _plain_report(self) -> bytes:
        loop = asyncio.get_running_loop()
        if self._report is not None and loop.time() - self._report[0] < REPORT_MAX_AGE_S:
            return self._report[1]
        if self._report_drawing is None:
            drawing = asyncio.ensure_future(self._draw_report(None, None))
            self._report_drawing = drawing

            def drawn(done: asyncio.Future[bytes]) -> None:
                self._report_drawing = None
                if not done.cancelled() and done.exception() is None:
                    self._report = (loop.time(), done.result())

            drawing.add_done_callback(drawn)
        # shield: a client that gives up must not cancel the drawing the others wait for
        return await asyncio.shield(self._report_drawing)

    async def _draw_report(self, since_s: int | None, job: int | None) -> bytes:
        db_url = self.daemon.service.store.engine.url.render_as_string(hide_password=True)
        return await self._off_loop(queries.report_page, since_s, db_url, self.daemon.health(), job,
                                    self.daemon.config)

    async def users(self, request: web.Request) -> web.Response:
        return _encoded(await self._off_loop(queries.as_json, queries.user_totals))

    async def predictions(self, request: web.Request) -> web.Response:
        limit = _query_int(request, "limit", default=50)
        if not 1 <= limit <= MAX_PREDICTIONS_LISTED:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", f"limit must be in 1..{MAX_PREDICTIONS_LISTED}")
        return _encoded(await self._off_loop(queries.as_json, queries.recent_predictions, limit))

    async def predict(self, request: web.Request) -> web.Response:
        """A PREDICT as the plugin would ask it, from a JSON object of its fields (from memory,
        on the loop; validated by the protocol's own field readers)."""
        fields = await self._body_fields(request)
        answer = self.daemon.handlers.call(Request("PREDICT", fields))
        return _json(HTTPStatus.OK, {"prediction_s": answer["prediction"], "time_limit_s": answer["time_limit"],
                                     "ready": answer["ready"], "reason": answer.get("reason", "")})

    async def _body_fields(self, request: web.Request) -> dict[str, Any]:
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                raw = await request.read()
        except TimeoutError:
            raise _HttpError(HTTPStatus.REQUEST_TIMEOUT, "timeout",
                             f"body not received within {self.limits.idle_timeout_s:g} s") from None
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, a 5,000-digit number, [[[[...
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", f"body is not JSON: {str(error)[:200]}") from None
        if not isinstance(body, dict):
            raise _HttpError(HTTPStatus.BAD_REQUEST, "bad_request", "body must be a JSON object of job fields")
        return body


class _Connection(asyncio.Protocol):
    """One HTTP connection: aiohttp's protocol, plus a deadline while no request is in progress.

    The deadline runs from the connection's start and again after each answer, and is not
    pushed back by data: a client trickling its headers a byte at a time is closed like one
    that sends nothing.
    """

    def __init__(self, api: AdminApi, handler: asyncio.Protocol, loop: asyncio.AbstractEventLoop) -> None:
        self.api = api
        self.handler = handler
        self.loop = loop
        self.transport: asyncio.BaseTransport | None = None
        self.requests = 0  # in progress (pipelined requests are answered one at a time)
        self.deadline: asyncio.TimerHandle | None = None
        self.idle_since: float | None = None  # loop time since no request is in progress

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.api._connections[transport] = self
        self._arm()
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.api._connections.pop(self.transport, None)  # type: ignore[arg-type]
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def request_started(self) -> None:
        self.requests += 1
        self.idle_since = None
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def request_done(self) -> None:
        self.requests -= 1
        if self.requests == 0:
            self._arm()

    def _arm(self) -> None:
        assert self.transport is not None
        self.idle_since = self.loop.time()
        self.deadline = self.loop.call_later(self.api.limits.idle_timeout_s, self.transport.close)


class _ClientFaults(logging.LoggerAdapter):
    """aiohttp's protocol logger, with its tracebacks at debug level.

    What reaches it is the client's doing (a request the parser refuses, a connection reset
    mid-answer): our own failures are logged by `_guard` under an error id. At error level, a
    scanner sending garbage in a loop would fill the daemon's log with tracebacks.
    """

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        self.debug(msg, *args, exc_info=exc_info, **kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.debug(msg, *args, **kwargs)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: a 503 written at once, then closed, without reading a byte."""

    BODY = json.dumps({"error": "too many connections; retry shortly", "code": "busy"}).encode()
    ANSWER = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s" % (len(BODY), BODY)
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.ANSWER)  # type: ignore[attr-defined]
        transport.close()


class _HttpError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


_HTTP_CODES = {
    HTTPStatus.NOT_FOUND: "not_found",
    HTTPStatus.METHOD_NOT_ALLOWED: "method_not_allowed",
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: "too_long",
}
_dumps = partial(json.dumps, allow_nan=False, default=str)


def _json(status: int, value: object) -> web.Response:
    return web.json_response(value, status=status, dumps=_dumps)


def _encoded(body: bytes) -> web.Response:
    """A 200 answer whose JSON a read worker has already encoded."""
    return web.Response(body=body, content_type="application/json", charset="utf-8")


def _error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    response = _json(status, {"error": message, "code": code})
    if status == HTTPStatus.SERVICE_UNAVAILABLE and code in ("busy", "timeout"):
        response.headers["Retry-After"] = "1"
    response.headers.update(headers or {})
    return response


def _query_int(request: web.Request, key: str, default: int | None = None) -> int | None:
    """An integer query parameter by the protocol's rules: ASCII digits, bounded (a 30-digit
    value is a 400, not an overflow deeper down)."""
    text = request.query.get(key)
    if text is None:
        return default
    return get_int({key: text}, key)
