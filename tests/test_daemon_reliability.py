"""Daemon reliability, round 2 (issue 29): what a hostile or careless local user could still do.

Each test here failed on main at 195fcb0; docs/daemon.md ("Reliability") lists them by case.
"""

from __future__ import annotations

import json
import os
import random
import resource
import select
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from hpcpredict.daemon.fronts.client import DaemonClient, DaemonReplyError
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.http_api import HttpLimits
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.history import replay_history
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload

from conftest import SAMPLE_LOG
from testbed.daemon_thread import Running, wait_until_answering
from testbed.pg_server import PostgresServer


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


# ------------------------------------------------------------------ item 7: bounded influence
YEAR_S = 365 * 86_400


@pytest.fixture(scope="module")
def trained_on_sample() -> tuple[LearnedPredictor, dict[int, JobRequest], int]:
    """The daemon's learner after the KTH-SP2 sample, each user's last request, the log's end."""
    jobs = load_workload(SAMPLE_LOG).jobs
    learner = DaemonConfig().predictor_factory()
    replay_history(jobs, learner)
    last = {job.request.user_id: job.request for job in jobs}
    end_s = max(job.request.submit_s + max(job.wait_s, 0) + job.run_s for job in jobs)
    return learner, last, end_s


def _others(learner: LearnedPredictor, last: dict[int, JobRequest], now_s: int, adversary: int) -> dict[int, int]:
    return {user: learner.peek(replace(request, job_id=10**9 + user, submit_s=now_s), now_s)
            for user, request in last.items() if user != adversary}


def _after_one_end(trained: tuple[LearnedPredictor, dict[int, JobRequest], int], requested_s: int,
                   run_s: int, *, submitted: bool = True) -> tuple[bool, dict[int, int], dict[int, int]]:
    base, last, end_s = trained
    learner = base.clone()
    learner.load_state_dict(base.state_dict())
    now_s, adversary = end_s + 60, 18
    before = _others(learner, last, now_s + 60, adversary)
    job = JobRequest(job_id=1, submit_s=now_s, procs=1, requested_s=requested_s, user_id=adversary)
    if submitted:
        learner.predict(job, now_s)
        learner.job_started(job, now_s)
    stepped = learner.job_ended(job, run_s, now_s + run_s)
    return stepped, before, _others(learner, last, now_s + 60, adversary)


def test_an_absurd_runtime_teaches_no_more_than_the_request_it_asked_for(trained_on_sample) -> None:
    """A 10-year END of a 1-hour job moves the others exactly as a 1-hour END does, submitted
    or not (its end is taken at its limit, so no 10-year break time either)."""
    for submitted in (True, False):
        ordinary = _after_one_end(trained_on_sample, 3600, 3600, submitted=submitted)
        absurd = _after_one_end(trained_on_sample, 3600, 10 * YEAR_S, submitted=submitted)
        assert absurd[0] and absurd[2] == ordinary[2]
        assert absurd[2] != absurd[1]  # it was learned, and learning moves predictions


def test_a_job_far_outside_everything_learned_is_not_learned(trained_on_sample) -> None:
    """A 10-year request (Phi holds its square: millions of times the largest learned) would
    shrink that coordinate's weight for everybody (NAG's rescaling); it takes no step."""
    stepped, before, after = _after_one_end(trained_on_sample, 10 * YEAR_S, 10 * YEAR_S)
    assert not stepped
    assert after == before
    ordinary_request = _after_one_end(trained_on_sample, 48 * 3600, 3600)  # within 32x: learned
    assert ordinary_request[0]


# ------------------------------------------------------------------ item 6: two start-up messages
def _store_with_one_event(short_dir: Path, tmp_path: Path) -> Path:
    """A SQLite store whose log holds one SUBMIT after its last checkpoint (none)."""
    database = tmp_path / "state.db"
    config = DaemonConfig(db=f"sqlite:///{database}", socket=str(short_dir / "d.sock"), http="",
                          spool=str(short_dir / "jobcomp.spool"))
    running = Running(config)
    try:
        with running.client() as daemon:
            daemon.request("SUBMIT", job=5, uid=1000, procs=2, time_limit=600, submit=10)
    finally:
        running.stop()
    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM checkpoints")  # the next start replays the event
    for path in tmp_path.glob("state.db*"):
        os.chmod(path, 0o600)  # as `serve` makes them (this process's umask may be 022)
    return database


