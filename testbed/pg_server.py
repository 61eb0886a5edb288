"""A PostgreSQL server for the test suite: a throwaway cluster from Debian's packages, on loopback.

`PostgresServer.from_environment` gives, in this order:

1. the server named by ``HPCPREDICT_TEST_POSTGRES_URL`` (e.g.
   ``postgresql+psycopg://hpcpredict@db.example/postgres``), whose role must be allowed to
   ``CREATE DATABASE``: each test gets a database of its own, dropped afterwards, and nothing
   else on that server is touched;
2. otherwise a cluster of our own: Debian's server binaries (``/usr/lib/postgresql/*/bin``,
   package ``postgresql``, installed by the run's set-up step, testbed/system_packages.py), ``initdb`` in a
   temporary directory, started on 127.0.0.1 with a free port, its Unix socket in that directory,
   trust authentication (loopback only), stopped and deleted by `stop`.

Anything that makes this impossible raises `ServerUnavailable` with what to do; the caller (the
``postgres_server`` fixture in conftest.py) turns that into a skip, or into a failure when
``HPCPREDICT_REQUIRE_SERVERS=1`` (CI), so that a broken set-up cannot pass as "skipped".

A fresh database per test (``CREATE DATABASE``, about 0.1 s on this throwaway cluster since
durability is off) rather than dropping tables: nothing leaks from one test to the next,
sequences included (the service tests assert event sequence numbers), and `copy_database`
clones a prepared database through ``CREATE DATABASE ... TEMPLATE`` the way the SQLite tests
copy a file.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, Engine, make_url

POSTGRES_URL_VARIABLE = "HPCPREDICT_TEST_POSTGRES_URL"
DEBIAN_SERVER_DIRS = Path("/usr/lib/postgresql")  # one <major version>/bin per installed server
DEBIAN_PACKAGES = ("postgresql",)  # the distribution's default server version
SERVER_USER = "postgres"  # created by Debian's package; PostgreSQL refuses to run as root
DRIVER = "postgresql+psycopg"  # psycopg 3, the `postgresql` and `test` extras of pyproject.toml
START_TIMEOUT_S = 60  # pg_ctl -w: wait this long for the server to accept connections
START_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it

# Durability off: the cluster is deleted at the end of the session and the server process is
# never the one a test kills, so syncing buys nothing and costs most of CREATE DATABASE.
_THROWAWAY_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be had here; the message says why and what would fix it."""


class PostgresServer:
    """Creates, copies and drops the test databases of one server (ours or the environment's)."""

    def __init__(self, admin_url: URL, *, cluster: _Cluster | None = None) -> None:
        self.admin_url = admin_url
        self._cluster = cluster
        # AUTOCOMMIT: CREATE/DROP DATABASE cannot run inside a transaction.
        self._admin: Engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self._names = (f"hpcpredict_test_{os.getpid()}_{n}" for n in itertools.count(1))

    @classmethod
    def from_environment(cls) -> PostgresServer:
        _require_driver()
        configured = os.environ.get(POSTGRES_URL_VARIABLE)
        if configured:
            server = cls(make_url(configured))
        else:
            cluster = _Cluster.start(_server_bin_dir())
            server = cls(cluster.url("postgres"), cluster=cluster)
        try:
            with server._admin.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as error:
            server.stop()
            where = POSTGRES_URL_VARIABLE if configured else "the test cluster"
            raise ServerUnavailable(f"cannot connect to {where}: {error}") from error
        return server

    def create_database(self, template_url: str | None = None) -> str:
        """A new empty database (or a copy of `template_url`'s, which nobody may be connected
        to: close its stores first); returns its URL."""
        name = next(self._names)
        statement = f'CREATE DATABASE "{name}"'
        if template_url is not None:
            statement += f' TEMPLATE "{make_url(template_url).database}"'
        with self._admin.connect() as connection:
            connection.execute(text(statement))
        return self.admin_url.set(database=name).render_as_string(hide_password=False)

    def drop_database(self, url: str) -> None:
        """Drop a database made by `create_database`, ending any connection a test left open
        (WITH (FORCE): PostgreSQL 13 and later)."""
        name = make_url(url).database
        with self._admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def stop(self) -> None:
        self._admin.dispose()
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None


