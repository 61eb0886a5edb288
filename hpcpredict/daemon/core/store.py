"""What the daemon keeps on disk: SQLAlchemy 2 models, and `Store`, the engine behind them.

Six tables:

* ``events`` — the append-only log of everything the daemon applied to its model, in order
  (``seq``). It is the source of truth: the other tables are projections of it, and the model is
  a checkpoint plus the events after it. ``idempotency_key`` is unique, so an event sent twice
  (a retried RPC, a SLURM history replayed at start-up) is stored once and learned once, even if
  a bug got past the service's own checks. It deliberately has no foreign key to ``jobs``: the
  log must be writable first (write-ahead), before the row it describes exists.
* ``jobs`` — one row per job id: its request, its lifecycle and how it ended.
* ``predictions`` — every prediction answered (a job asked twice has two rows).
* ``corrections`` — every change of a job's time limit reported to the daemon.
* ``checkpoints`` — the learner's state as .npz bytes, with the sequence number of the last
  event it includes.
* ``user_errors`` — each user's running error totals, updated in the transaction of every job
  end (`UserErrorRow`): what the metrics and ``GET /users`` read without scanning every job.

One schema for SQLite (the embedded default, a file under the state directory) and PostgreSQL
(production): only portable types, times as integer Unix seconds (``BigInteger``: 2038 is close
enough to matter), constraint names fixed by a naming convention so that migrations can refer to
them on both backends (Alembic, "The Importance of Naming Constraints"). The schema is created and
upgraded only by the Alembic migrations shipped in `hpcpredict.daemon.core.migrations`
(`Store.upgrade`), never by ``create_all``: a daemon started on last year's database must upgrade
it, not half-create it.

The models describe the tables (and serve the reads: the admin API, ``hpcpredict errors``); the
event write path, a transaction per event on the daemon's hot path, writes their rows with Core
statements built once (`hpcpredict.daemon.core.statements`), not ORM objects.

Nothing here runs at import: an engine exists only inside a `Store` built from a URL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    create_engine,
    delete,
    event,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from hpcpredict.daemon.core.events import REQUEST_FIELDS, EventKind
from hpcpredict.jobs import JobRequest

if TYPE_CHECKING:  # Alembic is imported only by the methods that use it
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# Alembic, "The Importance of Naming Constraints": named constraints can be dropped or altered by
# a later migration on PostgreSQL and recreated by batch mode on SQLite.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only makes an INTEGER PRIMARY KEY an auto-incrementing rowid; PostgreSQL gets BIGSERIAL.
_BIG_ID = BigInteger().with_variant(Integer(), "sqlite")

EVENT_KINDS = tuple(kind.value for kind in EventKind)
JOB_STATUSES = ("submitted", "running", "ended")


def _one_of(column: str, values: tuple[str, ...]) -> str:
    """SQL for a CHECK that `column` holds one of `values` (portable: no native ENUM)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JobRow(Base):
    """A job as the daemon knows it. Request fields never change after the row is created."""

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint(_one_of("status", JOB_STATUSES), name="status"),
        # A user's jobs, by end: AVE2's last two at a submission (user_errors) in O(log n), and
        # every query by user (its first column).
        Index("ix_jobs_user_id_end_s", "user_id", "end_s"),
    )

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(Integer)  # indexed with end_s (__table_args__)
    group_id: Mapped[int] = mapped_column(Integer)
    procs: Mapped[int] = mapped_column(Integer)
    requested_s: Mapped[int] = mapped_column(BigInteger)
    executable_id: Mapped[int] = mapped_column(Integer)
    queue_id: Mapped[int] = mapped_column(Integer)
    partition_id: Mapped[int] = mapped_column(Integer)
    submit_s: Mapped[int] = mapped_column(BigInteger)
    start_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    run_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Lifecycle as seen by the daemon: submitted -> running -> ended (running may be skipped).
    status: Mapped[str] = mapped_column(String(16))
    # The scheduler's word for how the job ended (SLURM: COMPLETED, TIMEOUT, CANCELLED, ...).
    final_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Time limit in force as last reported through `limit_changed`; None: as submitted.
    limit_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # True when the learner saw the submission (so it holds the job's features from then).
    observed: Mapped[bool] = mapped_column(Boolean)
    killed_at_lowered_limit: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    learned: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    # Which rule of `hpcpredict.daemon.core.learning.decide` applied at the end, and so why.
    learn_rule: Mapped[str | None] = mapped_column(String(32), nullable=True)

    @classmethod
    def from_request(cls, request: JobRequest, *, status: str, observed: bool) -> JobRow:
        return cls(**job_values(request, status=status, observed=observed))

    def to_request(self) -> JobRequest:
        return request_from_row(self)


