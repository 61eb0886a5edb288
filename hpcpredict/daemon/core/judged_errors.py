"""Per-user error statistics of the daemon's predictions, computed from its store.

What ``hpcpredict errors`` prints: for each user, how far hpcpredict's predictions were from the
runtimes, next to the two answers a site would have had without it — the user's own request
(what plain EASY plans with) and AVE2 (Tsafrir et al., the mean of the user's last two
runtimes). Computed from the ``jobs``, ``predictions`` and ``corrections`` tables on demand:
exact for any user and period asked, medians included. The daemon also keeps each user's running
totals (``user_errors``, `hpcpredict.daemon.core.user_errors`) for reads that must be cheap (metrics,
``GET /users``); they are counted by the rules below and tested against these statistics.

Which jobs count: those that ended with ``run_s > 0`` and received a prediction at submission
(jobs the daemon never saw submitted have no prediction to judge). The prediction judged is the
first one given, the one the scheduler acted on. ``run_s`` is the runtime as reported, even for
a job killed at a lowered limit: its error is then a lower bound, but leaving it out would hide
exactly the errors that cost users the most. ``since_s`` keeps jobs that ended at or after it;
the AVE2 history still includes every earlier job, so its prediction is the one AVE2 would have
given live.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from sqlalchemy import func, select

from hpcpredict.daemon.core.store import (
    CorrectionRow,
    HistoryJudgementRow,
    JobRow,
    PredictionRow,
    Store,
)
from hpcpredict.learn.error_stats import error_stats
from hpcpredict.instants import Instant
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.baselines import Ave2Predictor

ERROR_COLUMNS: tuple[str, ...] = (
    "user_id",
    "count",  # jobs judged
    "mae_s",  # mean |prediction - runtime|
    "median_ae_s",  # median |prediction - runtime|
    "under_rate",  # share of jobs predicted shorter than they ran
    "mean_ratio",  # mean prediction / runtime
    "corrections",  # limit changes of the jobs judged
    "requested_mae_s",  # mean |request - runtime|
    "ave2_mae_s",  # mean |AVE2 - runtime|
)



@dataclass(frozen=True, slots=True)
class _Job:
    request: JobRequest
    end_s: int | None
    run_s: int | None


JUDGED_COLUMNS: tuple[str, ...] = (
    "job_id", "user_id", "end_s", "predicted_s", "run_s", "requested_s", "ave2_s", "corrections",
    "source",  # "live" (the daemon's predictions) or "history" (`hpcpredict train`'s replay)
)

SOURCES = ("history", "live", "both")


def judged_jobs(
    store: Store, *, user_id: int | None = None, since_s: int | None = None, source: str = "live"
) -> pd.DataFrame:
    """One row per judged job (see the module doc), columns `JUDGED_COLUMNS`: the history
    replay's jobs first (by end), then the live ones by job id, as `source` asks.

    `since_s` is Unix seconds (the CLI converts ``--since DATE``).
    """
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    frames = []
    if source in ("history", "both"):
        frames.append(_history_judged_jobs(store, user_id, since_s))
    if source in ("live", "both"):
        frames.append(_live_judged_jobs(store, user_id, since_s))
    frames = [frame for frame in frames if len(frame)] or frames[:1]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _history_judged_jobs(store: Store, user_id: int | None, since_s: int | None) -> pd.DataFrame:
    """The jobs `hpcpredict train` judged (hpcpredict.daemon.core.history_judgements): no correction,
    since the replay runs each job to its recorded end."""
    query = select(HistoryJudgementRow).order_by(HistoryJudgementRow.end_s, HistoryJudgementRow.job_id)
    if user_id is not None:
        query = query.where(HistoryJudgementRow.user_id == user_id)
    if since_s is not None:
        query = query.where(HistoryJudgementRow.end_s >= since_s)
    with store.session() as session:
        records = [
            (row.job_id, row.user_id, row.end_s, row.predicted_s, row.run_s, row.requested_s,
             row.ave2_s, 0, "history")
            for row in session.scalars(query)
        ]
    return pd.DataFrame.from_records(records, columns=list(JUDGED_COLUMNS))


def _live_judged_jobs(store: Store, user_id: int | None, since_s: int | None) -> pd.DataFrame:
    jobs = _load_jobs(store, user_id)
    first_prediction = _first_predictions(store, user_id)
    corrections = _corrections_per_job(store, user_id)
    ave2_s = _ave2_predictions(jobs)

    records = []
    for job in jobs:
        job_id = job.request.job_id
        if job.run_s is None or job.run_s <= 0 or job_id not in first_prediction:
            continue
        assert job.end_s is not None
        if since_s is not None and job.end_s < since_s:
            continue
        records.append(
            (
                job_id,
                job.request.user_id,
                job.end_s,
                first_prediction[job_id],
                job.run_s,
                job.request.requested_s,
                ave2_s[job_id],
                corrections.get(job_id, 0),
                "live",
            )
        )
    return pd.DataFrame.from_records(records, columns=list(JUDGED_COLUMNS))


def user_error_statistics(
    store: Store, *, user_id: int | None = None, since_s: int | None = None
) -> pd.DataFrame:
    """One row per user (sorted by id), columns `ERROR_COLUMNS`; see the module doc."""
    return statistics_by_user(judged_jobs(store, user_id=user_id, since_s=since_s))


def statistics_by_user(judged: pd.DataFrame) -> pd.DataFrame:
    """`ERROR_COLUMNS` per user from `judged_jobs` rows (any subset of them)."""
    if judged.empty:
        return pd.DataFrame({name: pd.Series(dtype=_dtype(name)) for name in ERROR_COLUMNS})
    rows = []
    for user_id, jobs in judged.groupby("user_id", sort=True):
        run = jobs["run_s"].to_numpy()
        predicted = error_stats(jobs["predicted_s"].to_numpy(), run)
        rows.append((
            user_id, predicted.jobs, predicted.mae_s, predicted.median_ae_s, predicted.under_rate,
            predicted.mean_ratio, int(jobs["corrections"].sum()),
            error_stats(jobs["requested_s"].to_numpy(), run).mae_s,
            error_stats(jobs["ave2_s"].to_numpy(), run).mae_s,
        ))
    table = pd.DataFrame.from_records(rows, columns=list(ERROR_COLUMNS))
    return table.astype({name: _dtype(name) for name in ERROR_COLUMNS})


def _ave2_predictions(jobs: list[_Job]) -> dict[int, int]:
    """AVE2's prediction for each job at its submission, by replaying submissions and ends.

    Uses `Ave2Predictor` itself (one implementation of AVE2): its history is each user's
    completed jobs in end order. Jobs that never ran (``run_s <= 0``) stay out of the history,
    as they stay out of the learner's.
    """
    events: list[tuple[int, Instant, int, _Job]] = []
    for job in jobs:
        events.append((job.request.submit_s, Instant.SUBMISSION, job.request.job_id, job))
        if job.end_s is not None and job.run_s is not None and job.run_s > 0:
            events.append((job.end_s, Instant.TERMINATION, job.request.job_id, job))
    events.sort(key=lambda event: event[:3])
    ave2 = Ave2Predictor()
    predictions: dict[int, int] = {}
    for time_s, kind, job_id, job in events:
        if kind is Instant.SUBMISSION:
            predictions[job_id] = ave2.predict(job.request, time_s)
        else:
            assert job.run_s is not None
            ave2.job_ended(job.request, job.run_s, time_s)
    return predictions


def _load_jobs(store: Store, user_id: int | None) -> list[_Job]:
    statement = select(JobRow).order_by(JobRow.job_id)
    if user_id is not None:
        statement = statement.where(JobRow.user_id == user_id)
    with store.session() as session:
        return [_Job(row.to_request(), row.end_s, row.run_s) for row in session.scalars(statement)]


def _first_predictions(store: Store, user_id: int | None) -> dict[int, int]:
    first_ids = select(func.min(PredictionRow.id)).group_by(PredictionRow.job_id)
    statement = select(PredictionRow.job_id, PredictionRow.predicted_s).where(
        PredictionRow.id.in_(first_ids)
    )
    if user_id is not None:
        statement = statement.join(JobRow, JobRow.job_id == PredictionRow.job_id).where(
            JobRow.user_id == user_id
        )
    with store.session() as session:
        return {job_id: predicted_s for job_id, predicted_s in session.execute(statement)}


def _corrections_per_job(store: Store, user_id: int | None) -> dict[int, int]:
    statement = select(CorrectionRow.job_id, func.count()).group_by(CorrectionRow.job_id)
    if user_id is not None:
        statement = statement.join(JobRow, JobRow.job_id == CorrectionRow.job_id).where(
            JobRow.user_id == user_id
        )
    with store.session() as session:
        return {job_id: count for job_id, count in session.execute(statement)}


def _dtype(column: str) -> str:
    return "int64" if column in ("user_id", "count", "corrections") else "float64"