class _Cluster:
    """A cluster of our own in a temporary directory, run as `SERVER_USER` when we are root."""

    def __init__(self, bin_dir: Path, base_dir: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.base_dir = base_dir
        self.data_dir = base_dir / "data"
        self.log_path = base_dir / "server.log"
        self.port = port

    @classmethod
    def start(cls, bin_dir: Path) -> _Cluster:
        base_dir = Path(tempfile.mkdtemp(prefix="hpcpredict-pg-"))
        try:
            if os.geteuid() == 0:
                account = _server_account()
                os.chown(base_dir, account.pw_uid, account.pw_gid)
            cluster = cls(bin_dir, base_dir, 0)
            cluster._initdb()
            attempt = 1
            while True:
                cluster.port = _free_port()
                try:
                    cluster._pg_ctl(
                        "start", "-w", "-t", str(START_TIMEOUT_S), "-o", f"-p {cluster.port}"
                    )
                    return cluster
                except ServerUnavailable:
                    if attempt == START_ATTEMPTS:
                        raise
                    attempt += 1
        except BaseException:
            shutil.rmtree(base_dir, ignore_errors=True)
            raise

    def url(self, database: str) -> URL:
        return URL.create(
            DRIVER, username=SERVER_USER, host="127.0.0.1", port=self.port, database=database
        )

    def stop(self) -> None:
        try:
            self._pg_ctl("stop", "-w", "-m", "fast")
        finally:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def _initdb(self) -> None:
        _run_as_server_user(
            [
                str(self.bin_dir / "initdb"),
                f"--pgdata={self.data_dir}",
                f"--username={SERVER_USER}",
                "--auth=trust",  # pg_hba.conf: local socket and 127.0.0.1/::1 only
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",  # see _THROWAWAY_SETTINGS
            ],
            "initdb",
        )
        settings = dict(_THROWAWAY_SETTINGS, unix_socket_directories=f"'{self.base_dir}'")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# hpcpredict tests (testbed/pg_server.py)\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _pg_ctl(self, *arguments: str) -> None:
        command = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path)]
        try:
            _run_as_server_user([*command, *arguments], f"pg_ctl {arguments[0]}")
        except ServerUnavailable as error:
            log = (
                self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
            )
            raise ServerUnavailable(f"{error}\nserver log ({self.log_path}):\n{log}") from error


def _require_driver() -> None:
    try:
        import psycopg  # noqa: F401 - only checking that the driver is installed
    except ImportError as error:
        raise ServerUnavailable(
            "the PostgreSQL driver is not installed: pip install -e '.[test]' (psycopg)"
        ) from error


def _server_bin_dir() -> Path:
    """Debian's newest installed server binaries (package `postgresql`, never installed from here:
    testbed/system_packages.py installs it once, before any test)."""
    found = _find_server_bin_dir()
    if found is None:
        raise ServerUnavailable(
            f"PostgreSQL's server is not installed (no initdb under {DEBIAN_SERVER_DIRS}/*/bin): install "
            f"Debian's package {' '.join(DEBIAN_PACKAGES)} (`python3 -m testbed.system_packages` as root), "
            f"or set {POSTGRES_URL_VARIABLE}"
        )
    return found


def _find_server_bin_dir() -> Path | None:
    def major(bin_dir: Path) -> int:
        name = bin_dir.parent.name
        return int(name) if name.isdigit() else -1

    candidates = sorted(DEBIAN_SERVER_DIRS.glob("*/bin"), key=major, reverse=True)
    for bin_dir in candidates:
        if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file():
            return bin_dir
    return None


def _server_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError as error:
        raise ServerUnavailable(
            f"running as root, and there is no user {SERVER_USER!r} to run PostgreSQL as "
            "(Debian's postgresql package creates it)"
        ) from error


def _run_as_server_user(command: list[str], what: str) -> None:
    """Run `command`; as `SERVER_USER` when we are root (initdb and postgres refuse root)."""
    if os.geteuid() == 0:
        _server_account()
        command = ["runuser", "-u", SERVER_USER, "--", *command]
    try:
        subprocess.run(
            command,
            check=True,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 30,
            cwd="/",  # the server user may not be allowed into ours
        )
    except FileNotFoundError as error:
        raise ServerUnavailable(f"{what}: {error}") from error
    except subprocess.CalledProcessError as error:
        output = (error.stdout + error.stderr)[-2000:]
        raise ServerUnavailable(f"{what} failed ({error.returncode}): {output}") from error
    except subprocess.TimeoutExpired as error:
        raise ServerUnavailable(f"{what}: no answer in {START_TIMEOUT_S + 30} s") from error


def _free_port() -> int:
    """A TCP port free on loopback now (the server binds it a moment later; see START_ATTEMPTS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