def job_values(request: JobRequest, *, status: str, observed: bool) -> dict[str, Any]:
    """The columns of a new ``jobs`` row for `request` (what the event path inserts)."""
    return {
        "job_id": request.job_id,
        "user_id": request.user_id,
        "group_id": request.group_id,
        "procs": request.procs,
        "requested_s": request.requested_s,
        "executable_id": request.executable_id,
        "queue_id": request.queue_id,
        "partition_id": request.partition_id,
        "submit_s": request.submit_s,
        "status": status,
        "observed": observed,
    }


def request_from_row(row: Any) -> JobRequest:
    """The request of a ``jobs`` row: a `JobRow`, or a Core result row of its columns (named as
    the request's fields)."""
    return JobRequest(*[getattr(row, name) for name in REQUEST_FIELDS])


class PredictionRow(Base):
    """One prediction answered; ``model_t`` is the learner's step count when it was made."""

    __tablename__ = "predictions"

    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("jobs.job_id"), index=True)
    predicted_s: Mapped[int] = mapped_column(BigInteger)
    predicted_at_s: Mapped[int] = mapped_column(BigInteger)
    model_t: Mapped[int] = mapped_column(BigInteger)


class CorrectionRow(Base):
    """A job's time limit changed from ``old_limit_s`` to ``new_limit_s`` at ``changed_at_s``."""

    __tablename__ = "corrections"

    id: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("jobs.job_id"), index=True)
    old_limit_s: Mapped[int] = mapped_column(BigInteger)
    new_limit_s: Mapped[int] = mapped_column(BigInteger)
    changed_at_s: Mapped[int] = mapped_column(BigInteger)
    event_seq: Mapped[int] = mapped_column(BigInteger)


class EventRow(Base):
    """One applied event. ``payload_json`` holds everything replaying it needs (see events.py).

    ``seq`` increases with every event but is not a count: on PostgreSQL a number taken by a
    transaction that rolled back (a duplicate event, a failed commit) is never handed out again
    (sequences are not transactional), so the log may skip numbers. Only their order matters.
    """

    __tablename__ = "events"
    __table_args__ = (CheckConstraint(_one_of("kind", EVENT_KINDS), name="kind"),)

    seq: Mapped[int] = mapped_column(_BIG_ID, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    payload_json: Mapped[str] = mapped_column(Text)
    occurred_at_s: Mapped[int] = mapped_column(BigInteger)
    recorded_at_s: Mapped[float] = mapped_column(Float)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)


class CheckpointRow(Base):
    """The learner's `state_dict()` as .npz bytes, including events up to ``last_event_seq``."""

    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at_s: Mapped[float] = mapped_column(Float)
    last_event_seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    state_npz: Mapped[bytes] = mapped_column(LargeBinary)


class HistoryJudgementRow(Base):
    """A job of the history `hpcpredict train` replayed, judged as the replay predicted it
    before learning it (hpcpredict.daemon.core.history_judgements). Kept apart from the live tables:
    these jobs never ran under the daemon, and a site must be able to tell day-one errors on
    its past from what the daemon did live. Replaced whole by each `train`.
    """

    __tablename__ = "history_judgements"

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(Integer)
    end_s: Mapped[int] = mapped_column(BigInteger)
    predicted_s: Mapped[int] = mapped_column(BigInteger)
    run_s: Mapped[int] = mapped_column(BigInteger)
    requested_s: Mapped[int] = mapped_column(BigInteger)
    ave2_s: Mapped[int] = mapped_column(BigInteger)


