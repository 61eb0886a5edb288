"""`hpcpredict serve` in-process: the Unix socket and the HTTP API, for real (issue 6, part 4-6)."""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.fronts.client import DaemonReplyError
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.server import Daemon, DaemonError
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.fronts.socket_server import clear_stale_socket
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest

from testbed.daemon_thread import Running, metric_sample, write_token_file


@pytest.fixture
def config(short_dir: Path, store_url: str) -> DaemonConfig:
    """The daemon on each backend of `store_url` (SQLite and a real PostgreSQL)."""
    return DaemonConfig(
        db=store_url,
        socket=str(short_dir / "d.sock"),
        http="127.0.0.1:0",
        http_token_file=write_token_file(short_dir),
        spool=str(short_dir / "jobcomp.spool"),
    )


def http(running: Running, path: str, body: bytes | None = None, *, method: str | None = None,
         token: str | None = "running's") -> tuple[int, object]:
    """One request to the admin API, with the daemon's token unless `token` says otherwise."""
    headers = {}
    token = running.token if token == "running's" else token
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    method = method or ("POST" if body is not None else "GET")
    request = urllib.request.Request(running.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # a hang guard: the read worker is niced
            raw, status, kind = response.read(), response.status, response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        raw, status, kind = error.read(), error.code, error.headers["Content-Type"]
    return status, json.loads(raw) if kind.split(";")[0] == "application/json" else raw.decode()


# ---------------------------------------------------------------------------- the socket
def test_socket_is_private_by_default_and_removed_at_stop(running: Running) -> None:
    path = Path(running.config.socket)
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    running.stop()
    assert not path.exists()


def test_socket_mode_is_configurable(config: DaemonConfig) -> None:
    daemon = Running(replace(config, socket_mode=0o660))
    try:
        assert stat.S_IMODE(os.stat(config.socket).st_mode) == 0o660
    finally:
        daemon.stop()


def test_a_job_through_the_socket_is_stored_and_learned(running: Running) -> None:
    with running.client() as daemon:
        predicted = int(daemon.request("PREDICT", uid=1000, procs=8, time_limit=3600)["prediction"])
        assert 1 <= predicted <= 3600
        daemon.request("SUBMIT", job=77, uid=1000, procs=8, time_limit=3600, submit=1000, predicted=predicted)
        daemon.request("START", job=77, start=1010)
        answer = daemon.request("END", job=77, start=1010, end=1610, state="COMPLETED")
        assert answer["learned"] == "1"
        assert daemon.request("PING")["model_t"] == "1"
    status, rows = http(running, "/predictions?limit=5")
    assert status == 200
    assert rows == [
        {"job_id": 77, "user_id": 1000, "procs": 8, "requested_s": 3600, "predicted_s": predicted,
         "predicted_at_s": 1000, "status": "ended", "run_s": 600}
    ]


def test_bad_input_never_kills_the_daemon(running: Running) -> None:
    path = running.config.socket
    payloads = [
        b"\x00\xff\xfe garbage\n",
        b"PREDICT uid=1 procs=1 time_limit=" + b"9" * 5000 + b"\n",  # huge: answered, then closed
        b"PREDICT user=no-such-user-hpcpredict procs=1 time_limit=60\n",
        b"PREDICT uid=1\n",
        b"PREDICT uid=1 procs=1 time_limit=60",  # no newline, then the client closes
        b"START job=12345\n",
    ]
    codes = []
    for payload in payloads:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.settimeout(5)
            raw.connect(path)
            raw.sendall(payload)
            raw.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := raw.recv(65536):
                answer += chunk
        assert answer.count(b"\n") == 1, answer
        codes.append(answer.split()[1] if answer.startswith(b"ERR") else b"OK")
    assert codes == [b"bad_request", b"too_long", b"unknown_user", b"missing_field", b"OK", b"unknown_job"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:  # a client that vanishes mid-line
        raw.connect(path)
        raw.sendall(b"PREDICT uid=1 pro")
    with running.client() as daemon:
        assert daemon.request("PING")["version"] == "1"


def test_concurrent_clients_all_get_their_answers(running: Running) -> None:
    def one_client(uid: int) -> list[int]:
        with running.client() as daemon:
            return [
                int(daemon.request("PREDICT", uid=uid, procs=1 + i, time_limit=60 * (i + 1))["prediction"])
                for i in range(50)
            ]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one_client, range(16)))
    assert all(1 <= p <= 60 * (i + 1) for answers in results for i, p in enumerate(answers))
    status, text = http(running, "/metrics")
    assert status == 200
    assert metric_sample(text, "hpcpredict_requests_total", verb="PREDICT", outcome="ok") == 800


