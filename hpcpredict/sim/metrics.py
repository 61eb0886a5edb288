"""Scheduling and prediction metrics of a simulation (docs/method.md §9).

bsld_j = max((wait_j + p_j) / max(p_j, tau), 1) with tau = 10 s, averaged over every job of the
cleaned log with no warm-up cut, as the reference did. Tails are reported too: about 0.1% of jobs
get extreme bounded slowdowns under any predictor, and a mean alone hides them. Backfilling with
short predictions can lower AVEbsld while one job waits for weeks (its reservation pushed again and
again), so the worst case is never left out: p99 and max wait, and the worst user's mean bsld
(a user whose jobs all starve is invisible in a site-wide mean).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from hpcpredict.learn.error_stats import error_stats
from hpcpredict.logs.job_table import job_column
from hpcpredict.sim.replica_stats import mean_ci
from hpcpredict.sim.easy.simulation import SimulationResult

BSLD_TAU_S = 10.0  # docs/method.md §9


@dataclass(frozen=True)
class Metrics:
    jobs: int
    ave_bsld: float
    p99_bsld: float
    max_bsld: float
    mean_wait_s: float
    p99_wait_s: float
    max_wait_s: float
    worst_user_mean_bsld: float  # the highest per-user mean bsld
    worst_user_id: int  # whose it is (the lowest id on a tie)
    utilisation: float
    makespan_s: int
    prediction_mae_s: float
    under_prediction_rate: float
    # median of prediction - runtime over the jobs predicted above their runtime (0: none): how
    # far above the real end the scheduler plans the others, as a site reads prediction quality
    median_over_prediction_s: float
    corrections_per_job: float
    backfilled_rate: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def job_arrays(result: SimulationResult) -> dict[str, np.ndarray]:
    """Per-job columns as numpy arrays (wait, run, procs, bsld, predictions...)."""
    jobs = result.jobs
    # a JobTable's own columns (no job object built), else read off the objects
    submit, run, procs, requested, user = (
        np.asarray(job_column(jobs, name), dtype=np.int64)
        for name in ("submit_s", "run_s", "procs", "requested_s", "user_id")
    )
    start = np.asarray(result.start_s, dtype=np.int64)
    wait = start - submit
    return {
        "submit_s": submit,
        "start_s": start,
        "wait_s": wait,
        "run_s": run,
        "procs": procs,
        "requested_s": requested,
        "user_id": user,
        "initial_prediction_s": np.asarray(result.initial_prediction_s, dtype=np.int64),
        "final_prediction_s": np.asarray(result.final_prediction_s, dtype=np.int64),
        "corrections": np.asarray(result.corrections, dtype=np.int64),
        "backfilled": np.asarray(result.backfilled, dtype=bool),
        "bsld": bounded_slowdown(wait, run),
    }


def bounded_slowdown(wait_s: np.ndarray, run_s: np.ndarray, tau_s: float = BSLD_TAU_S) -> np.ndarray:
    return np.maximum((wait_s + run_s) / np.maximum(run_s, tau_s), 1.0)


def compute_metrics(result: SimulationResult, measured: np.ndarray | None = None) -> Metrics:
    """The replay's figures over every job, or over the jobs `measured` marks (a boolean mask in
    the jobs' order: `hpcpredict tune` judges a later part of a log replayed whole)."""
    columns = job_arrays(result)
    if measured is not None:
        columns = {name: column[measured] for name, column in columns.items()}
    count = len(columns["submit_s"])
    if count == 0:
        raise ValueError("no jobs to measure: the log is empty after cleaning")
    bsld = columns["bsld"]
    run = columns["run_s"]
    end = columns["start_s"] + run
    makespan = int(end.max() - columns["submit_s"].min())
    area = float(np.sum(run * columns["procs"]))
    errors = error_stats(columns["initial_prediction_s"], run)
    wait = columns["wait_s"]
    worst_user_id, worst_user_bsld = worst_user(columns["user_id"], bsld)
    return Metrics(
        jobs=count,
        ave_bsld=float(bsld.mean()),
        p99_bsld=float(np.percentile(bsld, 99)),
        max_bsld=float(bsld.max()),
        mean_wait_s=float(wait.mean()),
        p99_wait_s=float(np.percentile(wait, 99)),
        max_wait_s=float(wait.max()),
        worst_user_mean_bsld=worst_user_bsld,
        worst_user_id=worst_user_id,
        utilisation=area / (result.machine_procs * makespan) if makespan > 0 else 0.0,
        makespan_s=makespan,
        prediction_mae_s=errors.mae_s,
        under_prediction_rate=errors.under_rate,
        median_over_prediction_s=median_over_prediction_s(columns["initial_prediction_s"], run),
        corrections_per_job=float(columns["corrections"].mean()),
        backfilled_rate=float(columns["backfilled"].mean()),
    )


def median_over_prediction_s(predicted_s: np.ndarray, run_s: np.ndarray) -> float:
    """The median of prediction - runtime over the over-predicted jobs (0.0 when none is)."""
    over = np.asarray(predicted_s, dtype=np.float64) - np.asarray(run_s, dtype=np.float64)
    over = over[over > 0]
    return float(np.median(over)) if over.size else 0.0


