"""The Unix socket the SLURM plugin asks: one line per request, one answer line each.

The socket is created with a umask that keeps it private from the first instant, then given
`DaemonConfig.socket_mode` (0600: only the daemon's own user, i.e. slurmctld's SlurmUser, may
connect) and optionally a group. PING and PREDICT are answered on the event loop from memory;
events are handed to the store writer (writer.py) and answered once committed, in the order of
the connection's requests: nothing here waits on the database, the HTTP API or its reads.

The plugin connects, sends one PREDICT, half-closes and reads one answer at every ``sbatch``.
`SocketServer` accepts on the loop itself and answers such a connection as it accepts it, when
the request and the half-close are already there: no transport, protocol, timer or task for it,
which halves the daemon's CPU per connect-ask-close PREDICT (docs/performance.md). Every other
connection (a tool keeping its connection, an event, a request not arrived yet) is served by a
`LineProtocol` with what was read so far.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import grp
import logging
import os
import resource
import socket
import stat
import time
from pathlib import Path
from typing import Any

from hpcpredict.daemon.core.config import DaemonConfig, DaemonError
from hpcpredict.daemon.fronts.handlers import EVENT_VERBS, Handlers
from hpcpredict.daemon.core.open_files import listen_backlog, max_held_connections
from hpcpredict.paths import state_dir
from hpcpredict.daemon.fronts.protocol import MAX_LINE_BYTES, Request, format_error
from hpcpredict.daemon.core.writer import LoopInbox, StoreWriter, WriterBusyError, WriterStoppedError

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0  # a socket client silent this long is disconnected
# Connections accepted (and answered, when they can be at once) per turn of the loop. Small: an
# event needs three turns (its request read, its learning step, its answer), and under a storm of
# PREDICTs new connections keep arriving while the batch is served. With 64, a turn served up to
# 64 connections (64 x ~130 µs) and events got 24-25/s of the 200/s offered; with 4, 150-183/s.
ACCEPT_BATCH = 4
# Out of file descriptors or memory with no idle connection to close: accepting pauses this long
# (the pending connections wait in the kernel's queue; the plugin's timeout makes them fail open)
# instead of spinning on the error.
ACCEPT_RETRY_S = 1.0
SHED_ON_EMFILE = 16  # idle held connections closed when accept() finds no descriptor left
RECEIVE_BYTES = 65536
# Events of one connection waiting for the writer; past it the connection is not read until they
# drain, so a client pipelining 3,000 ENDs is slowed by its socket buffer, not refused, and
# cannot fill the writer's backlog alone.
MAX_EVENTS_IN_FLIGHT = 64


def start_socket(path: Path, config: DaemonConfig, handlers: Handlers, writer: StoreWriter,
                 *, open_files_limit: int | None = None) -> SocketServer:
    """Listen on `path` for the plugin (on the running loop); refuse to replace a socket some
    daemon still answers on. `open_files_limit`: the process's (open_files.py; None: read it)."""
    clear_stale_socket(path)
    socket_folder(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        previous = os.umask(0o177)  # private from the first instant; chmod below widens it
        try:
            listener.bind(str(path))
        finally:
            os.umask(previous)
        listener.listen(listen_backlog())
        listener.setblocking(False)
        os.chmod(path, config.socket_mode)
        if config.socket_group:
            try:
                os.chown(path, -1, grp.getgrnam(config.socket_group).gr_gid)
            except KeyError:
                raise DaemonError(f"socket_group: no such group {config.socket_group!r}") from None
    except BaseException:
        listener.close()
        raise
    if open_files_limit is None:
        open_files_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    server = SocketServer(listener, handlers, writer, asyncio.get_running_loop(),
                          max_held=max_held_connections(open_files_limit))
    server.start()
    return server


def send_now(connection: socket.socket, data: bytes) -> int:
    """Bytes of `data` the kernel took at once (0 if none) from a non-blocking socket; OSError
    when the connection is broken."""
    try:
        return connection.send(data)
    except (BlockingIOError, InterruptedError):
        return 0


def one_line(data: bytes) -> bytes | None:
    """The request when `data` is exactly one complete line within the limit, as `LineProtocol`
    would cut it; None for anything else (left to `LineProtocol`'s rules)."""
    end = data.find(b"\n")
    if end != len(data) - 1 or end > MAX_LINE_BYTES + 1:
        return None
    return data[:end].rstrip(b"\r")


class SocketServer:
    """The listening socket, accepted on the loop without asyncio's task per connection.

    A connection whose one request line and half-close have arrived by the time it is accepted
    (the plugin's pattern) and that asks PING or PREDICT is answered and closed right there;
    anything else is handed, with the bytes already read, to a `LineProtocol` (asyncio's
    `connect_accepted_socket`), which applies every rule: events, limits, timeouts, ordering.
    """

    def __init__(
        self, listener: socket.socket, handlers: Handlers, writer: StoreWriter, loop: asyncio.AbstractEventLoop,
        *, max_held: int = 1 << 20,
    ) -> None:
        """`max_held`: connections served past their first read (`LineProtocol`) at most; past
        it the one idle longest is closed to make room (open_files.py says why)."""
        self.listener = listener
        self.handlers = handlers
        self.writer = writer
        self.loop = loop
        self.inbox = LoopInbox(loop)  # the events' answers, back from the writer (one for every connection)
        self.handovers: set[asyncio.Task[Any]] = set()  # connections being given their transport
        self.accepting = False
        self.closed = False
        self.max_held = max_held
        # The `LineProtocol` connections, the least recently active first (`touched` moves one
        # to the end): who is closed first when the cap or the descriptors run out.
        self.held: collections.OrderedDict[LineProtocol, None] = collections.OrderedDict()
        self.shed = 0  # idle connections closed to make room, since start

    # ------------------------------------------------------------------ held connections
    def joined(self, connection: LineProtocol) -> bool:
        """A connection is served past its first read; False (it is refused) when the cap is
        reached and no other connection is idle."""
        if len(self.held) >= self.max_held and not self.shed_idle(1):
            return False
        self.held[connection] = None
        return True

    def touched(self, connection: LineProtocol) -> None:
        if connection in self.held:
            self.held.move_to_end(connection)

    def left(self, connection: LineProtocol) -> None:
        self.held.pop(connection, None)

    def shed_idle(self, count: int) -> int:
        """Close up to `count` idle connections (nothing waiting, nothing half-read), the least
        recently active first; how many were closed."""
        victims = []
        for connection in self.held:
            if connection.is_idle():
                victims.append(connection)
                if len(victims) == count:
                    break
        for connection in victims:
            self.held.pop(connection, None)
            connection.shed()
        if victims:
            self.shed += len(victims)
            self.handlers.metrics.shed_connections += len(victims)
        return len(victims)

    def start(self) -> None:
        if not self.closed and not self.accepting:
            self.loop.add_reader(self.listener.fileno(), self._accept_ready)
            self.accepting = True

    def close(self) -> None:
        """Stop accepting (connections already served keep their transports, as asyncio's
        `Server.close` leaves them)."""
        if self.accepting:
            self.loop.remove_reader(self.listener.fileno())
            self.accepting = False
        self.closed = True
        self.listener.close()

    async def wait_closed(self) -> None:
        """Until the connections being handed over have their transports."""
        if self.handovers:
            await asyncio.gather(*self.handovers, return_exceptions=True)

    def _accept_ready(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                connection, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in (errno.EMFILE, errno.ENFILE) and self.shed_idle(SHED_ON_EMFILE):
                    self.loop.call_soon(self._accept_ready)  # descriptors freed: accept again
                    return
                if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    logger.error("socket: cannot accept connections (%s); retrying in %g s",
                                 error.strerror or error, ACCEPT_RETRY_S)
                    self.loop.remove_reader(self.listener.fileno())
                    self.accepting = False
                    self.loop.call_later(ACCEPT_RETRY_S, self.start)
                    return
                continue  # this one connection failed (ECONNABORTED...): the next may not
            connection.setblocking(False)
            self._first_read(connection)
            self.handlers.metrics.connections += 1  # counted once its first read is done

    def _first_read(self, connection: socket.socket) -> None:
        began = time.perf_counter()
        try:
            received = connection.recv(RECEIVE_BYTES)
        except (BlockingIOError, InterruptedError):
            received = None  # nothing sent yet
        except OSError:
            connection.close()  # reset by the client already
            return
        if received == b"":  # closed without a request
            connection.close()
            return
        if received is not None and self._answer_at_once(connection, received, began):
            return
        self._hand_over(connection, received or b"")

    def _answer_at_once(self, connection: socket.socket, received: bytes, began: float) -> bool:
        """Answer and close a half-closed connection's one PING or PREDICT; False if it is not
        one (nothing is consumed then but `received`, which the caller passes on)."""
        line = one_line(received)
        if line is None or not half_closed(connection):
            return False
        request = self.handlers.parse(line)
        if isinstance(request, bytes):
            answer = request
        elif request.verb in EVENT_VERBS:
            return False
        else:
            answer = answer_and_count(self.handlers, request, began)
        try:
            sent = send_now(connection, answer)
        except OSError:  # the client is gone already (EPIPE, ECONNRESET): nobody to answer
            connection.close()
            return True
        if sent == len(answer):
            self.handlers.metrics.answered_at_accept += 1
            connection.close()
        else:  # the kernel's buffer is full (it is empty for a new connection, but be right)
            self._hand_over(connection, b"", unsent=answer[sent:])
        return True

    def _hand_over(self, connection: socket.socket, received: bytes, *, unsent: bytes = b"") -> None:
        """Serve `connection` with a `LineProtocol` that starts from the bytes already read."""

        def protocol() -> LineProtocol:
            return LineProtocol(self.handlers, self.writer, self.loop, self.inbox, received=received, unsent=unsent,
                                server=self)

        async def connect() -> None:
            try:
                await self.loop.connect_accepted_socket(protocol, sock=connection)
            except OSError:
                connection.close()

        task = self.loop.create_task(connect())
        self.handovers.add(task)
        task.add_done_callback(self.handovers.discard)


def half_closed(connection: socket.socket) -> bool:
    """The client has shut down its side (nothing more will come): the end of its stream is
    the next thing to read."""
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # nothing yet (EAGAIN), or a reset the hand-over will meet
        return False


def answer_and_count(handlers: Handlers, request: Request, began: float) -> bytes:
    """The answer to a PING or PREDICT, counted with its latency from `began`."""
    answer, outcome = handlers.answer(request)
    handlers.metrics.observe(request.verb, outcome, time.perf_counter() - began)
    return answer


class LineProtocol(asyncio.Protocol):
    """One socket connection: lines in, one answer line each, in order.

    A `Protocol` rather than asyncio streams: no task per connection and no timer task per
    line, which is what the plugin's connect-ask-close pattern pays for at every ``sbatch``.
    A client that stops reading its answers is paused (flow control), one that sends nothing
    for `IDLE_TIMEOUT_S` is disconnected, and a line over `MAX_LINE_BYTES` is answered
    ``too_long`` and the connection closed (it cannot be resynchronised).

    PING and PREDICT are answered here, on the loop. An event is handed to the store writer as a
    plain job and answered when it has committed (the answer comes back through the
    `LoopInbox`, with the other answers ready by then); answers wait in `pending` so that they
    leave in the order of their requests. Past `MAX_EVENTS_IN_FLIGHT` events waiting, the
    connection is not read until they drain; past the writer's backlog, an event is answered
    ``ERR busy`` at once.
    """

    def __init__(
        self, handlers: Handlers, writer: StoreWriter, loop: asyncio.AbstractEventLoop, inbox: LoopInbox,
        *, received: bytes = b"", unsent: bytes = b"", server: SocketServer | None = None,
    ) -> None:
        """`received`: what `SocketServer` read before handing the connection over; `unsent`:
        an answer it could not write whole (the connection is then closed once it is written);
        `server`: the one counting held connections (None: not counted)."""
        self.server = server
        self.received = received
        self.unsent = unsent
        self.handlers = handlers
        self.writer = writer
        self.loop = loop
        self.inbox = inbox
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None
        # Answers not written yet, in request order: [answer, or None while its event is being
        # committed; verb; began].
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.in_flight = 0  # events handed to the writer, not answered yet
        self.paused_by_client = False  # the client does not read its answers (pause_writing)
        self.paused_by_events = False  # too many events in flight
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.server is not None and not self.server.joined(self):
            self.transport.write(format_error("busy", "too many connections are held open; retry shortly"))
            self.transport.close()
            self.server = None
            return
        self.idle = self.loop.call_later(IDLE_TIMEOUT_S, transport.close)
        if self.unsent:
            self.transport.write(self.unsent)
            self.transport.close()  # after the write: the request was the client's last
        elif self.received:
            self.data_received(self.received)

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
        if self.server is not None:
            self.server.touched(self)
        request = self.handlers.parse(line)
        if isinstance(request, bytes):
            self._reply(request)
            return
        if request.verb not in EVENT_VERBS:
            self._reply(answer_and_count(self.handlers, request, began))
            return
        entry: list[Any] = [None, request.verb, began]
        try:
            self.writer.run_soon(lambda: self._commit(request, entry))
        except (WriterBusyError, WriterStoppedError) as error:
            code = "busy" if isinstance(error, WriterBusyError) else "unavailable"
            self.handlers.metrics.observe(request.verb, code, time.perf_counter() - began)
            self._reply(format_error(code, str(error)))
            return
        self.pending.append(entry)
        self.in_flight += 1
        if self.in_flight >= MAX_EVENTS_IN_FLIGHT and not self.paused_by_events:
            self.paused_by_events = True
            self._update_reading()

    def _reply(self, answer: bytes) -> None:
        assert self.transport is not None
        if self.pending:  # behind an event's answer
            self.pending.append([answer, "", 0.0])
        else:
            self.transport.write(answer)

    def _commit(self, request: Request, entry: list[Any]) -> None:
        """On the writer's thread: record the event (its answer once committed; never raises)
        and hand the answer to the loop."""
        self.inbox.put(self._event_answered, entry, self.handlers.answer(request))

    def _event_answered(self, entry: list[Any], answered: tuple[bytes, str]) -> None:
        """On the loop: an event's answer is ready; write what is ready, in order."""
        answer, outcome = answered
        entry[0] = answer
        self.handlers.metrics.observe(entry[1], outcome, time.perf_counter() - entry[2])
        self.in_flight -= 1
        self._flush()

    def _flush(self) -> None:
        """Write the answers at the head of `pending` that are ready, in order (one write: an
        event's answer and the PREDICT answers queued behind it leave together)."""
        assert self.transport is not None
        ready = []
        while self.pending and self.pending[0][0] is not None:
            ready.append(self.pending.popleft()[0])
        if ready and not self.transport.is_closing():
            self.transport.write(b"".join(ready))
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
        if self.server is not None:
            self.server.left(self)

    def is_idle(self) -> bool:
        """Nothing to answer and nothing half-read: closing it now loses nobody anything."""
        return not self.pending and self.in_flight == 0 and not self.buffer

    def shed(self) -> None:
        """Closed by the server to make room (`SocketServer.shed_idle`): said on the line first,
        so a tool knows why (an idle client may be closed at any time, as after IDLE_TIMEOUT_S)."""
        self.server = None  # the server has forgotten it already
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(format_error("busy", "connection closed to make room: too many are held open"))
            self.transport.close()

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


def socket_folder(path: Path) -> None:
    """Create the socket's folder only when it is the default state directory: a mistyped
    --socket must not make /nonexistent/ as root (systemd's RuntimeDirectory= makes /run/hpcpredict)."""
    if path.parent.is_dir():
        return
    if path.parent != state_dir():
        raise DaemonError(f"socket {path}: folder {path.parent} does not exist (create it, or use "
                          "RuntimeDirectory= in the systemd unit)")
    path.parent.mkdir(parents=True, exist_ok=True)


def clear_stale_socket(path: Path) -> None:
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
