"""Failures: failing events said by PING and /health and never answered with SQL, no model
rebuild per failing event, and both backends refusing the same out-of-range values alike (a
damaged SQLite file refused at start: tests/test_daemon_server.py).

A failing store is made by the database itself: a trigger that raises inside the event's
transaction (what a damaged page or a full disk does to a write), or a deferred constraint that
fails the commit. Every test taking `store` or `store_url` runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.exc import SQLAlchemyError

from testbed.daemon_thread import Running
from hpcpredict.daemon.fronts.client import parse_answer
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn import LearnedPredictor

T0 = 1_700_000_000
INTERNAL = re.compile(rb"ERR internal error id ([0-9a-f]{8}); details in the daemon's log\n")


def fail_inside(store: Store, table: str, operation: str) -> None:
    """Every `operation` (INSERT/UPDATE) on `table` fails inside the database from now on."""
    with store.engine.begin() as connection:
        if store.engine.dialect.name == "sqlite":
            connection.exec_driver_sql(
                f"CREATE TRIGGER test_damage BEFORE {operation} ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'database disk image is malformed'); END"
            )
        else:
            connection.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION test_damage() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'could not read block 7 in file \"base/16384/2619\"'; END $$"
            )
            connection.exec_driver_sql(
                f"CREATE TRIGGER test_damage BEFORE {operation} ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION test_damage()"
            )


def fail_at_commit(store: Store) -> None:
    """Every job end fails when its transaction commits (a deferred constraint), not before."""
    with store.engine.begin() as connection:
        if store.engine.dialect.name == "sqlite":
            connection.exec_driver_sql(
                "CREATE TABLE test_canary (job_id BIGINT REFERENCES jobs (job_id) DEFERRABLE INITIALLY DEFERRED)"
            )
            connection.exec_driver_sql(
                "CREATE TRIGGER test_damage AFTER UPDATE ON jobs WHEN NEW.status = 'ended' "
                "BEGIN INSERT INTO test_canary VALUES (-1); END"
            )
        else:
            connection.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION test_damage() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'deferred check failed at commit'; END $$"
            )
            connection.exec_driver_sql(
                "CREATE CONSTRAINT TRIGGER test_damage AFTER UPDATE ON jobs DEFERRABLE INITIALLY DEFERRED "
                "FOR EACH ROW WHEN (NEW.status = 'ended') EXECUTE FUNCTION test_damage()"
            )


def heal(store: Store, table: str = "jobs") -> None:
    with store.engine.begin() as connection:
        if store.engine.dialect.name == "sqlite":
            connection.exec_driver_sql("DROP TRIGGER test_damage")
        else:
            connection.exec_driver_sql(f"DROP TRIGGER test_damage ON {table}")


def job(job_id: int, user_id: int = 7) -> JobRequest:
    return JobRequest(job_id=job_id, submit_s=T0 + 1000 * job_id, procs=4, requested_s=3600, user_id=user_id)


def lifecycle(service: PredictionService, job_id: int, run_s: int = 600) -> None:
    request = job(job_id)
    service.submitted(request, request.submit_s)
    service.started(job_id, request.submit_s)
    service.ended(job_id, run_s, request.submit_s + run_s, "COMPLETED")


def assert_same_state(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)


def replay_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "replayed" in r.getMessage() or "rebuilt" in r.getMessage()]


# ---------------------------------------------------------------------------- no rebuild per event
@pytest.mark.parametrize("failure", ["inside", "at_commit"])
def test_a_failing_event_puts_the_learner_back_without_a_rebuild(
    store: Store, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    service = PredictionService.open(store, checkpoint_every=1000)
    for job_id in range(1, 6):
        lifecycle(service, job_id)
    request = job(50)
    service.submitted(request, request.submit_s)
    service.started(50, request.submit_s)
    before = service.state_dict()
    seq_before = service.last_event_seq
    if failure == "inside":
        fail_inside(store, "jobs", "UPDATE")  # after the event is logged and learned
    else:
        fail_at_commit(store)
    for _ in range(5):
        with pytest.raises(SQLAlchemyError):
            service.ended(50, 600, request.submit_s + 600, "COMPLETED")
    assert replay_logged(caplog) == []  # no model rebuilt from the store, not even once
    assert_same_state(service.state_dict(), before)  # put back, exactly
    assert store.last_event_seq() == seq_before == service.last_event_seq
    assert (service.event_failures, service.failing_events, service.rebuilds) == (5, 5, 0)
    assert not service.healthy
    heal(store)
    assert service.ended(50, 600, request.submit_s + 600, "COMPLETED").learned
    assert service.failing_events == 0 and service.healthy

    reference = PredictionService.open(Store(f"sqlite:///{tempfile.mkdtemp()}/r.db"), checkpoint_every=1000)
    for job_id in range(1, 6):
        lifecycle(reference, job_id)
    lifecycle(reference, 50)
    assert_same_state(service.state_dict(), reference.state_dict())
    reference.store.close()


LEARNERS = {
    "default": LearnedPredictor,
    # every option that keeps state of its own: censoring (learn_lower_bound), robust features,
    # calibration's thresholds and the published prediction kept per job
    "censored, robust, calibrated": lambda: LearnedPredictor(
        censor_at_limit=True, feature_scaling="robust", calibration_alpha=0.5
    ),
}


@pytest.mark.parametrize("learner", list(LEARNERS))
def test_each_event_kind_is_put_back_exactly(store: Store, learner: str) -> None:
    """SUBMIT (a new user), START, LIMIT and END (true or censored) fail after touching the
    learner: nothing of them remains."""
    service = PredictionService.open(store, LEARNERS[learner], checkpoint_every=1000)
    for job_id in (1, 2, 3):  # user 7 has a history, and expert scores
        lifecycle(service, job_id)
    before = service.state_dict()
    fail_inside(store, "predictions", "INSERT")  # SUBMIT writes its prediction last
    with pytest.raises(SQLAlchemyError):
        service.submitted(job(10, user_id=99), T0 + 10_000)
    assert_same_state(service.state_dict(), before)
    heal(store, "predictions")
    service.submitted(job(10, user_id=99), T0 + 10_000)
    service.submitted(job(11), T0 + 11_000)
    before = service.state_dict()
    fail_inside(store, "jobs", "UPDATE")
    with pytest.raises(SQLAlchemyError):
        service.started(10, T0 + 10_010)
    with pytest.raises(SQLAlchemyError):
        service.limit_changed(10, 1200, T0 + 10_020)
    with pytest.raises(SQLAlchemyError):
        service.ended(11, 600, T0 + 11_600, "COMPLETED")
    with pytest.raises(SQLAlchemyError):
        service.ended(11, 3600, T0 + 14_600, "TIMEOUT")
    assert_same_state(service.state_dict(), before)
    assert service.rebuilds == 0


# ---------------------------------------------------------------------------- what clients see
def exchange(path: str, line: bytes) -> bytes:
    """One request line, its raw answer line (the client would turn an ERR into an exception)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(10)
        connection.connect(path)
        connection.sendall(line)
        with connection.makefile("rb") as reader:
            return reader.readline()


