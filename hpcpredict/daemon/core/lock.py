"""One daemon per store: the lock `hpcpredict serve` holds for as long as it runs.

Two daemons on one store each checkpoint events the other learned, so after a restart the model
has skipped learning steps the log holds. The socket cannot prevent it: two
daemons may be given two sockets. So the store itself is locked:

* SQLite: an exclusive ``flock`` on the database file itself, i.e. on its inode, whatever name
  reaches it. A lock on ``<given path>.lock`` (what it was) followed the name: a second daemon
  through a symlink or a hard link locked another file and served beside the first; through a
  hard link each kept its own -wal file (SQLite names it after the path it was given), so an
  event one acknowledged was never in the other's database (docs/daemon.md, "Reliability").
  ``flock`` and SQLite's own locks (POSIX ``fcntl`` byte ranges) are separate kinds on Linux and
  do not see each other, so readers (``hpcpredict errors``) and SQLite's WAL locking are
  untouched. One rule of POSIX locks matters: closing *any* descriptor of a file drops every
  POSIX lock the process holds on it. The descriptor taken here is therefore closed only by
  `StoreLock.release`, after the store's connections are closed (the callers' order). The
  kernel drops the flock when the process dies, kill -9 included: no stale lock ever. (On NFS,
  Linux emulates flock with a whole-file POSIX lock, which would fight SQLite's; WAL needs a
  local file system anyway: store.py.)
* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a connection kept open
  for the daemon's life; the server releases it when that connection ends, for any reason. The
  lock lives in the server, keyed by the database (its OID) and a fixed key: two daemons naming
  one database differently (a host alias, 127.0.0.1 and localhost, another user) meet the same
  lock.
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
        database = Path(url.database)
        if not database.exists():
            with engine.connect():  # SQLite creates the file: there is an inode to lock
                pass
        return lock_sqlite_file(database)
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


def lock_sqlite_file(database: Path) -> StoreLock:
    """An exclusive flock on the SQLite file `database` (an existing file, any of its names),
    or `StoreLockedError` at once. What `lock_store` takes for SQLite; `serve` takes it before
    even reading the file's tables, since SQLite opening the file under another name (a hard
    link) would make a -wal file of that name beside the live one."""
    path = database.resolve()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        inode = os.fstat(fd).st_ino
        os.close(fd)  # this process has no store open yet (the callers lock first)
        raise StoreLockedError(
            f"another hpcpredict daemon is already serving this store (it holds a lock on {path}, "
            f"inode {inode}, whatever name it is given); stop it first"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return StoreLock(str(path), fd=fd)