def test_a_second_daemon_on_the_same_socket_is_refused(running: Running) -> None:
    second = Daemon(running.config, running.service)
    with pytest.raises(DaemonError, match="already serving"):
        second.run(install_signal_handlers=False)
    with running.client() as daemon:  # the first one still serves
        assert daemon.request("PING")["version"] == "1"


def test_a_second_daemon_on_the_same_store_is_refused_even_on_another_socket(
    running: Running, short_dir: Path
) -> None:
    """Two daemons on one store each checkpoint events the other learned (issue 17, item 4)."""
    other = replace(running.config, socket=str(short_dir / "other.sock"))
    with pytest.raises(DaemonError, match="already serving this store"):
        Daemon(other, running.service).run(install_signal_handlers=False)
    assert not Path(other.socket).exists()
    with running.client() as daemon:
        assert daemon.request("PING")["version"] == "1"


def test_the_store_lock_is_freed_when_the_daemon_stops(config: DaemonConfig) -> None:
    Running(config).stop()
    second = Running(config)  # the same store, the same socket: free again
    try:
        with second.client() as client:
            assert client.request("PING")["version"] == "1"
    finally:
        second.stop()


def test_hpcpredict_serve_refuses_a_store_another_daemon_serves(running: Running, short_dir: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", running.config.db,
         "--socket", str(short_dir / "second.sock"), "--http", "", "--spool", str(short_dir / "s.spool")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "already serving this store" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (short_dir / "second.sock").exists()


def test_a_busy_live_socket_is_not_taken_as_stale(short_dir: Path) -> None:
    """A daemon whose accept queue is full answers EAGAIN, not "refused": its socket stays."""
    path = short_dir / "busy.sock"
    busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    busy.bind(str(path))
    busy.listen(0)
    waiting = []
    try:
        while True:  # fill the accept queue without ever accepting
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            waiting.append(client)
            try:
                client.connect(str(path))
            except BlockingIOError:
                break
        with pytest.raises(DaemonError, match="may still be serving"):
            clear_stale_socket(path)
        assert path.exists()
    finally:
        for client in waiting:
            client.close()
        busy.close()


def test_a_stale_socket_file_is_replaced(config: DaemonConfig) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(config.socket)  # bound, never listening: what a killed daemon leaves
    stale.close()
    daemon = Running(config)
    try:
        with daemon.client() as client:
            assert client.request("PING")["version"] == "1"
    finally:
        daemon.stop()


def test_a_regular_file_at_the_socket_path_is_not_replaced(config: DaemonConfig) -> None:
    Path(config.socket).write_text("precious")
    store = Store(config.db)
    try:
        service = PredictionService.open(store, config.predictor_factory)
        with pytest.raises(DaemonError, match="not a socket"):
            Daemon(config, service).run(install_signal_handlers=False)
    finally:
        store.close()
    assert Path(config.socket).read_text() == "precious"


def test_stop_checkpoints_so_a_restart_replays_nothing(config: DaemonConfig) -> None:
    daemon = Running(config)
    with daemon.client() as client:
        client.request("SUBMIT", job=1, uid=5, procs=2, time_limit=600, submit=10)
        client.request("START", job=1, start=20)
        client.request("END", job=1, start=20, end=200)
    state = daemon.service.state_dict()
    daemon.stop()
    store = Store(config.db)
    try:
        restarted = PredictionService.open(store, config.predictor_factory)
        assert restarted.replayed_events == 0
        assert restarted.last_event_seq == 3
        assert all((restarted.state_dict()[k] == state[k]).all() for k in state)
    finally:
        store.close()


# ---------------------------------------------------------------------------- HTTP
def test_http_api(running: Running) -> None:
    status, health = http(running, "/health")
    # a fresh store: answering (200), with the users' requests until the model has learned enough
    assert status == 200 and health["status"] == "not_ready" and health["protocol_version"] == 1
    assert health["reasons"] == ["untrained"] and health["trained_jobs"] == 0
    # staleness (daemon/core/staleness.py): a stale model says why, a fresh one says nothing
    assert isinstance(health["stale_history"], bool)
    assert bool(health["warning"]) == health["stale_history"]

    status, answer = http(running, "/predict", json.dumps({"uid": 4, "procs": 2, "time_limit": 900}).encode())
    assert status == 200 and 1 <= answer["prediction_s"] <= 900 and answer["time_limit_s"] == 900

    with running.client() as daemon:
        for job in range(1, 4):
            daemon.request("SUBMIT", job=job, uid=4, procs=2, time_limit=900, submit=100 * job)
            daemon.request("END", job=job, run=60 * job, end=100 * job + 60 * job)
    status, rows = http(running, "/errors")
    assert status == 200 and [row["user_id"] for row in rows] == [4] and rows[0]["count"] == 3
    status, row = http(running, "/users/4/errors")
    assert status == 200 and row["count"] == 3 and row["requested_mae_s"] == pytest.approx(900 - 120)
    # The running totals: the same means, without the median, plus the last end.
    status, totals = http(running, "/users")
    assert status == 200 and [total["user_id"] for total in totals] == [4]
    assert totals[0]["last_end_s"] == 300 + 180
    for column in ("count", "mae_s", "under_rate", "mean_ratio", "corrections", "requested_mae_s", "ave2_mae_s"):
        assert totals[0][column] == pytest.approx(rows[0][column], rel=1e-12), column
    status, text = http(running, "/metrics")
    assert status == 200 and "hpcpredict_judged_jobs 3.0" in text
    assert f"hpcpredict_requested_mae_seconds {900.0 - 120.0!r}" in text
    assert f"hpcpredict_mae_seconds {rows[0]['mae_s']!r}" in text


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/nowhere", None, 404, "not_found"),
        ("/users/someone/errors", None, 400, "bad_request"),
        ("/users/99/errors", None, 404, "unknown_user"),
        ("/predictions?limit=0", None, 400, "bad_request"),
        ("/predict", b"{not json", 400, "bad_request"),
        ("/predict", b"[1, 2]", 400, "bad_request"),
        ("/predict", json.dumps({"uid": 1, "procs": 1}).encode(), 400, "missing_field"),
        ("/predict", json.dumps({"user": "no-such-user-hpcpredict", "procs": 1, "time_limit": 5}).encode(), 400, "unknown_user"),
        ("/predict", b" " * (65 * 1024), 413, "too_long"),
    ],
)
def test_http_errors_are_json_and_clear(running: Running, path: str, body: bytes | None, status: int, code: str) -> None:
    got_status, answer = http(running, path, body)
    assert (got_status, answer["code"]) == (status, code)
    assert answer["error"]
    assert http(running, "/health")[0] == 200  # still serving