def health(running: Running) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(running.url + "/health", timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_failing_events_answer_no_sql_and_turn_health_and_ping_unhealthy(
    short_dir: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    config = DaemonConfig(db=store_url, socket=str(short_dir / "d.sock"), http="127.0.0.1:0",
                          spool=str(short_dir / "s.spool"))
    running = Running(config)
    try:
        with running.client() as client:
            client.request("SUBMIT", job=1, uid=1001, procs=2, time_limit=600, submit=T0)
        fail_inside(running.store, "events", "INSERT")
        answer = exchange(config.socket, b"SUBMIT job=2 uid=424242 procs=2 time_limit=600 submit=1700000100\n")
        with running.client() as client:
            ping = client.request("PING")
        matched = INTERNAL.fullmatch(answer)
        assert matched, answer  # no SQL, no parameters (uid 424242), no exception text
        logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
        assert matched.group(1).decode() in logged and "INSERT INTO events" in logged  # the details: in the log
        assert (ping["healthy"], ping["failing_events"]) == ("0", "1")
        status, body = health(running)
        assert status == 503 and body["status"] == "unhealthy" and body["failing_events"] == 1
        assert "hpcpredict_healthy 0" in urllib.request.urlopen(running.url + "/metrics", timeout=10).read().decode()
        heal(running.store, "events")
        with running.client() as client:
            assert client.request("SUBMIT", job=3, uid=1001, procs=2, time_limit=600, submit=T0 + 200)
            assert client.request("PING")["healthy"] == "1"
        status, body = health(running)
        assert status == 200 and body["failing_events"] == 0 and body["event_failures"] == 1
    finally:
        running.stop()


# ---------------------------------------------------------------------------- both backends alike
@pytest.mark.parametrize(
    ("line", "answer"),
    [
        ("SUBMIT job=1 uid=2147483648 procs=1 time_limit=60",
         "ERR bad_request uid: 2147483648 is out of range (at most 2147483647)"),
        ("SUBMIT job=1 uid=7 gid=2147483648 procs=1 time_limit=60",
         "ERR bad_request gid: 2147483648 is out of range (at most 2147483647)"),
        ("SUBMIT job=1 uid=7 procs=9223372036854775807 time_limit=60",
         "ERR bad_request procs: 9223372036854775807 is out of range (at most 2147483647)"),
        ("END job=1 uid=7 procs=1 time_limit=60 run=5 end=100 state=" + "X" * 33,
         "ERR bad_request state: expected a SLURM state name (letters, digits, _; at most 32), got '"
         + "X" * 33 + "'"),
    ],
)
def test_postgresql_and_sqlite_refuse_out_of_range_values_alike(store: Store, line: str, answer: str) -> None:
    """PostgreSQL's 32-bit columns used to refuse these inside the event (ERR internal and a
    rebuild), where SQLite stored them: both now answer the same clean refusal."""
    handlers = Handlers(PredictionService.open(store), clock=lambda: T0)
    assert handlers.handle_line(line.encode()).decode() == answer + "\n"
    assert store.last_event_seq() == 0 and handlers.service.event_failures == 0
    # the largest values allowed are stored alike
    largest = line.replace("2147483648", "2147483647").replace("9223372036854775807", "2147483647")
    parse_answer(handlers.handle_line(largest.replace("X" * 33, "X" * 32).encode()))
    assert store.last_event_seq() > 0 and handlers.service.event_failures == 0
