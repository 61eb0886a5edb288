"""Daemon reliability, round 2 (issue 29): what a hostile or careless local user could still do.

Each test here failed on main at 195fcb0; docs/daemon.md ("Reliability") lists them by case.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from hpcpredict.daemon.config import DaemonConfig

from daemon_thread import Running
from pg_server import PostgresServer


def serve_refused(short_dir: Path, db_url: str) -> str:
    """Start a second `hpcpredict serve` on `db_url` (its own socket): its stderr, once it
    stopped, which it must have done with an error."""
    result = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db_url,
         "--socket", str(short_dir / "second.sock"), "--http", "", "--spool", str(short_dir / "s.spool")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    assert not (short_dir / "second.sock").exists()
    return result.stderr


@pytest.fixture
def sqlite_running(short_dir: Path, tmp_path: Path) -> Iterator[Running]:
    config = DaemonConfig(db=f"sqlite:///{tmp_path / 'state.db'}", socket=str(short_dir / "d.sock"),
                          http="", spool=str(short_dir / "jobcomp.spool"))
    daemon = Running(config)
    yield daemon
    daemon.stop()


# ------------------------------------------------------------------ item 1: one daemon per store
@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_second_daemon_is_refused_through_another_name_of_the_database(
    sqlite_running: Running, short_dir: Path, tmp_path: Path, link: str
) -> None:
    """The lock follows the file (its inode), not the name the daemon was given."""
    database = Path(make_url(sqlite_running.config.db).database)
    other_name = tmp_path / "elsewhere" / "other-name.db"
    other_name.parent.mkdir()
    if link == "symlink":
        other_name.symlink_to(database)
    else:
        os.link(database, other_name)
    stderr = serve_refused(short_dir, f"sqlite:///{other_name}")
    assert "already serving this store" in stderr
    assert not Path(f"{other_name}-wal").exists()  # it never opened the store under its name
    with sqlite_running.client() as daemon:  # the first one still serves
        assert daemon.request("PING")["healthy"] == "1"


@pytest.mark.postgres
def test_a_second_daemon_is_refused_on_one_postgresql_database_named_differently(
    postgres_server: PostgresServer, short_dir: Path
) -> None:
    """localhost for 127.0.0.1, and another user: the advisory lock lives in the database."""
    url = postgres_server.create_database()
    config = DaemonConfig(db=url, socket=str(short_dir / "d.sock"), http="",
                          spool=str(short_dir / "jobcomp.spool"))
    admin = create_engine(postgres_server.admin_url, isolation_level="AUTOCOMMIT")
    role = f"hpcpredict_other_{os.getpid()}"
    running = Running(config)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE ROLE "{role}" LOGIN SUPERUSER'))
        given = make_url(url)
        names = [given.set(host="localhost") if given.host == "127.0.0.1" else given.set(host="127.0.0.1"),
                 given.set(username=role)]
        for other in names:
            stderr = serve_refused(short_dir, other.render_as_string(hide_password=False))
            assert "already serving this store" in stderr, (other, stderr)
        with running.client() as daemon:
            assert daemon.request("PING")["healthy"] == "1"
    finally:
        running.stop()
        postgres_server.drop_database(url)
        with admin.connect() as connection:
            connection.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()
