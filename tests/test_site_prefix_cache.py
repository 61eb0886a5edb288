"""The site tests' cached venvs (testbed/site_install.py) do not pile up: each change of the
dependencies makes a new ~700 MB prefix, and a build first removes those no test has used for
`STALE_AFTER_S`, by the stamp each use touches (the folder's own time when it has none)."""

from __future__ import annotations

import os
from pathlib import Path

from testbed.site_install import LAST_USED, STALE_AFTER_S, prune_stale_prefixes

DAY_S = 24 * 3600


def folder(root: Path, name: str, age_s: float, now: float, *, stamped: bool = True) -> Path:
    path = root / name
    (path / "venv").mkdir(parents=True)
    if stamped:
        (path / LAST_USED).touch()
        os.utime(path / LAST_USED, (now - age_s, now - age_s))
    os.utime(path, (now - age_s, now - age_s))
    return path


def test_only_the_prefixes_unused_for_a_week_are_removed(tmp_path: Path) -> None:
    now = 2_000_000_000.0
    assert STALE_AFTER_S == 7 * DAY_S
    kept = [folder(tmp_path, "prefix-current", 0, now), folder(tmp_path, "prefix-used-6-days-ago", 6 * DAY_S, now),
            folder(tmp_path, "building-2-days-old", 2 * DAY_S, now, stamped=False)]
    stale = [folder(tmp_path, "prefix-used-8-days-ago", 8 * DAY_S, now),
             folder(tmp_path, "prefix-unstamped-old", 30 * DAY_S, now, stamped=False),
             folder(tmp_path, "building-killed-long-ago", 9 * DAY_S, now, stamped=False)]
    built_long_ago = folder(tmp_path, "prefix-built-long-ago-used-today", 0, now)
    os.utime(built_long_ago, (now - 60 * DAY_S, now - 60 * DAY_S))  # its use counts, not its age
    kept.append(built_long_ago)
    lock = tmp_path / ".lock"
    lock.touch()
    os.utime(lock, (now - 90 * DAY_S, now - 90 * DAY_S))
    removed = prune_stale_prefixes(tmp_path, now=now)
    assert sorted(removed) == sorted(stale)
    assert all(path.is_dir() for path in kept) and not any(path.exists() for path in stale)
    assert lock.exists()  # not a prefix