def _one_line_refusal(short_dir: Path, tmp_path: Path, damage_sql: str) -> str:
    """`serve`'s stderr on the one-event store after `damage_sql`: one line naming the file."""
    database = _store_with_one_event(short_dir, tmp_path)
    with sqlite3.connect(database) as connection:
        connection.execute(damage_sql)
    stderr = serve_refused(short_dir, f"sqlite:///{database}")
    assert stderr.count("\n") == 1 and str(database) in stderr, stderr
    return stderr


def test_an_unknown_schema_version_is_refused_in_one_line(short_dir: Path, tmp_path: Path) -> None:
    stderr = _one_line_refusal(short_dir, tmp_path, "UPDATE alembic_version SET version_num = '9999abcd'")
    assert "'9999abcd'" in stderr
    assert "newer hpcpredict" in stderr and "restore a backup" in stderr


def test_a_corrupt_event_payload_is_refused_in_one_line_naming_the_event(short_dir: Path, tmp_path: Path) -> None:
    stderr = _one_line_refusal(short_dir, tmp_path,
                               "UPDATE events SET payload_json = '{\"job\": [1, 2' WHERE job_id = 5")
    assert "event 1 of the log (submitted, job 5)" in stderr and "not JSON" in stderr
    assert "Restore the database from a backup" in stderr


# ------------------------------------------------------------------ item 5: file modes
def test_a_world_readable_database_is_tightened_and_its_wal_never_0644(short_dir: Path, tmp_path: Path) -> None:
    database = _store_with_one_event(short_dir, tmp_path)
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        if path.exists():
            os.chmod(path, 0o644)
    os.chmod(database, 0o644)
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{database}",
             "--socket", str(short_dir / "d.sock"), "--http", "", "--spool", str(short_dir / "s.spool")],
            stderr=stderr,
        )
    try:
        wait_until_answering(str(short_dir / "d.sock"), process, log.read_text)
        modes = {path.name: stat.S_IMODE(path.stat().st_mode)
                 for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm"))}
        assert modes == {"state.db": 0o640, "state.db-wal": 0o640, "state.db-shm": 0o640}
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert f"{database}: mode 0644 let every user read the store (every user's jobs); made 0640" in log.read_text()


# ------------------------------------------------------------------ item 4: damage while running
def test_damage_written_into_a_live_store_turns_it_unhealthy_and_refuses_events(
    short_dir: Path, tmp_path: Path
) -> None:
    """5 x 16 KiB of random bytes into the live SQLite file (the issue's case): within one
    check period (0.5 s here; 60 s by default, integrity_watch.py) PING and /health say
    unhealthy, events get ERR store_damaged, PREDICT is still answered (the plugin fails open)."""
    database = tmp_path / "state.db"
    config = DaemonConfig(db=f"sqlite:///{database}", socket=str(short_dir / "d.sock"),
                          http="127.0.0.1:0", spool=str(short_dir / "jobcomp.spool"))
    running = Running(config, integrity_interval_s=0.5)
    try:
        with running.client() as daemon:
            for job in range(1, 301):
                daemon.request("SUBMIT", job=job, uid=1000 + job % 7, procs=2, time_limit=3600, submit=100 * job)
                daemon.request("END", job=job, run=60 + job, end=100 * job + 200)
            assert daemon.request("PING")["healthy"] == "1"
            with sqlite3.connect(database) as reader:  # the pages into the main file
                reader.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rng = random.Random(29)
            size = database.stat().st_size
            fd = os.open(database, os.O_WRONLY)
            try:
                for _ in range(5):
                    os.pwrite(fd, rng.randbytes(16384), rng.randrange(4096, size - 16384))
            finally:
                os.close(fd)
            deadline = time.monotonic() + 60  # a hang guard; the bound is one period + one check
            while daemon.request("PING")["healthy"] == "1":
                assert time.monotonic() < deadline, "the damage was not found"
                time.sleep(0.1)
            with pytest.raises(DaemonReplyError, match="store_damaged: .*restore the database"):
                daemon.request("SUBMIT", job=999, uid=1000, procs=2, time_limit=3600, submit=40_000)
            answer = daemon.request("PREDICT", uid=1000, procs=2, time_limit=3600)
            assert 1 <= int(answer["prediction"]) <= 3600
        try:
            urllib.request.urlopen(running.url + "/health", timeout=30)
            raise AssertionError("/health answered 200 on a damaged store")
        except urllib.error.HTTPError as error:
            assert error.code == 503
            health = json.loads(error.read())
        assert health["status"] == "unhealthy"
        assert "quick_check" in health["store_damage"] or "malformed" in health["store_damage"]
    finally:
        running.stop()


def test_a_statement_meeting_a_damaged_page_is_taken_for_damage_and_nothing_else_is(tmp_path: Path) -> None:
    """service.store_damage: what makes an event's failure mark the store damaged at once."""
    from sqlalchemy.exc import OperationalError

    from hpcpredict.daemon.core.service import store_damage

    database = tmp_path / "damaged.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (v TEXT)")
        connection.executemany("INSERT INTO t VALUES (?)", [("x" * 300,)] * 200)
    with database.open("r+b") as stream:  # the table's pages, not the header
        stream.seek(4096)
        stream.write(random.Random(1).randbytes(3 * 4096))
    engine = create_engine(f"sqlite:///{database}")
    try:
        with pytest.raises(Exception) as damaged, engine.connect() as connection:
            connection.exec_driver_sql("SELECT count(*), max(v) FROM t").fetchall()
    finally:
        engine.dispose()
    assert store_damage(damaged.value) is not None
    assert "malformed" in store_damage(damaged.value)
    full = OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))
    assert store_damage(full) is None
    assert store_damage(RuntimeError("anything")) is None


