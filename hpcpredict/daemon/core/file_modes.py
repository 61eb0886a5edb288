"""The SQLite store's files are never readable by every user: the database holds every user's jobs.

`serve` and `train` create their files 0600 (cli/daemon.py's umask), and SQLite gives the -wal
and -shm files the database file's own mode. That leaves a database that already exists with a
loose mode: a backup restored or a copy made under a umask of 022 is 0644, and its -wal and
-shm then come out 0644 too (docs/daemon.md, "Reliability").

Such a file is **tightened**, not refused: the "other" bits are removed from the database and
from its -wal and -shm files (the group bits are kept: a site may let an admin group read the
store, as it may the token file, mode 0640), and the change is said in one line. Why not refuse:
the daemon's user owns these files (systemd's StateDirectory=), the loose mode is a copying
accident nobody means, and refusing would turn restoring a backup into an outage until someone
runs chmod. A file the daemon's user cannot chmod (another owner) is refused, in one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

OTHERS = 0o007  # read, write, execute for every user


class LooseModeError(RuntimeError):
    """A store file is open to every user and not ours to tighten."""


def sqlite_files(database: Path) -> list[Path]:
    """The database and the two files SQLite keeps beside it in WAL mode, by the name given."""
    return [database, Path(f"{database}-wal"), Path(f"{database}-shm")]


def tighten_store_modes(database: Path) -> list[str]:
    """Remove every user's access to the store's existing files; one line per file changed."""
    changed = []
    for path in sqlite_files(database):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except (FileNotFoundError, NotADirectoryError):  # no such file (its folder may be missing too)
            continue
        if not mode & OTHERS:
            continue
        tightened = mode & ~OTHERS
        try:
            os.chmod(path, tightened)
        except PermissionError:
            raise LooseModeError(
                f"{path}: mode {mode:04o} lets every user read the store (every user's jobs), and "
                f"this user may not change it: run `chmod o-rwx {path}` as its owner"
            ) from None
        changed.append(f"{path}: mode {mode:04o} let every user read the store (every user's "
                       f"jobs); made {tightened:04o}")
    return changed