def worst_user(user_id: np.ndarray, bsld: np.ndarray) -> tuple[int, float]:
    """(user, mean bsld) of the user whose jobs have the highest mean bounded slowdown."""
    users, position = np.unique(user_id, return_inverse=True)
    means = np.bincount(position, weights=bsld) / np.bincount(position)
    worst = int(means.argmax())  # the first maximum: the lowest user id on a tie
    return int(users[worst]), float(means[worst])


def waited_share(submit_s: np.ndarray, start_s: np.ndarray, threshold_s: int | np.ndarray,
                 from_s: int | None = None) -> float:
    """The share of a replay's span (first submission, or `from_s`, to last start) during which
    some job had been waiting at least its threshold (`threshold_s`: one for all, or one per job):
    with the 24 h guard's threshold, the time its wait rule was due (the oldest pending job has
    waited longest); with the xfactor rule's per-job thresholds, that rule's.

    Why: under a long queue the guard is due most of the time, and then the predictions have
    little left to do (docs/results.md, "Under a heavier load"); an admin reading a replay of
    their own log should see how often that was. From the schedule alone: the union of the
    intervals [submit + threshold, start) of the jobs that waited longer. `from_s` counts the
    time from then on only (`tune`'s later part), jobs submitted before it included."""
    submit = np.asarray(submit_s, dtype=np.int64)
    start = np.asarray(start_s, dtype=np.int64)
    if len(submit) == 0:
        return 0.0
    first_s = int(submit.min()) if from_s is None else int(from_s)
    span_s = int(start.max()) - first_s
    due_from = submit + np.asarray(threshold_s, dtype=np.int64)
    waited = start > due_from
    order = np.argsort(due_from[waited], kind="stable")
    covered_s, reach_s = 0, first_s  # nothing before the span's first second counts
    for begin, end in zip(due_from[waited][order].tolist(), start[waited][order].tolist()):
        covered_s += max(0, end - max(begin, reach_s))  # the part not covered by earlier ones
        reach_s = max(reach_s, end)
    return covered_s / span_s if span_s > 0 else 0.0


# (attribute, heading, format) of the rows `metrics_table` prints, in reading order.
_TABLE_ROWS: tuple[tuple[str, str, str], ...] = (
    ("ave_bsld", "AVEbsld (tau=10s)", "{:.2f}"),
    ("p99_bsld", "p99 bsld", "{:.1f}"),
    ("max_bsld", "max bsld", "{:.0f}"),
    ("mean_wait_s", "mean wait (s)", "{:,.0f}"),
    ("p99_wait_s", "p99 wait (s)", "{:,.0f}"),
    ("max_wait_s", "max wait (s)", "{:,.0f}"),
    ("worst_user_mean_bsld", "worst user's mean bsld", "{:.1f}"),
    ("utilisation", "utilisation", "{:.1%}"),
    ("makespan_s", "makespan (s)", "{:,}"),
    ("prediction_mae_s", "prediction MAE (s)", "{:,.0f}"),
    ("under_prediction_rate", "under-predicted", "{:.1%}"),
    ("median_over_prediction_s", "median over-prediction (s)", "{:,.0f}"),
    ("corrections_per_job", "corrections/job", "{:.3f}"),
    ("backfilled_rate", "backfilled", "{:.1%}"),
)


def metrics_table(columns: list[tuple[str, Metrics]]) -> list[str]:
    """A plain-text table: one row per metric, one column per (heading, metrics)."""
    cells = [
        [fmt.format(getattr(metrics, attr)) for attr, _, fmt in _TABLE_ROWS]
        for _, metrics in columns
    ]
    return _layout([title for title, _ in columns], [heading for _, heading, _ in _TABLE_ROWS], cells)


def replica_table(titles: list[str], replicated: list[list[Metrics]]) -> list[str]:
    """Like `metrics_table`, over replicas: each cell is 'mean +- 95% CI half-width'."""

    def cell(values: list[Metrics], attr: str, fmt: str) -> str:
        estimate = mean_ci([float(getattr(m, attr)) for m in values])
        half = (estimate.ci_high - estimate.ci_low) / 2
        return f"{fmt.format(estimate.mean)} +- {fmt.format(half)}"

    rows = [row for row in _TABLE_ROWS if row[0] not in ("makespan_s", "utilisation")]
    cells = [[cell(values, attr, fmt) for attr, _, fmt in rows] for values in replicated]
    return _layout(titles, [heading for _, heading, _ in rows], cells)


def _layout(titles: list[str], headings: list[str], cells: list[list[str]]) -> list[str]:
    """Row headings down the left, one right-aligned column of `cells` per title."""
    label_width = max(len(heading) for heading in headings)
    widths = [max(len(title), *(len(c) for c in column)) for title, column in zip(titles, cells)]
    lines = [" " * label_width + "".join(f"  {t:>{w}}" for t, w in zip(titles, widths))]
    for row, heading in enumerate(headings):
        lines.append(
            f"{heading:<{label_width}}"
            + "".join(f"  {column[row]:>{width}}" for column, width in zip(cells, widths))
        )
    return lines
