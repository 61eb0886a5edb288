"""Where campaign results live: one row per finished simulation, through SQLAlchemy 2.

SQLite (a file next to the campaign file) by default, any SQLAlchemy URL otherwise (PostgreSQL
for a shared campaign). A row is written only when its run has finished, in its own
transaction, with the cell's key as primary key: a run is either stored whole or absent, a
campaign resumed after a kill recomputes only what was in flight, and a result can never be
stored twice.

Stores written before replicas existed lack the `replica`, `shake_s` and `seed` columns; they are
added on open (their rows are replica 0, the log itself), so old results stay usable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

import pandas as pd
from sqlalchemy import Float, Integer, String, Text, create_engine, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from hpcpredict.sim.campaign import Cell, CellResult


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
        learned = cell.spec.predictor == "learned"
        row = RunRow(
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
            loss=cell.spec.loss if learned else None,
            eta=cell.spec.eta if learned else None,
            l2=cell.spec.l2 if learned else None,
            loss_unit_s=cell.spec.loss_unit_s if learned else None,
            negative=cell.spec.negative if learned else None,
            jobs=int(result.metrics["jobs"]),
            ave_bsld=float(result.metrics["ave_bsld"]),
            metrics_json=json.dumps(result.metrics, sort_keys=True),
            wall_time_s=result.wall_time_s,
            host=result.host,
            finished_at=time.time(),
        )
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
        records = []
        for row in rows:
            record = {
                column.name: getattr(row, column.name)
                for column in RunRow.__table__.columns
                if column.name != "metrics_json"
            }
            record.update({f"m_{k}": v for k, v in json.loads(row.metrics_json).items()})
            records.append(record)
        return pd.DataFrame.from_records(records)
