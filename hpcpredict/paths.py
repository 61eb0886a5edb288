"""Where the daemon keeps its state by default, shared by every command that reads it.

``$HPCPREDICT_STATE_DIR`` if set, else ``$XDG_STATE_HOME/hpcpredict`` (``~/.local/state`` when
XDG_STATE_HOME is unset): the embedded default for a user trying hpcpredict out. A site runs the
daemon with ``--db`` / ``--socket`` (or a configuration file) pointing at system paths.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_VARIABLE = "HPCPREDICT_STATE_DIR"
DB_FILE_NAME = "hpcpredict.db"


def state_dir() -> Path:
    explicit = os.environ.get(STATE_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "hpcpredict"


def default_db_url() -> str:
    """The SQLite file under `state_dir()` (not created here: only the daemon creates it)."""
    return f"sqlite:///{state_dir() / DB_FILE_NAME}"
