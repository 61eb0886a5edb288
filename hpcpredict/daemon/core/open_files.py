"""Open files: the daemon's limit raised at start, and the socket's share of it.

Every connection is a file descriptor. Under systemd's default (a soft limit of 1,024 open
files) one client holding 1,100 connections stopped every PREDICT for as long as it held them:
accept() failed with "Too many open files" and the plugin's connections waited in the queue
until they timed out. Three things now:

* at start the daemon raises its soft RLIMIT_NOFILE to the hard limit (any process may) and
  logs it; the unit sets the hard limit (``LimitNOFILE=65536`` in deploy/hpcpredict.service);
* the plugin's socket keeps `FD_RESERVE` descriptors out of reach of held connections
  (`max_held_connections`): a connection kept open past its first request (a tool, an idle
  client) is one of at most ``limit - FD_RESERVE``; past that, the one idle longest is closed
  to make room (socket_server.py). The reserve covers the admin API's 256 connections, the
  database's, the read workers' pipes and the listening sockets, so accept() always has a
  descriptor for the plugin, whose connect-ask-close PREDICT is answered as it is accepted;
* the listen backlog follows the kernel's ``net.core.somaxconn`` (4,096 by default since
  Linux 5.4) instead of asyncio's 100: a burst of 2,000 connects no longer overflows it.
"""

from __future__ import annotations

import logging
import resource
import socket
from pathlib import Path

logger = logging.getLogger(__name__)

SOMAXCONN_PATH = Path("/proc/sys/net/core/somaxconn")
# Descriptors the socket's held connections never take: the admin API's connection cap (256)
# and listen backlog (128), database connections, read workers' pipes, the spool, logs.
FD_RESERVE = 512
MIN_HELD_CONNECTIONS = 64  # under a tiny limit the reserve still leaves tools this many


def raise_open_files_limit() -> int:
    """Raise the soft open-files limit to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            logger.warning("open files: cannot raise the soft limit %d to the hard limit %d (%s)",
                           soft, hard, error)
            return soft
        logger.info("open files: soft limit raised from %d to the hard limit %d", soft, hard)
        return hard
    logger.info("open files: limit %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
    return soft


def max_held_connections(open_files_limit: int) -> int:
    """How many socket connections may stay open past their first request under that limit."""
    if open_files_limit == resource.RLIM_INFINITY:
        open_files_limit = 1 << 20
    return max(MIN_HELD_CONNECTIONS, open_files_limit - FD_RESERVE)


def listen_backlog() -> int:
    """The kernel's ceiling on a listening socket's queue (what listen() is capped to anyway)."""
    try:
        return max(int(SOMAXCONN_PATH.read_text()), socket.SOMAXCONN)
    except (OSError, ValueError):
        return socket.SOMAXCONN