# ------------------------------------------------------------------ item 3: /health under a held cap
class _Holder:
    """One unauthenticated client holding `count` HTTP connections that never ask anything,
    reopening each as the daemon closes it (the issue's attacker), in a thread."""

    def __init__(self, address: tuple[str, int], count: int) -> None:
        self.address = address
        self.sockets = [self._open() for _ in range(count)]
        self.reopened = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._hold)
        self.thread.start()

    def _open(self) -> socket.socket:
        connection = socket.create_connection(self.address)
        connection.setblocking(False)
        return connection

    def _hold(self) -> None:
        while not self.stopping.is_set():
            readable, _, _ = select.select(self.sockets, [], [], 0.05)
            for connection in readable:
                try:
                    closed = connection.recv(65536) == b""
                except OSError:
                    closed = True
                if closed:
                    connection.close()
                    self.sockets[self.sockets.index(connection)] = self._open()
                    self.reopened += 1

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        for connection in self.sockets:
            connection.close()


def test_health_and_metrics_answer_while_an_unauthenticated_client_holds_the_connection_cap(
    short_dir: Path, tmp_path: Path
) -> None:
    config = DaemonConfig(db=f"sqlite:///{tmp_path / 'state.db'}", socket=str(short_dir / "d.sock"),
                          http="127.0.0.1:0", spool=str(short_dir / "jobcomp.spool"))
    running = Running(config)
    holder = None
    try:
        cap = HttpLimits().max_connections
        holder = _Holder(running.daemon.http_address, cap + 44)  # 300, as in the issue
        # No wait needed: the kernel queues connections for accept() in order, so the first probe
        # below is accepted after every held one (no sleep that a busy machine could outlast).
        statuses = []
        for path in ["/health", "/metrics"] * 20:
            try:
                with urllib.request.urlopen(running.url + path, timeout=10) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as error:
                statuses.append(error.code)
        assert statuses == [200] * 40
        assert holder.reopened >= 40  # it did take its connections back, one per probe at least
    finally:
        if holder is not None:
            holder.stop()
        running.stop()


# ------------------------------------------------------------------ item 2: open files
UNIT = Path(__file__).resolve().parent.parent / "deploy" / "hpcpredict.service"
# How long the probe waits for PREDICT: long enough for a loaded CI machine. The property tested
# is that PREDICT is answered while the connections are held, not refused nor stuck; whether it
# is answered within job_submit.lua's 300 ms is a speed target, measured by benchmarks/bench_daemon.py.
PREDICT_WAIT_S = 10.0

# A client holding `count` connections to the socket, each silent (the daemon keeps it open
# past its first read), its own open-files limit raised to hold them all; prints "held N".
_HOLDER = """
import resource, socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (count + 256, max(count + 256, resource.getrlimit(resource.RLIMIT_NOFILE)[1])))
held = []
for _ in range(count):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    held.append(connection)
print("held", len(held), flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def unit_open_files_limit() -> tuple[int, int]:
    """(soft, hard) as the unit's LimitNOFILE= sets them (systemd: SOFT[:HARD], one value for both)."""
    for line in UNIT.read_text().splitlines():
        if line.startswith("LimitNOFILE="):
            soft, _, hard = line.removeprefix("LimitNOFILE=").partition(":")
            return int(soft), int(hard or soft)
    raise AssertionError(f"{UNIT} sets no LimitNOFILE")


