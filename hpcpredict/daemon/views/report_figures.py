"""The sysadmin page's figures, drawn as PNG bytes from the judged jobs.

Bytes, not files: the static report (`hpcpredict report --out`) writes them beside its
index.html, the daemon's live page (``GET /report``) embeds them in the page it serves, from the
same drawing code. The main figure answers the page's question, "does lowering help?": how far
from each job's real end the scheduler plans it, with the users' requests and with hpcpredict's
limits (the first one, then after the corrections). The others are the prediction error's
distribution, per user and over time.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import datetime

import numpy as np
import pandas as pd

from hpcpredict.daemon.views.site_summary import corrections_needed

MAIN_FIGURE = "planned_ends.png"
FIGURE_NAMES = (MAIN_FIGURE, "error_ecdf.png", "users_mae.png", "error_over_time.png")
# Daily points for up to this many days of history, weekly beyond: a year of daily points is
# noise, a week of weekly points is one point.
DAILY_UP_TO_DAYS = 90


def draw_figures(judged: pd.DataFrame, table: pd.DataFrame, top_users: int = 20) -> dict[str, bytes]:
    """Every figure of the page, name -> PNG bytes (`FIGURE_NAMES` order); `table` is the
    per-user `pages.error_table` of `judged`."""
    drawers: dict[str, Callable[[io.BytesIO], None]] = {
        MAIN_FIGURE: lambda out: _plot_planned_ends(judged, out),
        "error_ecdf.png": lambda out: _plot_error_ecdf(judged, out),
        "users_mae.png": lambda out: _plot_user_bars(table, out, top_users),
        "error_over_time.png": lambda out: _plot_over_time(judged, out),
    }
    figures = {}
    for name in FIGURE_NAMES:
        out = io.BytesIO()
        out.name = name  # what a file of it is called (matplotlib, and tests, read it)
        drawers[name](out)
        figures[name] = out.getvalue()
    return figures


def _plot_planned_ends(judged: pd.DataFrame, out: io.BytesIO) -> None:
    """ECDF of limit - runtime: the request's, the first (lowered) limit's, and the limit's after
    INCREMENTAL corrections (what the scheduler plans with once the corrector is done)."""
    from hpcpredict.sim.analysis import _ecdf, _figure, error_axis

    run = judged["run_s"].to_numpy(dtype=np.int64)
    requested = judged["requested_s"].to_numpy(dtype=np.int64)
    predicted = np.minimum(judged["predicted_s"].to_numpy(dtype=np.int64), requested)
    final = np.array([corrections_needed(int(p), int(r), int(q))[1] for p, r, q in zip(predicted, run, requested)],
                     dtype=np.int64)
    with _figure(out, "How far from its real end the scheduler plans each job", "fraction of jobs") as ax:
        largest_s = 0.0
        for label, limit in (("the users' requests", requested), ("hpcpredict, after corrections", final),
                             ("hpcpredict's first limit", predicted)):
            gaps_s = (limit - run).astype(np.float64)
            largest_s = max(largest_s, float(np.abs(gaps_s).max()) if len(gaps_s) else 0.0)
            ax.plot(*(_ecdf(gaps_s) if len(run) else ([], [])), label=label, drawstyle="steps-post")
        error_axis(ax, largest_s)
        ax.set_xlabel("planned end - real end (below 0: the corrector extends the limit)")
        _mark_if_empty(ax, judged)


def _plot_error_ecdf(judged: pd.DataFrame, out: io.BytesIO) -> None:
    from hpcpredict.sim.analysis import _ecdf, _figure, error_axis

    with _figure(out, "Prediction errors", "fraction of jobs") as ax:
        run = judged["run_s"].to_numpy(dtype=np.float64)
        largest_s = 0.0
        for label, column in (("hpcpredict", "predicted_s"), ("request", "requested_s"), ("AVE2", "ave2_s")):
            errors_s = judged[column].to_numpy(dtype=np.float64) - run
            largest_s = max(largest_s, float(np.abs(errors_s).max()) if len(errors_s) else 0.0)
            ax.plot(*(_ecdf(errors_s) if len(run) else ([], [])), label=label, drawstyle="steps-post")
        error_axis(ax, largest_s)
        ax.set_xlabel("prediction - runtime (below 0: under-predicted)")
        _mark_if_empty(ax, judged)


def _plot_user_bars(table: pd.DataFrame, out: io.BytesIO, top_users: int) -> None:
    from hpcpredict.daemon.views.pages import TOTAL_ROW
    from hpcpredict.sim.analysis import _figure

    users = table[table["user_id"] != TOTAL_ROW].nlargest(top_users, "count") if len(table) else table
    with _figure(out, f"Mean absolute error, the {len(users)} users with most jobs", "MAE (s, log)") as ax:
        x = np.arange(len(users))
        for offset, (label, column) in zip((-0.27, 0.0, 0.27), (
                ("hpcpredict", "mae_s"), ("request", "requested_mae_s"), ("AVE2", "ave2_mae_s"))):
            ax.bar(x + offset, users[column].to_numpy(dtype=np.float64), width=0.27, label=label)
        ax.set_xticks(x, [str(u) for u in users["user_id"]], rotation=60)
        ax.set_xlabel("user id")
        if not users.empty:
            ax.set_yscale("log")  # one user's hours must not flatten another's minutes
        _mark_if_empty(ax, users)


def _plot_over_time(judged: pd.DataFrame, out: io.BytesIO) -> None:
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
        fig.savefig(out, dpi=120, format="png")
    finally:
        plt.close(fig)


def _mark_if_empty(ax, data: pd.DataFrame) -> None:
    """Say so on an empty plot, and give `_figure`'s legend an entry so it does not warn."""
    if data.empty:
        if not ax.get_legend_handles_labels()[0]:
            ax.plot([], [], " ", label="no data")
        ax.text(0.5, 0.5, "no judged job yet", transform=ax.transAxes, ha="center", va="center")
