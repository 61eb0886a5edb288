"""The Unix socket the SLURM plugin asks: one line per request, one answer line each.

The socket is created with a umask that keeps it private from the first instant, then given
`DaemonConfig.socket_mode` (0600: only the daemon's own user, i.e. slurmctld's SlurmUser, may
connect) and optionally a group. Every request is answered on the event loop from memory
(`Handlers.handle_line`): nothing here waits on the HTTP API or its reads.
"""

from __future__ import annotations

import asyncio
import grp
import os
import socket
import stat
from pathlib import Path

from hpcpredict.daemon.config import DaemonConfig, DaemonError
from hpcpredict.daemon.handlers import Handlers
from hpcpredict.daemon.paths import state_dir
from hpcpredict.daemon.protocol import MAX_LINE_BYTES, format_error

IDLE_TIMEOUT_S = 60.0  # a socket client silent this long is disconnected


async def start_socket(path: Path, config: DaemonConfig, handlers: Handlers) -> asyncio.AbstractServer:
    """Listen on `path` for the plugin; refuse to replace a socket some daemon still answers on."""
    clear_stale_socket(path)
    socket_folder(path)
    loop = asyncio.get_running_loop()
    previous = os.umask(0o177)  # private from the first instant; chmod below widens it
    try:
        server = await loop.create_unix_server(lambda: LineProtocol(handlers, loop), path=str(path))
    finally:
        os.umask(previous)
    os.chmod(path, config.socket_mode)
    if config.socket_group:
        try:
            os.chown(path, -1, grp.getgrnam(config.socket_group).gr_gid)
        except KeyError:
            server.close()
            raise DaemonError(f"socket_group: no such group {config.socket_group!r}") from None
    return server


class LineProtocol(asyncio.Protocol):
    """One socket connection: lines in, one answer line each, in order.

    A `Protocol` rather than asyncio streams: no task per connection and no timer task per
    line, which is what the plugin's connect-ask-close pattern pays for at every ``sbatch``.
    A client that stops reading its answers is paused (flow control), one that sends nothing
    for `IDLE_TIMEOUT_S` is disconnected, and a line over `MAX_LINE_BYTES` is answered
    ``too_long`` and the connection closed (it cannot be resynchronised).
    """

    def __init__(self, handlers: Handlers, loop: asyncio.AbstractEventLoop) -> None:
        self.handlers = handlers
        self.loop = loop
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.handlers.metrics.connections += 1
        self.idle = self.loop.call_later(IDLE_TIMEOUT_S, transport.close)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        while True:
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) > MAX_LINE_BYTES:
                    self._too_long()
                return
            if end > MAX_LINE_BYTES + 1:
                self._too_long()
                return
            line = bytes(self.buffer[:end]).rstrip(b"\r")
            del self.buffer[: end + 1]
            self.transport.write(self.handlers.handle_line(line))
            if self.transport.is_closing():
                return
            if self.idle is not None:
                self.idle.cancel()
                self.idle = self.loop.call_later(IDLE_TIMEOUT_S, self.transport.close)

    def eof_received(self) -> bool:
        assert self.transport is not None
        if self.buffer.strip():  # a last request without its newline
            self.transport.write(self.handlers.handle_line(bytes(self.buffer).strip()))
            self.buffer.clear()
        return False  # close once the answer is written

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle is not None:
            self.idle.cancel()

    def pause_writing(self) -> None:
        assert self.transport is not None
        self.transport.pause_reading()  # a client not reading its answers gets no new ones

    def resume_writing(self) -> None:
        assert self.transport is not None
        self.transport.resume_reading()

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