def plugin_predict(socket_path: Path) -> bool:
    """The plugin's PREDICT (connect, one line, half-close, read), answered within `PREDICT_WAIT_S`."""
    deadline = time.monotonic() + PREDICT_WAIT_S
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(PREDICT_WAIT_S)
        connection.connect(str(socket_path))
        connection.sendall(b"PREDICT uid=1000 procs=4 time_limit=3600\n")
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while not answer.endswith(b"\n"):
            connection.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = connection.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer.startswith(b"OK prediction=")
    except OSError:
        return False
    finally:
        connection.close()


def _predicts_answered_while_held(short_dir: Path, tmp_path: Path, limits: tuple[int, int], held: int) -> str:
    """`hpcpredict serve` under open-files `limits`, a client holding `held` connections: 20
    plugin PREDICTs must all be answered in time. Returns the daemon's log."""
    socket_path = short_dir / "d.sock"
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{tmp_path / 'state.db'}",
             "--create-db", "--socket", str(socket_path), "--http", "", "--spool", str(short_dir / "s.spool")],
            stderr=stderr, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits),
        )
    holder = None
    try:
        wait_until_answering(str(socket_path), daemon, log.read_text, timeout_s=60)
        holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(socket_path), str(held)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().split() == ["held", str(held)]
        # Once the daemon has accepted them all (the accept queue is in order: a PING behind
        # them is answered after), the plugin asks while they are held.
        with DaemonClient(str(socket_path), timeout_s=120) as client:
            client.request("PING")
        answered = sum(plugin_predict(socket_path) for _ in range(20))
        assert answered == 20, log.read_text()[-3000:]
        assert "Too many open files" not in log.read_text()
    finally:
        if holder is not None:
            holder.stdin.close()
            holder.wait(timeout=60)
        daemon.terminate()
        daemon.wait(timeout=60)
    return log.read_text()


def test_predict_is_answered_while_a_client_holds_1100_connections_under_a_soft_limit_of_1024(
    short_dir: Path, tmp_path: Path
) -> None:
    """The issue's case: no LimitNOFILE (systemd's soft limit of 1,024, a higher hard one)."""
    text = _predicts_answered_while_held(short_dir, tmp_path, (1024, 4096), 1100)
    assert "open files: soft limit raised from 1024 to the hard limit 4096" in text


def test_predict_is_answered_while_a_client_holds_1024_connections_under_a_1024_hard_limit(
    short_dir: Path, tmp_path: Path
) -> None:
    """Nothing to raise: the held connections are capped below the limit, the idle ones shed."""
    _predicts_answered_while_held(short_dir, tmp_path, (1024, 1024), 1100)


@pytest.mark.slow
def test_predict_is_answered_while_a_client_holds_more_connections_than_the_units_limit(
    short_dir: Path, tmp_path: Path
) -> None:
    """deploy/hpcpredict.service's LimitNOFILE, applied to the daemon; a client holding 100
    connections more (about a minute on 2 cores). Raising a hard limit needs CAP_SYS_RESOURCE
    (root has it, but not in every container): skipped, saying so, where it cannot be had."""
    soft, hard = unit_open_files_limit()
    needed = hard + 100 + 256  # the holder's own descriptors
    probe = subprocess.run([sys.executable, "-c", "import resource; resource.setrlimit("
                            f"resource.RLIMIT_NOFILE, ({needed}, {needed}))"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"an open-files limit of {needed} cannot be set here (raising a hard limit "
                    "needs CAP_SYS_RESOURCE); the two tests above show the same under 1,024")
    _predicts_answered_while_held(short_dir, tmp_path, (soft, hard), hard + 100)


def test_train_is_refused_on_a_store_a_daemon_serves(sqlite_running: Running, tmp_path: Path) -> None:
    """`train` takes the daemon's lock too: beside a serving daemon it would store a starting
    model under it (through any name of the file), which the daemon's next restart would mix
    with the events it logged meanwhile. Refused in one line; the daemon keeps serving."""
    database = Path(make_url(sqlite_running.config.db).database)
    other_name = tmp_path / "link.db"
    other_name.symlink_to(database)
    history = tmp_path / "history.swf"
    history.write_text("".join(SAMPLE_LOG.read_text().splitlines(keepends=True)[:200]))
    for name in (database, other_name):
        result = subprocess.run([sys.executable, "-m", "hpcpredict.cli", "train", str(history), "--db",
                                 f"sqlite:///{name}", "--replace"], capture_output=True, text=True, timeout=300)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        assert "already serving this store" in result.stderr
    with sqlite_running.client() as daemon:
        assert daemon.request("PING")["healthy"] == "1"