def test_http_binds_loopback_by_default() -> None:
    assert DaemonConfig().http.startswith("127.0.0.1:")


def test_client_reports_daemon_errors(running: Running) -> None:
    with running.client() as daemon, pytest.raises(DaemonReplyError) as caught:
        daemon.request("PREDICT", uid=1, procs=1)
    assert caught.value.code == "missing_field" and "time_limit" in caught.value.message


def test_spooled_completion_reports_are_ingested_at_start(config: DaemonConfig, short_dir: Path) -> None:
    spool = short_dir / "jobcomp.spool"
    spool.write_bytes(
        b"END job=5 uid=9 procs=2 time_limit=600 submit=100 start=110 end=410 state=COMPLETED\n"
        b"END job=6 uid=9 procs=2 time_limit=600 submit=100 start=110 end=200 state=COMPLETED\n"
        b"END job=5 uid=9 procs=2 time_limit=600 submit=100 start=110 end=410 state=COMPLETED\n"  # twice
        b"END job=7 state=COMPLETED\n"  # refused: kept with its reason
    )
    daemon = Running(replace(config, spool=str(spool)))
    try:
        assert daemon.service.model_updates == 2  # jobs 5 and 6, once each
        assert not spool.exists() and not (short_dir / "jobcomp.spool.ingesting").exists()
        rejected = (short_dir / "jobcomp.spool.rejected").read_text()
        assert "END job=7" in rejected and "missing_field" in rejected
    finally:
        daemon.stop()


def test_an_interrupted_ingestion_is_finished_first(config: DaemonConfig, short_dir: Path) -> None:
    spool = short_dir / "jobcomp.spool"
    (short_dir / "jobcomp.spool.ingesting").write_bytes(
        b"END job=5 uid=9 procs=2 time_limit=600 submit=100 start=110 end=410\n"
    )
    spool.write_bytes(b"END job=6 uid=9 procs=2 time_limit=600 submit=100 start=110 end=200\n")
    daemon = Running(replace(config, spool=str(spool)))
    try:
        assert daemon.service.model_updates == 1  # the interrupted file now, the new one later
        assert spool.exists() and not (short_dir / "jobcomp.spool.ingesting").exists()
    finally:
        daemon.stop()


@pytest.mark.parametrize(("content", "message"), [(b"", "empty (zero bytes)"), (b"#!/bin/sh\necho hi\n", "not an SQLite database")])
def test_hpcpredict_serve_refuses_an_empty_or_foreign_database_file(
    short_dir: Path, content: bytes, message: str
) -> None:
    database = short_dir / "state.db"
    database.write_bytes(content)
    result = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{database}",
         "--socket", str(short_dir / "d.sock"), "--http", "", "--spool", str(short_dir / "s.spool")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert database.read_bytes() == content


