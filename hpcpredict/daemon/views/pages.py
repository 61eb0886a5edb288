"""What ``hpcpredict errors`` shows a sysadmin, from the database alone (the page is `report_page`'s).

Both read the store the daemon writes (so they work with the daemon running or not) and never
create or upgrade it: a read-only command that made a database appear where a typo pointed
would hide the typo. The numbers are `hpcpredict.daemon.core.judged_errors`'; this module only shapes them.
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pandas as pd
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from hpcpredict.daemon.core.judged_errors import ERROR_COLUMNS, statistics_by_user
from hpcpredict.daemon.core.store import Store
from hpcpredict.slurm.convert import HistoryJob

TOTAL_ROW = "all"


class ViewError(RuntimeError):
    """The database cannot be read as a hpcpredict store (the message says what to do)."""


def open_existing_store(url: str, *, missing_hint: str = "start `hpcpredict serve` or give --db") -> Store:
    """A `Store` on `url` that must already hold a hpcpredict schema at the newest revision.

    Messages name the URL with its password hidden: they end up in terminals and tickets;
    `missing_hint` is what they suggest when the SQLite file does not exist (the caller knows
    which configuration named it).
    """
    from sqlalchemy.exc import ArgumentError, DBAPIError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ViewError(f"{url!r} is not a database URL (sqlite:///path/file.db or "
                        f"postgresql+psycopg://user@host/db)") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:" or not Path(database).is_file():
            raise ViewError(f"{shown}: no such database file ({missing_hint})")
        _check_sqlite_file(Path(database), shown)
    try:
        store = Store(url)
    except (ArgumentError, ImportError) as error:  # unknown dialect, driver not installed
        raise ViewError(f"{shown}: cannot open the database ({error})") from None
    try:
        tables = set(inspect(store.engine).get_table_names())
        if "jobs" not in tables or "alembic_version" not in tables:
            raise ViewError(f"{shown}: not a hpcpredict database (no jobs table)")
        _check_revision(store, shown)
    except ViewError:
        store.close()
        raise
    except Exception as error:
        store.close()
        # The driver's own words ("file is not a database", "connection refused"), without
        # SQLAlchemy's wrapping and link.
        reason = error.orig if isinstance(error, DBAPIError) else error
        raise ViewError(f"{shown}: cannot read the database ({reason})") from error
    return store


def _check_sqlite_file(path: Path, shown: str) -> None:
    """Look at a SQLite file read-only before `Store` connects to it.

    `Store`'s connections switch the file to WAL mode, which persists in the file: harmless on
    the daemon's store (already WAL), but a read-only command must not convert somebody else's
    database that ``--db`` pointed at by mistake.
    """
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {name for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            journal_mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise ViewError(f"{shown}: cannot read the database ({error})") from None
    if not {"jobs", "alembic_version"} <= tables:
        raise ViewError(f"{shown}: not a hpcpredict database (no jobs table)")
    if journal_mode != "wal":
        raise ViewError(f"{shown}: not a hpcpredict database (journal mode {journal_mode}, the "
                        f"daemon's is wal)")


def _check_revision(store: Store, shown: str) -> None:
    """The queries assume the newest schema: older means upgrade the store, unknown means the
    store was upgraded by a newer hpcpredict than this one."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    current, head = store.current_revision(), store.head_revision()
    if current == head:
        return
    if current is None:
        raise ViewError(f"{shown}: not a hpcpredict database (no schema revision)")
    try:
        ScriptDirectory.from_config(store.alembic_config()).get_revision(current)
    except CommandError:
        raise ViewError(
            f"{shown}: schema at revision {current}, unknown to this hpcpredict (which expects "
            f"{head}): it was upgraded by a newer hpcpredict; upgrade this one"
        ) from None
    raise ViewError(
        f"{shown}: schema at revision {current}, this hpcpredict expects {head}: start "
        f"`hpcpredict serve` once to upgrade it"
    )


def parse_since(text: str) -> int:
    """``--since``: Unix seconds, or an ISO date/datetime in the local time zone."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ViewError(f"--since: expected a date (2026-11-01), a datetime (2026-11-01T08:00) "
                        f"or Unix seconds, got {text!r}") from None
    return int(moment.timestamp() if moment.tzinfo else moment.astimezone().timestamp())


def error_table(judged: pd.DataFrame) -> pd.DataFrame:
    """Per-user statistics plus a last row over all judged jobs (user_id "all")."""
    per_user = statistics_by_user(judged)
    if per_user.empty:
        return per_user
    everyone = statistics_by_user(judged.assign(user_id=0)).assign(user_id=TOTAL_ROW)
    table = pd.concat([per_user.astype({"user_id": object}), everyone], ignore_index=True)
    return table[list(ERROR_COLUMNS)]


def format_table(table: pd.DataFrame) -> str:
    """Aligned text for a terminal: durations in seconds, rates in percent."""
    shown = pd.DataFrame(
        {
            "user": table["user_id"].astype(str),
            "jobs": table["count"].map("{:,}".format),
            "MAE s": table["mae_s"].map("{:,.0f}".format),
            "median AE s": table["median_ae_s"].map("{:,.0f}".format),
            "under %": (100 * table["under_rate"]).map("{:.1f}".format),
            "pred/actual": table["mean_ratio"].map("{:.2f}".format),
            "corrections": table["corrections"].map("{:,}".format),
            "request MAE s": table["requested_mae_s"].map("{:,.0f}".format),
            "AVE2 MAE s": table["ave2_mae_s"].map("{:,.0f}".format),
        }
    )
    return shown.to_string(index=False)


def to_csv(table: pd.DataFrame) -> str:
    buffer = io.StringIO()
    table.to_csv(buffer, index=False)
    return buffer.getvalue()


def read_store(url: str) -> Iterator[HistoryJob]:
    """Every ended job the daemon recorded, with the user's original request, as the SLURM
    history `slurm-convert --db` writes as SWF (`hpcpredict.slurm.convert.to_swf`)."""
    from sqlalchemy import select

    from hpcpredict.daemon.core.store import JobRow

    store = open_existing_store(url)
    try:
        with store.session() as session:
            rows = session.scalars(select(JobRow).where(JobRow.status == "ended").order_by(JobRow.job_id))
            for row in rows:
                # The runtime reported at the end is the truth; the start follows from it.
                started = row.end_s - row.run_s if row.run_s and row.end_s is not None else None
                yield HistoryJob(
                    job_id=row.job_id, uid=row.user_id, gid=row.group_id,
                    state=row.final_state or "COMPLETED", partition="", name="",
                    cpus=row.procs if row.run_s else 0, requested_cpus=row.procs,
                    submit_s=row.submit_s, start_s=started if row.run_s else None,
                    end_s=row.end_s or row.submit_s, requested_s=row.requested_s,
                )
    finally:
        store.close()
