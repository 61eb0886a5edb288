"""A Python client of the daemon's socket protocol (docs/protocol.md).

What the corrector, the job-completion spool and the tools use to talk to a running daemon; the
SLURM plugin speaks the same protocol from Lua. One connection, reused, requests answered in
order.
"""

from __future__ import annotations

import socket
from types import TracebackType
from urllib.parse import unquote

from hpcpredict.daemon.fronts.protocol import format_request

DEFAULT_TIMEOUT_S = 5.0


class DaemonReplyError(RuntimeError):
    """The daemon answered ``ERR code message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class DaemonClient:
    """``with DaemonClient(path) as daemon: daemon.request("PREDICT", uid=..., ...)``."""

    def __init__(self, path: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = path
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.settimeout(timeout_s)
        try:
            self._socket.connect(path)
        except OSError:
            self._socket.close()
            raise
        self._reader = self._socket.makefile("rb")

    def request(self, verb: str, /, **fields: object) -> dict[str, str]:
        """Send one request; the answer's fields, or `DaemonReplyError` for an ``ERR``."""
        self._socket.sendall(format_request(verb, fields))
        return parse_answer(self._reader.readline())

    def close(self) -> None:
        self._reader.close()
        self._socket.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def parse_answer(line: bytes) -> dict[str, str]:
    """``OK k=v ...`` -> {k: v}; ``ERR code message`` -> `DaemonReplyError`."""
    if not line.endswith(b"\n"):
        raise ConnectionError("the daemon closed the connection before answering")
    text = line.decode("ascii").rstrip("\n")
    status, _, rest = text.partition(" ")
    if status == "ERR":
        code, _, message = rest.partition(" ")
        raise DaemonReplyError(code, message)
    if status != "OK":
        raise ConnectionError(f"not a daemon answer: {text[:100]!r}")
    answer: dict[str, str] = {}
    for word in rest.split():
        key, _, value = word.partition("=")
        answer[key] = unquote(value)
    return answer

