"""One daemon per store: the lock `hpcpredict serve` holds for as long as it runs.

Two daemons on one store each checkpoint events the other learned, so after a restart the model
has skipped learning steps the log holds. The socket cannot prevent it: two
daemons may be given two sockets. So the store itself is locked:

* SQLite: an exclusive ``flock`` on ``<database>.lock`` beside the file (not on the database
  file: SQLite's own POSIX locks on it must stay its business). The kernel drops the lock when
  the process dies, kill -9 included, so a crash never leaves a stale lock behind.
* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a connection kept open
  for the daemon's life; the server releases it when that connection ends, for any reason.
* An in-memory SQLite database is private to its process: nothing to lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

# The advisory lock's key: any 64-bit constant unlikely to be used by another application
# sharing the database ("hpcpred" in ASCII).
ADVISORY_LOCK_KEY = int.from_bytes(b"hpcpred", "big")


class StoreLockedError(RuntimeError):
    """Another daemon holds the store's lock."""


class StoreLock:
    """The held lock on one store; `release` (or process exit) frees it."""

    def __init__(self, description: str, fd: int | None = None, connection: Any = None) -> None:
        self.description = description
        self._fd = fd
        self._connection = connection

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
        if self._connection is not None:
            try:
                self._connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY})
            finally:
                self._connection.close()
                self._connection = None


def lock_store(engine: Engine) -> StoreLock:
    """Take the store's lock, or raise `StoreLockedError` at once (never wait for it)."""
    url = make_url(engine.url)
    if engine.dialect.name == "sqlite":
        if not url.database or url.database == ":memory:":
            return StoreLock("in-memory database")
        return _lock_file(Path(url.database + ".lock"))
    if engine.dialect.name == "postgresql":
        connection = engine.connect()
        try:
            taken = connection.execute(
                text("SELECT pg_try_advisory_lock(:key)"), {"key": ADVISORY_LOCK_KEY}
            ).scalar()
            connection.commit()  # end the implicit transaction; the session-level lock stays
        except BaseException:
            connection.close()
            raise
        if not taken:
            connection.close()
            raise StoreLockedError(
                f"another hpcpredict daemon is already serving this store (PostgreSQL advisory lock "
                f"{ADVISORY_LOCK_KEY} on database {url.database!r} is held); stop it first"
            )
        return StoreLock(f"advisory lock {ADVISORY_LOCK_KEY}", connection=connection)
    return StoreLock(f"no lock for {engine.dialect.name}")


def _lock_file(path: Path) -> StoreLock:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(
            f"another hpcpredict daemon is already serving this store (it holds {path}); stop it first"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    # Who holds it, for an admin looking at the file (informative only: the flock is the lock).
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return StoreLock(str(path), fd=fd)