class UserErrorRow(Base):
    """A user's error totals over the jobs judged so far (hpcpredict.daemon.core.judged_errors says which
    jobs are judged and how). Sums, not means, so that one job's end is one update; the exact
    statistics for any period, medians included, come from `hpcpredict.daemon.core.judged_errors`, which
    these totals must always agree with (tests/test_daemon_user_errors.py).

    AVE2's prediction for a job is the one it had at the job's submission, from the user's jobs
    recorded as ended before it: a job whose end reaches the daemon after a later job's end
    (a spool ingested late) is missing from that later job's AVE2, where the exact statistics
    would include it.
    """

    __tablename__ = "user_errors"

    user_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    jobs: Mapped[int] = mapped_column(BigInteger)
    abs_error_sum_s: Mapped[int] = mapped_column(BigInteger)
    under_jobs: Mapped[int] = mapped_column(BigInteger)
    ratio_sum: Mapped[float] = mapped_column(Float)
    corrections: Mapped[int] = mapped_column(BigInteger)
    requested_abs_error_sum_s: Mapped[int] = mapped_column(BigInteger)
    ave2_abs_error_sum_s: Mapped[int] = mapped_column(BigInteger)
    last_end_s: Mapped[int] = mapped_column(BigInteger)


def empty_user_totals(user_id: int) -> dict[str, Any]:
    """A ``user_errors`` row (column -> value) for a user with no judged job yet."""
    return {
        "user_id": user_id,
        "jobs": 0,
        "abs_error_sum_s": 0,
        "under_jobs": 0,
        "ratio_sum": 0.0,
        "corrections": 0,
        "requested_abs_error_sum_s": 0,
        "ave2_abs_error_sum_s": 0,
        "last_end_s": 0,
    }


def add_job_to_totals(
    totals: dict[str, Any],
    *,
    predicted_s: int,
    run_s: int,
    requested_s: int,
    ave2_s: int,
    corrections: int,
    end_s: int,
) -> None:
    """Count one judged job (``run_s > 0``) in `totals`, a ``user_errors`` row as a dict.

    Plain values rather than `UserErrorRow` objects: the end's transaction reads and writes the
    row with Core statements (service.py), the rebuild inserts them in one executemany."""
    totals["jobs"] += 1
    totals["abs_error_sum_s"] += abs(predicted_s - run_s)
    totals["under_jobs"] += int(predicted_s < run_s)
    totals["ratio_sum"] += predicted_s / run_s
    totals["corrections"] += corrections
    totals["requested_abs_error_sum_s"] += abs(requested_s - run_s)
    totals["ave2_abs_error_sum_s"] += abs(ave2_s - run_s)
    totals["last_end_s"] = max(totals["last_end_s"], end_s)


def user_totals_summary(totals: Any) -> dict[str, float | int]:
    """The means of `hpcpredict.daemon.core.judged_errors.ERROR_COLUMNS` (all but the median) of a
    ``user_errors`` row (anything with its columns as attributes)."""
    jobs = totals.jobs
    return {
        "user_id": totals.user_id,
        "count": jobs,
        "mae_s": totals.abs_error_sum_s / jobs,
        "under_rate": totals.under_jobs / jobs,
        "mean_ratio": totals.ratio_sum / jobs,
        "corrections": totals.corrections,
        "requested_mae_s": totals.requested_abs_error_sum_s / jobs,
        "ave2_mae_s": totals.ave2_abs_error_sum_s / jobs,
        "last_end_s": totals.last_end_s,
    }


class UnknownSchemaError(ValueError):
    """The database is at a schema revision the shipped migrations do not know."""


