"""How good are a simulation's predictions: error statistics and ECDF plots.

Predictions are judged as the scheduler saw them: the *initial* prediction each job got at
submission (before any correction), against its true runtime. Accuracy alone misleads (the
reference's AVE2 had a lower MAE than the E-Loss model and scheduled worse, docs/method.md §10), so the
statistics include the E-Loss itself and the direction of the errors, and `predict-eval` prints
them next to the AVEbsld each predictor produced.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpcpredict.learn.error_stats import error_stats
from hpcpredict.learn.losses import AsymmetricLoss, parse_loss
from hpcpredict.sim.metrics import job_arrays
from hpcpredict.sim.easy.simulation import SimulationResult


@dataclass(frozen=True)
class PredictionStats:
    jobs: int
    mae_s: float
    median_abs_error_s: float
    mean_loss: float  # mean of the given loss (the E-Loss by default) over all jobs
    under_prediction_rate: float
    exact_rate: float
    mean_prediction_over_run: float
    median_prediction_s: float
    one_second_rate: float  # predictions of 1 s: a model collapsed to its floor shows here

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def prediction_stats(
    result: SimulationResult, loss: AsymmetricLoss | str = "eloss"
) -> PredictionStats:
    """Statistics of the initial predictions of `result` against the true runtimes."""
    loss = parse_loss(loss) if isinstance(loss, str) else loss
    columns = job_arrays(result)
    predicted = columns["initial_prediction_s"].astype(np.float64)
    run = columns["run_s"].astype(np.float64)
    procs = columns["procs"].astype(np.float64)
    losses = [loss.value(f, p, q) for f, p, q in zip(predicted.tolist(), run.tolist(), procs.tolist())]
    errors = error_stats(predicted, run)
    return PredictionStats(
        jobs=errors.jobs,
        mae_s=errors.mae_s,
        median_abs_error_s=errors.median_ae_s,
        mean_loss=float(np.mean(losses)),
        under_prediction_rate=errors.under_rate,
        exact_rate=errors.exact_rate,
        mean_prediction_over_run=errors.mean_ratio,
        median_prediction_s=float(np.median(predicted)),
        one_second_rate=float(np.mean(predicted <= 1.0)),
    )


# Users' history at a job's submission: how many of their jobs had ended
# (docs/journal/results-2026-11.md, "Cold start"). A new user is the first bucket; the last is
# an established user.
HISTORY_BUCKETS: tuple[tuple[str, int, float], ...] = (
    ("0", 0, 0), ("1-5", 1, 5), ("6-20", 6, 20), (">20", 21, float("inf")),
)
RETURNING_GAP_S = 30 * 86_400  # a user back after a month without a job ending: "returning"


@dataclass(frozen=True)
class BucketStats:
    bucket: str
    jobs: int
    mae_s: float
    median_abs_error_s: float
    under_prediction_rate: float
    at_request_rate: float  # predictions equal to the request: the model said nothing

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def earlier_jobs(result: SimulationResult) -> tuple[np.ndarray, np.ndarray]:
    """Per job: how many of its user's jobs had ended before its submission, and the seconds
    since the last of them ended (-1 when none had), in the schedule `result` simulated.

    A job ending at the very instant of a submission is not counted: submissions come first at
    one instant (docs/method.md §10), as they do for the learner's history.
    """
    columns = job_arrays(result)
    submit, user = columns["submit_s"], columns["user_id"]
    end = columns["start_s"] + columns["run_s"]
    count = np.zeros(len(submit), dtype=np.int64)
    gap = np.full(len(submit), -1, dtype=np.int64)
    for user_id in np.unique(user):
        mine = np.flatnonzero(user == user_id)
        ends = np.sort(end[mine])
        before = np.searchsorted(ends, submit[mine], side="left")
        count[mine] = before
        has = before > 0
        gap[mine[has]] = submit[mine[has]] - ends[before[has] - 1]
    return count, gap


def error_by_history(result: SimulationResult) -> list[BucketStats]:
    """Initial-prediction errors by the user's history at submission (`HISTORY_BUCKETS`), plus
    a last row for users back after `RETURNING_GAP_S` or more without a job ending."""
    columns = job_arrays(result)
    predicted, run = columns["initial_prediction_s"], columns["run_s"]
    at_request = predicted >= columns["requested_s"]
    count, gap = earlier_jobs(result)
    masks = [(name, (count >= low) & (count <= high)) for name, low, high in HISTORY_BUCKETS]
    masks.append((f"back after >= {RETURNING_GAP_S // 86_400} days", gap >= RETURNING_GAP_S))
    rows = []
    for name, mask in masks:
        errors = error_stats(predicted[mask], run[mask])
        rows.append(BucketStats(
            bucket=name,
            jobs=errors.jobs,
            mae_s=errors.mae_s,
            median_abs_error_s=errors.median_ae_s,
            under_prediction_rate=errors.under_rate,
            at_request_rate=float(np.mean(at_request[mask])) if errors.jobs else float("nan"),
        ))
    return rows


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(values)
    return ordered, np.arange(1, len(ordered) + 1) / len(ordered)


@contextmanager
def _figure(path: Path, title: str, ylabel: str) -> Iterator[Any]:
    """One axes to draw on; titled, gridded, legended and saved as PNG on exit."""
    from hpcpredict.headless_plots import pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    try:
        yield ax
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


# Ticks of an error axis in seconds (symlog): 0 and, each side, 10 min, 2 h, 1 day, 10 days,
# about a decade apart. None inside the linear region around 0 (|error| < 60 s), whose labels
# would print over each other ("-10^1 0 10^1").
_ERROR_TICKS_S: tuple[tuple[int, str], ...] = (
    (600, "10 min"), (7200, "2 h"), (86_400, "1 day"), (864_000, "10 days"), (8_640_000, "100 days"))


def error_axis(ax: Any, largest_abs_s: float) -> None:
    """A prediction - runtime axis: symlog (linear within a minute of 0), labelled in durations,
    negative = under-predicted. Shared by predict-eval's and the daemon report's ECDFs."""
    from matplotlib.ticker import NullLocator

    ax.set_xscale("symlog", linthresh=60)
    ticks = [(0, "0")]
    for seconds, label in _ERROR_TICKS_S:
        if seconds <= max(largest_abs_s, 600) * 1.5:
            ticks += [(-seconds, f"-{label}"), (seconds, label)]
    ticks.sort()
    ax.set_xticks([value for value, _ in ticks], [label for _, label in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("prediction - runtime (symlog; < 0: under-predicted, the job outlived it)")


def plot_ecdfs(
    named: Sequence[tuple[str, SimulationResult]], out_dir: Path, title: str
) -> list[Path]:
    """Write two PNGs: ECDF of prediction errors (symlog seconds) and of predicted values.

    The second one also draws the true runtimes, so a predictor's distance to them shows.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = [(name, job_arrays(result)) for name, result in named]

    errors_png = out_dir / "prediction_error_ecdf.png"
    errors = [
        (name, (column["initial_prediction_s"] - column["run_s"]).astype(np.float64))
        for name, column in columns
    ]
    with _figure(errors_png, f"{title}: prediction errors", "fraction of jobs") as ax:
        for name, values in errors:
            ax.plot(*_ecdf(values), label=name, drawstyle="steps-post")
        error_axis(ax, max((float(np.abs(values).max()) for _, values in errors if len(values)), default=0.0))

    values_png = out_dir / "predicted_value_ecdf.png"
    with _figure(values_png, f"{title}: predicted values", "fraction of jobs") as ax:
        for name, column in columns:
            ax.plot(*_ecdf(column["initial_prediction_s"].astype(np.float64)), label=name,
                    drawstyle="steps-post")
        ax.plot(*_ecdf(columns[0][1]["run_s"].astype(np.float64)), label="actual runtime",
                color="black", linestyle="--", drawstyle="steps-post")
        ax.set_xscale("log")
        ax.set_xlabel("seconds (log)")
    return [errors_png, values_png]
