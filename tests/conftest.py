"""Shared fixtures: the real logs of ../shared/swf (skipped cleanly where absent), the sample, and
the daemon's databases (SQLite and PostgreSQL, see testbed/pg_server.py)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from hypothesis import settings
from sqlalchemy.engine import make_url

from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.core.store import Store
from hpcpredict.logs.swf import SwfRecord
from testbed.daemon_thread import Running
from testbed.pg_server import PostgresServer, ServerUnavailable
from testbed.system_packages import install_missing

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_LOG = REPO_ROOT / "swf" / "KTH-SP2-sample.swf"
SHARED_SWF_DIR = REPO_ROOT.parent / "shared" / "swf"

# The paper's INCREMENTAL steps (docs/method.md §8), written out rather than read from the code:
# a changed step must fail these tests, not move their expectations with it.
PAPER_STEPS_S = (60, 300, 900, 1800, 3600, 7200, 18000, 36000, 72000, 180000, 360000)

KTH_LOG = "KTH-SP2-1996-2.swf.gz"
BLUE_LOG = "SDSC-BLUE-2000-4.1-cln.swf.gz"
CURIE_LOG = "CEA-Curie-2011-2.1-cln.swf.gz"


# Hypothesis's 200 ms deadline per example measures the machine, not the code: the suite runs in
# four processes on two cores beside SLURM clusters, and a slow example is not a wrong one.
settings.register_profile("hpcpredict", deadline=None)
settings.load_profile("hpcpredict")

# The files whose tests mostly wait (real SLURM jobs running, the chroots' suites, the quick start
# as SlurmUser), longest first: collected first, so that pytest-xdist (``-n 4 --dist loadfile``,
# the README's test command) starts them at once and the other workers run the rest meanwhile,
# instead of the waits queueing at the end behind the alphabet.
LONG_WAITING_FILES = (
    "test_slurm_e2e.py", "test_slurm_versions.py", "test_quickstart_cluster.py", "test_slurm_replay.py",
    "test_site_install.py", "test_slurm_jobcomp_reload.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(LONG_WAITING_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected


def pytest_sessionstart(session: pytest.Session) -> None:
    """The one set-up step of the README's test command: the Debian packages the servers need,
    installed before any test is collected (testbed/system_packages.py says when and why); by the
    controlling process only, not again by each pytest-xdist worker."""
    if hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"hpcpredict tests: {line}")

    if runs_a_selection(session.config.args):
        return  # one file, or one test: it skips (or fails in CI) without its servers, as it says
    install_missing(say)


def runs_a_selection(arguments: list[str]) -> bool:
    """Whether the run names particular test files or tests (``tests/test_swf.py``, ``...::test_x``)
    rather than the suite (no argument, or a folder): the apt step is the whole suite's set-up, not
    a price for running one file (`python3 -m testbed.system_packages` installs the packages by hand)."""
    return any("::" in argument or argument.split("::")[0].endswith(".py") for argument in arguments)


REQUIRE_SERVERS_VARIABLE = "HPCPREDICT_REQUIRE_SERVERS"  # "1" in CI: fail, never skip


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the calling test for want of something the machine lacks (a real log, a tool), or
    fail it under HPCPREDICT_REQUIRE_SERVERS=1 (CI), where it must be there: a broken set-up
    must not pass as "skipped"."""
    if os.environ.get(REQUIRE_SERVERS_VARIABLE) == "1":
        pytest.fail(f"{reason}\n({REQUIRE_SERVERS_VARIABLE}=1: failing, not skipping)")
    pytest.skip(reason)


def shared_log(name: str) -> Path:
    """Path of a real log in ../shared/swf; skips the calling test when it is not there (fails
    it under HPCPREDICT_REQUIRE_SERVERS=1: CI has ../shared beside the clone)."""
    path = SHARED_SWF_DIR / name
    if not path.is_file():
        skip_or_fail(f"real log {name} not found in {SHARED_SWF_DIR} (see ../shared/README.md)")
    return path


@pytest.fixture(scope="session")
def site_prefix() -> Path:
    """The cached venv of hpcpredict's dependencies made by Debian's python3 (testbed/site_install.py);
    skips (fails under HPCPREDICT_REQUIRE_SERVERS=1) where it cannot be made."""
    from testbed.site_install import SiteUnavailable, dependencies_prefix

    try:
        return dependencies_prefix()
    except SiteUnavailable as error:
        if os.environ.get(REQUIRE_SERVERS_VARIABLE) == "1":
            pytest.fail(f"a site's install is required here: {error}")
        pytest.skip(str(error))


