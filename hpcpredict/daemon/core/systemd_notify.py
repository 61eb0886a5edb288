"""Tell systemd when the daemon is ready and when it stops (``Type=notify``; sd_notify(3)'s
protocol: newline-separated assignments in one datagram to the socket ``$NOTIFY_SOCKET`` names).

Why: with ``Type=exec`` systemd counts the daemon started as soon as Python runs, so ``systemctl
start hpcpredict`` returns, and a unit ordered after it (slurmctld: ``Before=`` in
deploy/hpcpredict.service) starts, while the daemon is still restoring its model, compiling its
kernels and opening its socket. With ``Type=notify`` they wait for READY=1, which `Daemon` sends
once PREDICT is answered, and ``systemctl status`` shows the daemon's STATUS= line.

Written here rather than taken from libsystemd (python-systemd is a C extension that Debian
packages only for its own python3): the protocol is one ``sendto``. Outside systemd (no
``$NOTIFY_SOCKET``) every call does nothing; a socket that cannot be reached is logged, never fatal.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

logger = logging.getLogger(__name__)


def notify_address(environ: Mapping[str, str]) -> str | None:
    """The socket address ``$NOTIFY_SOCKET`` names: a path, or an abstract socket (``@name``,
    the kernel's leading NUL); None when unset or of a kind not supported here (``vsock:``)."""
    path = environ.get("NOTIFY_SOCKET", "")
    if path.startswith("@"):
        return "\0" + path[1:]
    if path.startswith("/"):
        return path
    return None


def notify(*assignments: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``READY=1``, ``STATUS=...``, ``STOPPING=1``... to systemd; whether it was sent."""
    address = notify_address(os.environ if environ is None else environ)
    if address is None:
        return False
    message = "\n".join(assignments).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as channel:
            channel.sendto(message, address)
    except OSError as error:
        logger.warning("cannot tell systemd %s (NOTIFY_SOCKET=%s): %s", " ".join(assignments),
                       address.replace("\0", "@"), error)
        return False
    return True
