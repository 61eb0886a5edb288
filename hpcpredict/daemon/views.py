"""What ``hpcpredict errors`` and ``hpcpredict report`` show a sysadmin, from the database alone.

Both read the store the daemon writes (so they work with the daemon running or not) and never
create or upgrade it: a read-only command that made a database appear where a typo pointed
would hide the typo. The numbers are `hpcpredict.daemon.errors`'; this module only shapes them.
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from hpcpredict.daemon.errors import ERROR_COLUMNS, judged_jobs, statistics_by_user
from hpcpredict.daemon.store import Store

TOTAL_ROW = "all"


class ViewError(RuntimeError):
    """The database cannot be read as a hpcpredict store (the message says what to do)."""


def open_existing_store(url: str) -> Store:
    """A `Store` on `url` that must already hold a hpcpredict schema at the newest revision."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if not database or database == ":memory:" or not Path(database).is_file():
            raise ViewError(f"{url}: no such database file (start `hpcpredict serve` or give --db)")
    store = Store(url)
    try:
        tables = set(inspect(store.engine).get_table_names())
        if "jobs" not in tables or "alembic_version" not in tables:
            raise ViewError(f"{url}: not a hpcpredict database (no jobs table)")
        if store.current_revision() != store.head_revision():
            raise ViewError(
                f"{url}: schema at revision {store.current_revision()}, this hpcpredict expects "
                f"{store.head_revision()}: start `hpcpredict serve` once to upgrade it"
            )
    except ViewError:
        store.close()
        raise
    except Exception as error:
        store.close()
        raise ViewError(f"{url}: cannot read the database ({error})") from error
    return store


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


def write_report(judged: pd.DataFrame, out_dir: Path, *, title: str = "hpcpredict: prediction errors",
                 top_users: int = 20) -> Report:
    """index.html with the per-user table and three plots (PNG files beside it)."""
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
<table><thead><tr>{headers}</tr></thead><tbody>
{rows}
</tbody></table>
<h2>Errors</h2><img src="error_ecdf.png" alt="ECDF of prediction errors">
<h2>Users</h2><img src="users_mae.png" alt="Mean absolute error per user">
<h2>Over time</h2><img src="error_over_time.png" alt="Error over time">
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return Report(index, images)


def _html_cells(table: pd.DataFrame) -> list[list[str]]:
    return [
        [str(row.user_id), f"{row.count:,}", f"{row.mae_s:,.0f}", f"{row.median_ae_s:,.0f}",
         f"{100 * row.under_rate:.1f}%", f"{row.mean_ratio:.2f}", f"{row.corrections:,}",
         f"{row.requested_mae_s:,.0f}", f"{row.ave2_mae_s:,.0f}"]
        for row in table.itertuples(index=False)
    ]


def _plot_error_ecdf(judged: pd.DataFrame, path: Path) -> Path:
    from hpcpredict.analysis import _ecdf, _figure

    with _figure(path, "Prediction errors", "fraction of jobs") as ax:
        run = judged["run_s"].to_numpy(dtype=np.float64)
        for label, column in (("hpcpredict", "predicted_s"), ("request", "requested_s"), ("AVE2", "ave2_s")):
            if len(run):
                ax.plot(*_ecdf(judged[column].to_numpy(dtype=np.float64) - run), label=label,
                        drawstyle="steps-post")
        ax.set_xscale("symlog", linthresh=60)
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_xlabel("prediction - runtime (s, symlog; < 0 is under-prediction)")
    return path


def _plot_user_bars(table: pd.DataFrame, path: Path, top_users: int) -> Path:
    from hpcpredict.analysis import _figure

    users = table[table["user_id"] != TOTAL_ROW].nlargest(top_users, "count")
    with _figure(path, f"Mean absolute error, the {len(users)} users with most jobs", "MAE (s)") as ax:
        x = np.arange(len(users))
        for offset, (label, column) in zip((-0.27, 0.0, 0.27), (
                ("hpcpredict", "mae_s"), ("request", "requested_mae_s"), ("AVE2", "ave2_mae_s"))):
            ax.bar(x + offset, users[column].to_numpy(dtype=np.float64), width=0.27, label=label)
        ax.set_xticks(x, [str(u) for u in users["user_id"]], rotation=60)
        ax.set_xlabel("user id")
    return path


def _plot_over_time(judged: pd.DataFrame, path: Path) -> Path:
    from hpcpredict.analysis import _figure

    with _figure(path, "Error over time (by day of the job's end)", "median |error| (s)") as ax:
        if not judged.empty:
            days = pd.to_datetime(judged["end_s"], unit="s").dt.floor("D")
            error = (judged["predicted_s"] - judged["run_s"]).abs()
            under = judged["predicted_s"] < judged["run_s"]
            daily = pd.DataFrame({"day": days, "error": error, "under": under}).groupby("day")
            median = daily["error"].median()
            ax.plot(median.index, median.to_numpy(), marker="o", label="median |error|")
            twin = ax.twinx()
            rate = daily["under"].mean()
            twin.plot(rate.index, 100 * rate.to_numpy(), color="tab:red", marker=".", label="under-predicted %")
            twin.set_ylabel("under-predicted (%)")
            twin.set_ylim(0, 100)
        ax.set_xlabel("day")
    return path