@pytest.fixture(autouse=True)
def private_umask(request: pytest.FixtureRequest) -> Iterator[None]:
    """Files this process makes (stores built in-process, then served by `hpcpredict serve`)
    are private, as the daemon's own are (its umask, the unit's UMask=0077): a 0644 store is
    tightened by serve with a line saying so (file_modes.py), which tests ask for on purpose.
    Not for the SLURM and site tests: there root lays out files (slurm.conf, the plugins, a
    site's install) that SlurmUser and the users must read, as a root shell's umask 022 lets them."""
    if request.node.get_closest_marker("slurm") or request.node.get_closest_marker("site"):
        yield
        return
    previous = os.umask(0o077)
    yield
    os.umask(previous)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private folder with a short path: Unix socket paths are limited to ~107 bytes, and
    pytest's tmp_path can be longer."""
    path = Path(tempfile.mkdtemp(prefix="hp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def running(config: DaemonConfig) -> Iterator[Running]:
    """A daemon serving in a thread on the test module's `config`, stopped afterwards. Its admin
    API waits up to 5 minutes for a read (30 s in production): the first /errors starts the read
    workers (spawned processes importing SQLAlchemy), which a loaded 2-core machine took longer
    than 30 s to do once (test_http_api answered 503; it passes alone). The timeout itself is
    tested with its own limits (test_daemon_http.py)."""
    from hpcpredict.daemon.fronts.http_api import HttpLimits

    daemon = Running(config, http_limits=HttpLimits(request_timeout_s=300.0))
    yield daemon
    daemon.stop()


@pytest.fixture
def sample_log() -> Path:
    return SAMPLE_LOG


def make_record(**overrides: int | float) -> SwfRecord:
    """A valid SWF record with sensible defaults; override any field by name."""
    values: dict[str, int | float] = {
        "job_id": 1,
        "submit_s": 0,
        "wait_s": 10,
        "run_s": 100,
        "allocated_procs": 4,
        "avg_cpu_s": -1.0,
        "used_memory_kb": -1.0,
        "requested_procs": 4,
        "requested_time_s": 3600,
        "requested_memory_kb": -1.0,
        "status": 1,
        "user_id": 7,
        "group_id": 3,
        "executable_id": -1,
        "queue_id": -1,
        "partition_id": -1,
        "preceding_job_id": -1,
        "think_time_s": -1,
    }
    unknown = set(overrides) - set(values)
    assert not unknown, f"not SWF fields: {sorted(unknown)}"
    values.update(overrides)
    return SwfRecord(**values)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- databases of the daemon
# The daemon's store runs on SQLite (embedded default) and PostgreSQL (production): every test
# taking `store_url` or `store` runs on both, the same code asserting the same things.

class SqliteDatabases:
    """`PostgresServer`'s three verbs for SQLite: a file per database under pytest's tmp dir."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory

    def create_database(self, template_url: str | None = None) -> str:
        path = self._tmp_path_factory.mktemp("sqlite") / "state.db"
        if template_url is not None:
            # The backup API, not a file copy: right whatever is still in the -wal file.
            source = sqlite3.connect(make_url(template_url).database)
            target = sqlite3.connect(path)
            try:
                source.backup(target)
            finally:
                source.close()
                target.close()
        return f"sqlite:///{path}"

    def drop_database(self, url: str) -> None:
        """Nothing: pytest's tmp_path retention removes the files."""


# What the `databases` fixture gives: either kind creates, copies and drops test databases.
Databases = SqliteDatabases | PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole session (testbed/pg_server.py), started on first use."""
    try:
        server = PostgresServer.from_environment()
    except ServerUnavailable as error:
        skip_or_fail(f"no PostgreSQL server for the store tests: {error}")
    yield server
    server.stop()


@pytest.fixture(
    scope="session",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ],
)
def databases(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Databases:
    """Where test databases come from, once per backend. Session-scoped: pytest groups the
    tests by backend, and PostgreSQL is started only when the first test needing it runs
    (``-m "not postgres"`` never starts it)."""
    if request.param == "sqlite":
        return SqliteDatabases(tmp_path_factory)
    return request.getfixturevalue("postgres_server")


@pytest.fixture
def store_url(databases: Databases) -> Iterator[str]:
    """URL of a new, empty database of each backend, dropped after the test."""
    url = databases.create_database()
    yield url
    databases.drop_database(url)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A `Store` on `store_url`, upgraded to the newest schema."""
    store = Store(store_url)
    store.upgrade()
    yield store
    store.close()


# ---------------------------------------------------------------------------- SLURM releases
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slurm-system", default=os.environ.get("HPCPREDICT_SLURM_SYSTEM", "host"),
        help="Run this pytest inside a chroot of Debian's newer Slurm: trixie (24.11) or sid (26.05), "
        "or the release itself; host (default): the Slurm installed here. Env HPCPREDICT_SLURM_SYSTEM. "
        "E.g. pytest --slurm-system 24.11 -m slurm (testbed/slurm_chroot.py).",
    )


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--slurm-system trixie``: the same pytest command, run inside that chroot instead."""
    system = config.getoption("--slurm-system")
    if system in ("host", "", None) or os.environ.get("HPCPREDICT_SLURM_SYSTEM_INSIDE"):
        return None
    from testbed.slurm_chroot import ChrootUnavailable, run_pytest

    arguments, skip_next = [], False
    for argument in config.invocation_params.args:
        if skip_next:
            skip_next = False
        elif argument == "--slurm-system":
            skip_next = True
        elif not argument.startswith("--slurm-system="):
            arguments.append(argument)
    try:
        return run_pytest(system, arguments)
    except ChrootUnavailable as error:
        raise pytest.UsageError(f"--slurm-system {system}: {error}") from None
