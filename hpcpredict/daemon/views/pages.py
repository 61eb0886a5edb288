"""What ``hpcpredict errors`` and ``hpcpredict report`` show a sysadmin, from the database alone.

Both read the store the daemon writes (so they work with the daemon running or not) and never
create or upgrade it: a read-only command that made a database appear where a typo pointed
would hide the typo. The numbers are `hpcpredict.daemon.core.judged_errors`'; this module only shapes them.
"""

from __future__ import annotations

import html
import io
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from hpcpredict.daemon.core.judged_errors import ERROR_COLUMNS, statistics_by_user
from hpcpredict.daemon.core.store import Store
from hpcpredict.slurm.convert import HistoryJob

if TYPE_CHECKING:
    from hpcpredict.daemon.views.explain import ExplainError, Why

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


# ---------------------------------------------------------------------------- the HTML report
@dataclass(frozen=True)
class Report:
    index: Path
    images: list[Path]


def write_error_report(judged: pd.DataFrame, out_dir: Path, *, title: str = "hpcpredict: prediction errors",
                       top_users: int = 20, db_url: str = "", killed_at_lowered_limit: int = 0,
                       whys: Sequence[Why | ExplainError] = ()) -> Report:
    """index.html: what lowering limits does (`site_summary`), the per-user table, three plots
    (PNG files beside it) and, for the users in `whys`, why the model predicts what it does."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = error_table(judged)
    images = [
        _plot_error_ecdf(judged, out_dir / "error_ecdf.png"),
        _plot_user_bars(table, out_dir / "users_mae.png", top_users),
        _plot_over_time(judged, out_dir / "error_over_time.png"),
    ]
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in _html_cells(table)
    )
    headers = "".join(f"<th>{html.escape(h)}</th>" for h in (
        "user", "jobs", "MAE (s)", "median AE (s)", "under-predicted", "predicted / actual",
        "corrections", "request MAE (s)", "AVE2 MAE (s)"))
    span = ""
    if not judged.empty:
        first, last = (datetime.fromtimestamp(int(t)).isoformat(sep=" ", timespec="minutes")
                       for t in (judged["end_s"].min(), judged["end_s"].max()))
        span = f"{len(judged):,} jobs that ended between {first} and {last} (local time)."
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:right}}img{{max-width:100%}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(span or "No judged job yet.")} Each job is judged on the prediction given at its
submission, against its runtime; the user's own request and AVE2 (mean of the user's last two
runtimes) are what a scheduler would have had without hpcpredict.</p>
{_summary_html(judged, db_url, killed_at_lowered_limit)}
<h2>Per user</h2>
<table><thead><tr>{headers}</tr></thead><tbody>
{rows}
</tbody></table>
<h2>Errors</h2><img src="error_ecdf.png" alt="ECDF of prediction errors">
<h2>Users</h2><img src="users_mae.png" alt="Mean absolute error per user">
<h2>Over time</h2><img src="error_over_time.png" alt="Error over time">
{_whys_html(whys)}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return Report(index, images)


def _summary_html(judged: pd.DataFrame, db_url: str, killed_at_lowered_limit: int) -> str:
    """The report's opening section: what lowering limits does, the gate, how to read MAE."""
    from hpcpredict.daemon.views.site_summary import GATE_TEXT, format_summary, site_summary

    if judged.empty:
        return ""
    lines = format_summary(site_summary(judged, killed_at_lowered_limit), db_url).splitlines()
    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in lines[1:])
    return (f"<h2>{html.escape(lines[0].rstrip(':'))}</h2><ul>{items}</ul>"
            f"<p>{html.escape(GATE_TEXT)}</p>")


def _whys_html(whys: Sequence[Why | ExplainError]) -> str:
    """Why the model predicts what it does for the users with most jobs."""
    from hpcpredict.daemon.views.explain import format_why

    if not whys:
        return ""
    blocks = "".join(f"<p>{html.escape(str(why))}</p>" if isinstance(why, Exception)
                     else f"<pre>{html.escape(format_why(why))}</pre>" for why in whys)
    return ("<h2>Why: the model's largest terms</h2><p>For the users with most jobs: what the model predicts "
            "for a job like their last one, the terms w_i * phi_i of the degree-2 model that make up most of "
            "it, and their recent runtimes. <code>hpcpredict errors --job ID</code> explains one job.</p>"
            + blocks)


def _html_cells(table: pd.DataFrame) -> list[list[str]]:
    return [
        [str(row.user_id), f"{row.count:,}", f"{row.mae_s:,.0f}", f"{row.median_ae_s:,.0f}",
         f"{100 * row.under_rate:.1f}%", f"{row.mean_ratio:.2f}", f"{row.corrections:,}",
         f"{row.requested_mae_s:,.0f}", f"{row.ave2_mae_s:,.0f}"]
        for row in table.itertuples(index=False)
    ]