class DamagedLogError(ValueError):
    """An event of the log cannot be read back (its payload is not JSON)."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event read back from the log, as plain data (ORM rows never reach the learner)."""

    seq: int
    kind: str
    job_id: int
    payload: dict[str, Any]
    occurred_at_s: int


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    id: int
    created_at_s: float
    last_event_seq: int
    state_npz: bytes


class Store:
    """The daemon's database, opened from a SQLAlchemy URL.

    ``sqlite:///path/state.db`` (the default the CLI builds under the state directory) or
    ``postgresql+psycopg://...``. The schema is not touched until `upgrade` is called: opening a
    store is cheap and side-effect free, which is what read-only commands (``hpcpredict errors``)
    need.
    """

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.engine: Engine = create_engine(url, echo=echo)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _configure_sqlite_connection)

    def close(self) -> None:
        self.engine.dispose()

    def session(self) -> Session:
        return Session(self.engine)

    # ------------------------------------------------------------------ schema
    def alembic_config(self) -> Config:
        """An Alembic `Config` built in code (no alembic.ini): the migrations of this package.

        Also what a developer passes to ``alembic.command.revision(..., autogenerate=True)``.
        The URL is handed over as a connection (see `upgrade`), never written into the config,
        whose ConfigParser would choke on the '%' of a URL-encoded password.
        """
        from alembic.config import Config  # imported here: `hpcpredict errors` does not need it

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS_DIR))
        return config

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to `revision` (Alembic ``upgrade``), creating it on an empty database.

        A database at a revision these migrations do not know (written by a newer hpcpredict,
        or not by hpcpredict) raises `UnknownSchemaError`, in one line: nothing is changed."""
        from alembic import command
        from alembic.util import CommandError

        config = self.alembic_config()
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            try:
                command.upgrade(config, revision)
            except CommandError as error:
                current = self._revision_on(connection)
                if current is None or current in self._known_revisions():
                    raise
                raise UnknownSchemaError(
                    f"the database is at schema revision {current!r}, which this hpcpredict does "
                    f"not know (it knows up to {self.head_revision()!r}): it was written by a "
                    "newer hpcpredict. Run that version, or restore a backup this version wrote; "
                    "hpcpredict never downgrades a store"
                ) from None

    @staticmethod
    def _revision_on(connection: Any) -> str | None:
        from alembic.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()

    def _known_revisions(self) -> set[str]:
        from alembic.script import ScriptDirectory

        return {script.revision for script in ScriptDirectory.from_config(self.alembic_config()).walk_revisions()}

    def current_revision(self) -> str | None:
        """The Alembic revision the database is at (None: never upgraded)."""
        from alembic.migration import MigrationContext

        with self.engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    def head_revision(self) -> str | None:
        """The newest revision the shipped migrations know (what `upgrade` brings a store to)."""
        from alembic.script import ScriptDirectory

        return ScriptDirectory.from_config(self.alembic_config()).get_current_head()

    def schema_drift(self) -> list[Any]:
        """Differences between the database and these models (Alembic ``compare_metadata``).

        Empty after `upgrade` when the migrations create exactly the models' schema: the test
        that keeps a model change from shipping without its migration.
        """
        from alembic.autogenerate import compare_metadata
        from alembic.migration import MigrationContext

        with self.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))

    def integrity_problems(self, max_rows: int = 5) -> list[str]:
        """What SQLite's ``PRAGMA quick_check`` finds wrong in the file (empty: nothing).

        quick_check reads every page and checks the b-trees' structure (not that indexes match
        their tables, which the full integrity_check adds at several times the cost): damage
        such as garbage written over a page shows up here at start rather than as failing
        events later. PostgreSQL checks its own pages; nothing to do there.
        """
        if self.engine.dialect.name != "sqlite":
            return []
        with self.engine.connect() as connection:
            rows = connection.exec_driver_sql(f"PRAGMA quick_check({int(max_rows)})").fetchall()
        if [row[0] for row in rows] == ["ok"]:
            return []
        # A row may hold several lines, the first naming the schema ("*** in database main ***").
        lines = (line.strip() for row in rows for line in str(row[0]).splitlines())
        return [line for line in lines if line and not line.startswith("***")]

    # ------------------------------------------------------------------ reading the log
    def latest_checkpoint(self) -> StoredCheckpoint | None:
        """The checkpoint covering the most events, or None."""
        with self.session() as session:
            row = session.scalars(
                select(CheckpointRow).order_by(CheckpointRow.last_event_seq.desc()).limit(1)
            ).first()
            if row is None:
                return None
            return StoredCheckpoint(row.id, row.created_at_s, row.last_event_seq, row.state_npz)

    def checkpoints(self) -> Iterator[StoredCheckpoint]:
        """Every checkpoint, the one covering the most events first, each read when reached
        (a restore usually needs only the first)."""
        with self.session() as session:
            ids = list(session.scalars(
                select(CheckpointRow.id).order_by(CheckpointRow.last_event_seq.desc())
            ))
        for checkpoint_id in ids:
            with self.session() as session:
                row = session.get(CheckpointRow, checkpoint_id)
                if row is not None:
                    yield StoredCheckpoint(row.id, row.created_at_s, row.last_event_seq, row.state_npz)

    def delete_checkpoints(self, ids: list[int]) -> None:
        with self.session() as session, session.begin():
            session.execute(delete(CheckpointRow).where(CheckpointRow.id.in_(ids)))

    def has_event(self, seq: int) -> bool:
        """True when the log holds event number `seq` (committed)."""
        with self.session() as session:
            return session.get(EventRow, seq) is not None

    def events_after(self, seq: int) -> Iterator[StoredEvent]:
        """Events with a sequence number above `seq`, in order (what a restart replays)."""
        with self.session() as session:
            rows = session.scalars(
                select(EventRow).where(EventRow.seq > seq).order_by(EventRow.seq)
            )
            for row in rows:
                try:
                    payload = json.loads(row.payload_json)
                except ValueError as error:
                    raise DamagedLogError(
                        f"event {row.seq} of the log ({row.kind}, job {row.job_id}) has a payload "
                        f"that is not JSON ({error}): the event log is damaged. Restore the "
                        "database from a backup (the log is the model's source of truth: the "
                        "daemon does not skip an event)"
                    ) from None
                yield StoredEvent(row.seq, row.kind, row.job_id, payload, row.occurred_at_s)

    def last_event_seq(self) -> int:
        """Sequence number of the last event stored, 0 when the log is empty."""
        with self.session() as session:
            last = session.scalar(select(EventRow.seq).order_by(EventRow.seq.desc()).limit(1))
            return 0 if last is None else int(last)


def now_wall_s() -> float:
    """Wall-clock time for ``recorded_at_s`` / ``created_at_s`` (bookkeeping, never learned)."""
    return time.time()


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    """Per-connection SQLite settings; registered on this engine only, never globally.

    * foreign_keys: SQLite ignores FOREIGN KEY clauses unless asked, PostgreSQL always checks
      them; the same code must fail the same way on both.
    * busy_timeout: a reader (``hpcpredict errors``) holding the file must make the daemon wait
      a little, not fail with "database is locked". Set first: switching to WAL below takes a
      lock for a moment.
    * journal_mode=WAL: a commit appends to the -wal file and syncs it once, instead of the
      rollback journal's several syncs (benchmarks/bench_service_events.py: about 3 ms -> 1.2 ms
      per event with the setting below); readers no longer block the writer either. Stored in
      the file, so set on every connection is a no-op after the first; an in-memory database
      answers "memory" and stays as it is. WAL needs the -shm file beside the database, hence
      a local file system, which the state directory is.
    * synchronous=NORMAL: in WAL mode the WAL is synced at checkpoints, not at each commit. A
      committed transaction is then in the OS's cache, so it survives the daemon being killed
      (kill -9, OOM: tests/test_daemon_crash.py); only an OS crash or power loss can lose the
      last commits, never corrupt the file (SQLite, "Write-Ahead Logging").
    """
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