def serve_once(short_dir: Path, *arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`hpcpredict serve` that is expected to refuse to start (a timeout if it serves instead)."""
    return subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--socket", str(short_dir / "d.sock"), "--http", "",
         "--spool", str(short_dir / "s.spool"), *arguments],
        capture_output=True, text=True, timeout=60, env=env,
    )


def test_hpcpredict_serve_refuses_another_applications_sqlite_database(short_dir: Path) -> None:
    database = short_dir / "app.db"
    connection = sqlite3.connect(database)
    connection.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    connection.execute("INSERT INTO customers (name) VALUES ('ACME')")
    connection.commit()
    connection.close()
    content = database.read_bytes()
    result = serve_once(short_dir, "--db", f"sqlite:///{database}")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"Error: {database}: an SQLite database of something else (tables customers; none of "
        "hpcpredict's): refusing to add hpcpredict's tables to it; check --db"
    )
    assert database.read_bytes() == content and sorted(p.name for p in short_dir.iterdir()) == ["app.db"]


def test_hpcpredict_serve_refuses_a_missing_database_outside_the_state_directory(short_dir: Path) -> None:
    database = short_dir / "hpcpredcit.db"  # a typo
    result = serve_once(short_dir, "--db", f"sqlite:///{database}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{database}: no such database. `hpcpredict train HISTORY.swf --db sqlite:///{database}` creates it" in result.stderr
    assert "--create-db" in result.stderr
    assert not database.exists()


def test_a_missing_database_is_created_in_the_state_directory_or_when_asked(tmp_path: Path) -> None:
    """Created (then the missing socket folder stops serve): under the default state directory,
    the quick start's, and anywhere with --create-db."""
    state = tmp_path / "state"
    runner = CliRunner(env={"HPCPREDICT_STATE_DIR": str(state)})
    result = runner.invoke(main, ["serve", "--http", "", "--socket", str(tmp_path / "no" / "d.sock")])
    assert "does not exist" in result.output and (state / "hpcpredict.db").is_file()
    elsewhere = tmp_path / "site" / "store.db"
    result = runner.invoke(main, ["serve", "--db", f"sqlite:///{elsewhere}", "--create-db", "--http", "",
                                  "--socket", str(tmp_path / "no" / "d.sock")])
    assert "does not exist" in result.output and elsewhere.is_file()


def test_hpcpredict_serve_refuses_a_damaged_sqlite_file(short_dir: Path) -> None:
    database = short_dir / "state.db"
    store = Store(f"sqlite:///{database}")
    service = PredictionService.open(store, checkpoint_every=50)
    for job_id in range(1, 101):
        submit_s = 1_700_000_000 + 1000 * job_id
        service.submitted(JobRequest(job_id, submit_s, 4, 3600, job_id % 7), submit_s)
        service.started(job_id, submit_s)
        service.ended(job_id, 600, submit_s + 600, "COMPLETED")
    service.close()
    store.close()
    with database.open("r+b") as stream:  # 4 KiB of garbage over the tenth page
        stream.seek(10 * 4096)
        stream.write(random.Random(10).randbytes(4096))
    damaged = database.read_bytes()
    result = serve_once(short_dir, "--db", f"sqlite:///{database}")
    assert result.returncode == 1, result.stderr
    assert f"{database}: the database is damaged (SQLite quick_check: " in result.stderr
    assert "restore it from a backup" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert database.read_bytes() == damaged


@pytest.mark.parametrize("correction, warmed", [("survival", True), ("incremental", False)])
def test_the_warm_up_loads_survivals_kernel_when_the_daemon_corrects_by_it(
        short_dir: Path, correction: str, warmed: bool) -> None:
    """With `correction = "survival"` the Kaplan-Meier kernel is loaded before the socket opens,
    not under numba's lock at the watcher's first correction."""
    from unittest import mock

    config = DaemonConfig(db=f"sqlite:///{short_dir / 'warm.db'}", socket=str(short_dir / "w.sock"),
                          correction=correction, survival_quantile=0.9)
    store = Store(config.db)
    try:
        daemon = Daemon(config, PredictionService.open(store, config.predictor_factory))
        with mock.patch("hpcpredict.corrections.survival.conditional_quantile_s") as kernel:
            daemon._warm_up()
    finally:
        store.close()
    assert kernel.called == warmed
    if warmed:
        assert kernel.call_args.args[-1] == 0.9