def _plot_error_ecdf(judged: pd.DataFrame, path: Path) -> Path:
    from hpcpredict.sim.analysis import _ecdf, _figure, error_axis

    with _figure(path, "Prediction errors", "fraction of jobs") as ax:
        run = judged["run_s"].to_numpy(dtype=np.float64)
        largest_s = 0.0
        for label, column in (("hpcpredict", "predicted_s"), ("request", "requested_s"), ("AVE2", "ave2_s")):
            errors_s = judged[column].to_numpy(dtype=np.float64) - run
            largest_s = max(largest_s, float(np.abs(errors_s).max()) if len(errors_s) else 0.0)
            ax.plot(*(_ecdf(errors_s) if len(run) else ([], [])), label=label, drawstyle="steps-post")
        error_axis(ax, largest_s)
        _mark_if_empty(ax, judged)
    return path


def _plot_user_bars(table: pd.DataFrame, path: Path, top_users: int) -> Path:
    from hpcpredict.sim.analysis import _figure

    users = table[table["user_id"] != TOTAL_ROW].nlargest(top_users, "count")
    with _figure(path, f"Mean absolute error, the {len(users)} users with most jobs", "MAE (s, log)") as ax:
        x = np.arange(len(users))
        for offset, (label, column) in zip((-0.27, 0.0, 0.27), (
                ("hpcpredict", "mae_s"), ("request", "requested_mae_s"), ("AVE2", "ave2_mae_s"))):
            ax.bar(x + offset, users[column].to_numpy(dtype=np.float64), width=0.27, label=label)
        ax.set_xticks(x, [str(u) for u in users["user_id"]], rotation=60)
        ax.set_xlabel("user id")
        if not users.empty:
            ax.set_yscale("log")  # one user's hours must not flatten another's minutes
        _mark_if_empty(ax, users)
    return path


# Daily points for up to this many days of history, weekly beyond: a year of daily points is
# noise, a week of weekly points is one point.
DAILY_UP_TO_DAYS = 90


def _plot_over_time(judged: pd.DataFrame, path: Path) -> Path:
    """Median |error| (top) and the under-prediction rate (bottom) per day (or week) of the
    jobs' ends, in local time like the page's dates; `train`'s history replay and the live jobs
    as separate lines (the replay judges a model still learning the history: not the same
    thing as live predictions), the legend below the plots where it covers nothing."""
    from hpcpredict.headless_plots import pyplot

    plt = pyplot()

    # fromtimestamp per job, not one UTC offset: the machine's rules, summer time included.
    ends = pd.Series(pd.to_datetime([datetime.fromtimestamp(int(t)) for t in judged["end_s"]]),
                     index=judged.index, dtype="datetime64[ns]")
    span_days = (ends.max() - ends.min()).days if len(ends) else 0
    period = "day" if span_days <= DAILY_UP_TO_DAYS else "week"
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 5.5), sharex=True)
    try:
        for source, color in (("history", "tab:blue"), ("live", "tab:orange")):
            mask = (judged["source"] == source) if "source" in judged else pd.Series(True, index=judged.index)
            if not mask.any():
                continue
            jobs, at = judged[mask], ends[mask]
            buckets = at.dt.floor("D") if period == "day" else at.dt.to_period("W").dt.start_time
            grouped = pd.DataFrame({
                "bucket": buckets,
                "error": (jobs["predicted_s"] - jobs["run_s"]).abs(),
                "under": jobs["predicted_s"] < jobs["run_s"],
            }).groupby("bucket")
            median = grouped["error"].median()
            rate = grouped["under"].mean()
            label = "history replay (train)" if source == "history" else "live (the daemon)"
            top.plot(median.index, np.maximum(median.to_numpy(), 1.0), marker="o", markersize=3,
                     color=color, label=label)
            bottom.plot(rate.index, 100 * rate.to_numpy(), marker=".", color=color)
        top.set_title(f"Error over time (by {period} of the job's end)")
        top.set_ylabel("median |error| (s, log)")
        bottom.set_ylabel("under-predicted (%)")
        bottom.set_ylim(0, 100)
        bottom.set_xlabel(f"{period} (local time)")
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
        if judged.empty:
            _mark_if_empty(top, judged)
        else:
            top.set_yscale("log")
            fig.autofmt_xdate()
        handles, labels = top.get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=max(len(labels), 1), frameon=False)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def _mark_if_empty(ax, data: pd.DataFrame) -> None:
    """Say so on an empty plot, and give `_figure`'s legend an entry so it does not warn."""
    if data.empty:
        if not ax.get_legend_handles_labels()[0]:
            ax.plot([], [], " ", label="no data")
        ax.text(0.5, 0.5, "no judged job yet", transform=ax.transAxes, ha="center", va="center")


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
