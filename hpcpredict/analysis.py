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

from hpcpredict.learn.losses import AsymmetricLoss, parse_loss
from hpcpredict.sim.metrics import job_arrays
from hpcpredict.sim.simulation import SimulationResult


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
    error = predicted - run
    losses = [loss.value(f, p, q) for f, p, q in zip(predicted.tolist(), run.tolist(), procs.tolist())]
    return PredictionStats(
        jobs=len(run),
        mae_s=float(np.abs(error).mean()),
        median_abs_error_s=float(np.median(np.abs(error))),
        mean_loss=float(np.mean(losses)),
        under_prediction_rate=float(np.mean(error < 0)),
        exact_rate=float(np.mean(error == 0)),
        mean_prediction_over_run=float(np.mean(predicted / np.maximum(run, 1.0))),
        median_prediction_s=float(np.median(predicted)),
        one_second_rate=float(np.mean(predicted <= 1.0)),
    )


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ordered = np.sort(values)
    return ordered, np.arange(1, len(ordered) + 1) / len(ordered)


@contextmanager
def _figure(path: Path, title: str, ylabel: str) -> Iterator[Any]:
    """One axes to draw on; titled, gridded, legended and saved as PNG on exit."""
    import matplotlib

    matplotlib.use("Agg")  # files only: works on a headless server
    import matplotlib.pyplot as plt

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
        ax.set_xscale("symlog", linthresh=60)
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_xlabel("prediction - runtime (s, symlog; < 0 is under-prediction)")

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
