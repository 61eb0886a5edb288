"""Where campaign results live: one row per finished simulation.

Two kinds of store, chosen by `open_store` from the location's form:

- a SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg://...``): SQLite next to the campaign
  file by default, PostgreSQL for a campaign shared by several machines. A row is written only
  when its run has finished, in its own transaction, with the cell's key as primary key.
- a ``.jsonl`` file: one JSON object per finished run, appended and flushed to disk before the
  next; a text file that can be committed beside the report it produces (a long campaign then
  survives the machine it ran on and resumes on another), diffed, and read without hpcpredict.

Both keep the same promise: a run is either stored whole or absent, a campaign resumed after a
kill recomputes only what was in flight, and a result is never stored twice.

Stores written before replicas existed lack the `replica`, `shake_s` and `seed` columns; they are
added on open (their rows are replica 0, the log itself), so old results stay usable.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from sqlalchemy import Float, Integer, String, Text, create_engine, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from hpcpredict.experiments.campaign import Cell, CellResult


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "campaign_runs"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    campaign: Mapped[str] = mapped_column(String(200), index=True)
    log: Mapped[str] = mapped_column(String(200), index=True)
    label: Mapped[str] = mapped_column(String(400))
    replica: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    shake_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    seed: Mapped[int | None] = mapped_column(Integer, nullable=True)
    scheduler: Mapped[str] = mapped_column(String(40))
    predictor: Mapped[str] = mapped_column(String(40))
    correction: Mapped[str] = mapped_column(String(40))
    loss: Mapped[str | None] = mapped_column(String(100), nullable=True)
    eta: Mapped[float | None] = mapped_column(Float, nullable=True)
    l2: Mapped[float | None] = mapped_column(Float, nullable=True)
    loss_unit_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    negative: Mapped[str | None] = mapped_column(String(10), nullable=True)
    jobs: Mapped[int] = mapped_column(Integer)
    ave_bsld: Mapped[float] = mapped_column(Float)
    metrics_json: Mapped[str] = mapped_column(Text)
    wall_time_s: Mapped[float] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(200))
    finished_at: Mapped[float] = mapped_column(Float)


class CampaignStore:
    """Finished runs of campaigns, keyed by `Cell.key`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url)
        Base.metadata.create_all(self.engine)
        self._add_replica_columns()

    def _add_replica_columns(self) -> None:
        """Bring a store from before replicas up to date (every old row is replica 0)."""
        present = {column["name"] for column in inspect(self.engine).get_columns("campaign_runs")}
        missing = [
            (name, ddl)
            for name, ddl in (("replica", "INTEGER NOT NULL DEFAULT 0"), ("shake_s", "INTEGER"),
                              ("seed", "INTEGER"))
            if name not in present
        ]
        if missing:
            with self.engine.begin() as connection:
                for name, ddl in missing:
                    connection.execute(text(f"ALTER TABLE campaign_runs ADD COLUMN {name} {ddl}"))

    def close(self) -> None:
        self.engine.dispose()

    def done_keys(self) -> set[str]:
        with Session(self.engine) as session:
            return set(session.scalars(select(RunRow.key)))

    def add(self, campaign: str, cell: Cell, result: CellResult) -> bool:
        """Store one finished run; False (and nothing written) if its key is already there."""
        record = run_record(campaign, cell, result)
        row = RunRow(metrics_json=json.dumps(record.pop("metrics"), sort_keys=True), **record)
        with Session(self.engine) as session:
            session.add(row)
            try:
                session.commit()
            except IntegrityError:
                session.rollback()
                return False
        return True

    def frame(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Stored runs as a DataFrame (one column per metric), optionally only `keys`."""
        statement = select(RunRow)
        if keys is not None:
            statement = statement.where(RunRow.key.in_(list(keys)))
        with Session(self.engine) as session:
            rows = list(session.scalars(statement))
        return runs_frame(
            {
                column.name: getattr(row, column.name)
                for column in RunRow.__table__.columns
                if column.name != "metrics_json"
            }
            | {"metrics": json.loads(row.metrics_json)}
            for row in rows
        )


def run_record(campaign: str, cell: Cell, result: CellResult) -> dict[str, Any]:
    """One finished run as a store keeps it: the `RunRow` columns, the metrics as a dict."""
    learned = cell.spec.predictor == "learned"
    return dict(
        key=cell.key,
        campaign=campaign,
        log=cell.log.name,
        label=cell.label,
        replica=cell.replica,
        shake_s=cell.shake_s if cell.replica else None,
        seed=cell.seed if cell.replica else None,
        scheduler=cell.spec.scheduler,
        predictor=cell.spec.predictor,
        correction=cell.spec.correction,
        loss=cell.spec.learner.loss if learned else None,
        eta=cell.spec.learner.eta if learned else None,
        l2=cell.spec.learner.l2 if learned else None,
        loss_unit_s=cell.spec.learner.loss_unit_s if learned else None,
        negative=cell.spec.learner.negative if learned else None,
        jobs=int(result.metrics["jobs"]),
        ave_bsld=float(result.metrics["ave_bsld"]),
        metrics=dict(sorted(result.metrics.items())),
        wall_time_s=result.wall_time_s,
        host=result.host,
        finished_at=time.time(),
    )


def runs_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Stored runs as a DataFrame: one column per `run_record` field, ``m_<name>`` per metric."""
    rows = []
    for record in records:
        row = {name: value for name, value in record.items() if name != "metrics"}
        row.update({f"m_{k}": v for k, v in record["metrics"].items()})
        rows.append(row)
    return pd.DataFrame.from_records(rows)


class RunStore(Protocol):
    """What a campaign needs of a store (`CampaignStore`, `JsonLinesStore`)."""

    url: str

    def done_keys(self) -> set[str]: ...

    def add(self, campaign: str, cell: Cell, result: CellResult) -> bool: ...

    def frame(self, keys: Iterable[str] | None = None) -> pd.DataFrame: ...

    def close(self) -> None: ...


class StoreError(ValueError):
    """A store that cannot be used as it is: says which file, which line, what was found."""


class JsonLinesStore:
    """Finished runs as JSON lines in one file (module doc): written by one campaign at a time.

    Each run is one line, written with a single ``write`` and flushed to disk (fsync) before
    `add` returns. A kill can only leave the last line incomplete: that run was in flight, so the
    partial line is cut off when the store is next written to. A complete line that is not a run
    is damage, and is reported (file and line) instead of being skipped.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.url = str(self.path)
        self._records: dict[str, dict[str, Any]] = {}
        self._torn_at: int | None = None  # byte offset of an incomplete last line
        self._file: Any = None
        self._read()

    def _read(self) -> None:
        self._records.clear()
        self._torn_at = None
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        offset = 0
        for number, line in enumerate(data.splitlines(keepends=True), start=1):
            if not line.endswith(b"\n"):
                self._torn_at = offset  # the run in flight when the writer was killed
                break
            offset += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = record["key"]
                record["metrics"]  # noqa: B018 - a run without metrics is not a run
            except (ValueError, KeyError, TypeError) as error:
                raise StoreError(
                    f"{self.path}:{number}: not a stored run (expected one JSON object with "
                    f"'key' and 'metrics': {error})"
                ) from None
            self._records.setdefault(key, record)

    def done_keys(self) -> set[str]:
        return set(self._records)

    def add(self, campaign: str, cell: Cell, result: CellResult) -> bool:
        """Append one finished run; False (and nothing written) if its key is already there."""
        if self._file is None:
            self._open_for_writing()
        if cell.key in self._records:
            return False
        record = run_record(campaign, cell, result)
        self._file.write((json.dumps(record) + "\n").encode())
        self._file.flush()
        os.fsync(self._file.fileno())
        self._records[cell.key] = record
        return True

    def _open_for_writing(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "ab")  # noqa: SIM115 - kept open until close()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StoreError(f"{self.path}: another campaign is writing to this store") from None
        self._read()  # what was appended before the lock was ours counts as done
        if self._torn_at is not None:
            handle.truncate(self._torn_at)
            self._torn_at = None
        self._file = handle

    def frame(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """Stored runs as a DataFrame (one column per metric), optionally only `keys`."""
        if keys is None:
            return runs_frame(self._records.values())
        return runs_frame(self._records[key] for key in dict.fromkeys(keys) if key in self._records)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()  # closing releases the lock
            self._file = None


def store_file(location: str) -> Path | None:
    """The file a store location names (a .jsonl path or a SQLite URL), None for a server."""
    if "://" not in location:
        return Path(location)
    if location.startswith("sqlite:///"):
        return Path(location.removeprefix("sqlite:///"))
    return None


def open_store(location: str) -> RunStore:
    """The store at `location`: a path ending in ``.jsonl``, or a SQLAlchemy URL."""
    if "://" not in location and location.endswith(".jsonl"):
        return JsonLinesStore(location)
    if "://" not in location:
        raise StoreError(
            f"{location}: not a store (give a SQLAlchemy URL such as sqlite:///runs.sqlite, "
            "or a file ending in .jsonl)"
        )
    return CampaignStore(location)
