"""The daemon's store: migrations create exactly the models' schema, constraints hold.

Every test taking `store_url` or `store` (tests/conftest.py) runs twice: on a SQLite file, and
on a fresh database of a real PostgreSQL server (testbed/pg_server.py: a throwaway cluster from
Debian's packages, or the server named by ``HPCPREDICT_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.schema import CreateIndex, CreateTable

from hpcpredict.daemon.core.store import (
    MIGRATIONS_DIR,
    Base,
    CheckpointRow,
    EventRow,
    JobRow,
    PredictionRow,
    Store,
)
from hpcpredict.jobs import JobRequest


def make_request(job_id: int = 1, **overrides: int) -> JobRequest:
    values = {"submit_s": 1_700_000_000, "procs": 4, "requested_s": 3600, "user_id": 7}
    values.update(overrides)
    return JobRequest(job_id=job_id, **values)


def event_row(key: str, seq_job: int = 1) -> EventRow:
    return EventRow(
        kind="submitted",
        job_id=seq_job,
        payload_json="{}",
        occurred_at_s=1_700_000_000,
        recorded_at_s=1.0,
        idempotency_key=key,
    )


# ---------------------------------------------------------------------- migrations
def test_upgrade_creates_exactly_the_models_schema(store: Store) -> None:
    assert store.schema_drift() == []
    assert store.current_revision() == "0003" == store.head_revision()
    tables = set(inspect(store.engine).get_table_names())
    assert tables == set(Base.metadata.tables) | {"alembic_version"}


def test_drift_is_detected_before_upgrade(store_url: str) -> None:
    """The check above would catch a missing migration: an empty database differs."""
    store = Store(store_url)
    try:
        assert store.current_revision() is None
        added = {diff[1].name for diff in store.schema_drift() if diff[0] == "add_table"}
        assert added == set(Base.metadata.tables)
    finally:
        store.close()


def _create_statements(sql: str) -> set[frozenset[str]]:
    """CREATE statements of `sql`, each as its set of lines (clause order aside), less the
    indexes a later statement drops (a migration may replace an index)."""
    lines = [line for line in sql.splitlines() if not line.startswith("--")]
    statements = [statement.strip() for statement in "\n".join(lines).split(";")]
    dropped = {s.split()[2] for s in statements if s.startswith("DROP INDEX")}
    return {
        frozenset(line.strip().rstrip(",").strip() for line in statement.splitlines()) - {""}
        for statement in statements
        if statement.startswith("CREATE")
        and "alembic_version" not in statement
        and not (statement.startswith("CREATE INDEX") and statement.split()[2] in dropped)
    }


def test_migration_renders_the_models_ddl_for_postgresql() -> None:
    """Without a server: Alembic's offline SQL for PostgreSQL is the models' own DDL."""
    output = io.StringIO()
    config = Config(output_buffer=output)
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", "postgresql://")
    command.upgrade(config, "head", sql=True)
    dialect = postgresql.dialect()
    expected: set[frozenset[str]] = set()
    for table in Base.metadata.sorted_tables:
        expected |= _create_statements(f"{CreateTable(table).compile(dialect=dialect)};")
        for index in table.indexes:
            expected |= _create_statements(f"{CreateIndex(index).compile(dialect=dialect)};")
    migrated = _create_statements(output.getvalue())
    assert migrated == expected
    assert any("id BIGSERIAL NOT NULL" in statement for statement in migrated)
    assert any("state_npz BYTEA NOT NULL" in statement for statement in migrated)


def test_upgrade_twice_is_harmless_and_downgrade_removes_everything(store: Store) -> None:
    store.upgrade()
    assert store.schema_drift() == []
    config = store.alembic_config()
    with store.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert set(inspect(store.engine).get_table_names()) <= {"alembic_version"}
    store.upgrade()
    assert store.schema_drift() == []


def test_constraints_carry_the_conventional_names(store: Store) -> None:
    """Named constraints are what later migrations refer to, on both backends."""
    inspector = inspect(store.engine)
    assert inspector.get_pk_constraint("jobs")["name"] in ("pk_jobs", None)  # SQLite: unnamed
    assert {fk["name"] for fk in inspector.get_foreign_keys("predictions")} == {
        "fk_predictions_job_id_jobs"
    }
    assert {fk["name"] for fk in inspector.get_foreign_keys("corrections")} == {
        "fk_corrections_job_id_jobs"
    }
    assert {uq["name"] for uq in inspector.get_unique_constraints("events")} == {
        "uq_events_idempotency_key"
    }
    assert {uq["name"] for uq in inspector.get_unique_constraints("checkpoints")} == {
        "uq_checkpoints_last_event_seq"
    }
    assert {ix["name"] for ix in inspector.get_indexes("jobs")} == {
        "ix_jobs_user_id_end_s",
        "ix_jobs_end_s",
    }
    assert {ck["name"] for ck in inspector.get_check_constraints("events")} == {"ck_events_kind"}


# ---------------------------------------------------------------------- constraints
def test_idempotency_key_is_unique_in_the_database(store: Store) -> None:
    with store.session() as session, session.begin():
        session.add(event_row("ended:1"))
    with pytest.raises(IntegrityError), store.session() as session, session.begin():
        session.add(event_row("ended:1"))
    assert store.last_event_seq() == 1


def test_event_kind_is_checked(store: Store) -> None:
    row = event_row("x:1")
    row.kind = "exploded"
    with pytest.raises(IntegrityError), store.session() as session, session.begin():
        session.add(row)


def test_prediction_of_an_unknown_job_is_refused(store: Store) -> None:
    """Foreign keys are enforced on SQLite too (PRAGMA foreign_keys on every connection)."""
    with pytest.raises(IntegrityError), store.session() as session, session.begin():
        session.add(PredictionRow(job_id=99, predicted_s=1, predicted_at_s=0, model_t=0))


# ---------------------------------------------------------------------- round trips
def test_job_row_round_trips_its_request(store: Store) -> None:
    request = make_request(
        job_id=2**40,  # SLURM ids are below 2**32, but nothing here should care
        submit_s=4_102_444_800,  # 2100-01-01: past 2038, hence BigInteger
        group_id=3,
        executable_id=9,
        queue_id=2,
        partition_id=5,
    )
    with store.session() as session, session.begin():
        session.add(JobRow.from_request(request, status="submitted", observed=True))
    with store.session() as session:
        row = session.get(JobRow, request.job_id)
        assert row is not None
        assert row.to_request() == request
        assert row.observed is True and row.status == "submitted" and row.learned is None


def test_checkpoint_blob_and_log_read_back_exactly(store: Store) -> None:
    blob = bytes(range(256)) * 8192  # 2 MiB, every byte value
    with store.session() as session, session.begin():
        for seq in range(1, 6):
            session.add(event_row(f"submitted:{seq}", seq))
        session.add(CheckpointRow(created_at_s=1.0, last_event_seq=2, state_npz=b"old"))
        session.add(CheckpointRow(created_at_s=2.0, last_event_seq=4, state_npz=blob))
    checkpoint = store.latest_checkpoint()
    assert checkpoint is not None
    assert checkpoint.last_event_seq == 4 and checkpoint.state_npz == blob
    after = list(store.events_after(checkpoint.last_event_seq))
    assert [(event.seq, event.job_id, event.payload) for event in after] == [(5, 5, {})]
    assert store.last_event_seq() == 5


def test_empty_store_has_no_checkpoint_and_no_events(store: Store) -> None:
    assert store.latest_checkpoint() is None
    assert list(store.events_after(0)) == []
    assert store.last_event_seq() == 0


# ---------------------------------------------------------------------- SQLite settings
_COMMIT_THEN_DIE = """
import os, signal, sys
from hpcpredict.daemon.core.store import EventRow, Store
store = Store(sys.argv[1])
store.upgrade()
with store.session() as session, session.begin():
    session.add(EventRow(kind="submitted", job_id=1, payload_json="{}", occurred_at_s=0,
                         recorded_at_s=0.0, idempotency_key="submitted:1"))
os.kill(os.getpid(), signal.SIGKILL)  # no close, no WAL checkpoint: a crash right after commit
"""


def test_sqlite_commits_survive_kill_9_in_wal_mode(tmp_path: Path) -> None:
    """WAL with synchronous=NORMAL (store.py) syncs at checkpoints only, yet a committed event
    is never lost to a process crash: it is in the -wal file, which the next open reads."""
    url = f"sqlite:///{tmp_path}/state.db"
    child = subprocess.run(
        [sys.executable, "-c", _COMMIT_THEN_DIE, url], check=False, timeout=120
    )
    assert child.returncode == -signal.SIGKILL
    assert (tmp_path / "state.db-wal").stat().st_size > 0  # the commit is only in the WAL
    store = Store(url)
    try:
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert [event.job_id for event in store.events_after(0)] == [1]
    finally:
        store.close()
