"""Each user's running error totals (the ``user_errors`` table): kept up to date at every job end.

`hpcpredict.daemon.core.judged_errors` computes the exact statistics from every judged job, for any user and
period, medians included; it reads every job of the store, which is right for ``hpcpredict
errors`` and the report but too slow for a Prometheus scrape every 15 s or a dashboard listing
thousands of users. These totals answer those in one small query, and are counted by the same
rules (which jobs are judged, which prediction, AVE2 at submission): `count_ended_job` inside
the transaction of each end, `rebuild` from `errors.judged_jobs` when a store upgraded from
revision 0001 has judged jobs but no totals yet.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection

from hpcpredict.daemon.core.statements import (
    INSERT_USER_ERRORS,
    LAST_TWO_RUNS_BEFORE,
    SELECT_USER_ERRORS,
    UPDATE_USER_ERRORS,
)
from hpcpredict.daemon.core.store import (
    JobRow,
    PredictionRow,
    Store,
    UserErrorRow,
    add_job_to_totals,
    empty_user_totals,
    user_totals_summary,
)
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.baselines import Ave2Predictor

# The Prometheus gauge of each of `site_totals`' values, with its help text.
SITE_GAUGES: dict[str, tuple[str, str]] = {
    "judged_jobs": (
        "hpcpredict_judged_jobs",
        "Jobs judged so far: ended after running, with a prediction at submission.",
    ),
    "mae_s": ("hpcpredict_mae_seconds", "Mean absolute error of hpcpredict's predictions."),
    "under_rate": (
        "hpcpredict_under_prediction_ratio",
        "Share of judged jobs predicted shorter than they ran.",
    ),
    "requested_mae_s": (
        "hpcpredict_requested_mae_seconds",
        "Mean absolute error of the users' own requests.",
    ),
    "ave2_mae_s": (
        "hpcpredict_ave2_mae_seconds",
        "Mean absolute error AVE2 (mean of the user's last two runtimes) would have had.",
    ),
}


def count_ended_job(
    connection: Connection,
    job: JobRequest,
    run_s: int,
    end_s: int,
    first_prediction_s: int | None,
    corrections: int,
) -> None:
    """Add `job`, which has just ended after `run_s` at `end_s` with `corrections` changes of its
    limit, to its user's totals if it is judged.

    Called inside the end's transaction, after the job's row got its ``run_s`` and ``end_s``: the
    totals commit or roll back with the event itself. Core statements (statements.py), as the
    rest of the event's transaction.
    """
    if first_prediction_s is None or run_s <= 0:
        return
    row = connection.execute(SELECT_USER_ERRORS, {"user_id": job.user_id}).first()
    totals = empty_user_totals(job.user_id) if row is None else row._asdict()
    add_job_to_totals(
        totals,
        predicted_s=first_prediction_s,
        run_s=run_s,
        requested_s=job.requested_s,
        ave2_s=_ave2_at_submission(connection, job),
        corrections=corrections,
        end_s=end_s,
    )
    if row is None:
        connection.execute(INSERT_USER_ERRORS, totals)
    else:
        connection.execute(UPDATE_USER_ERRORS, {"key": totals.pop("user_id"), **totals})


def _ave2_at_submission(connection: Connection, job: JobRequest) -> int:
    """AVE2's prediction for `job` when it was submitted, by `Ave2Predictor` itself.

    Its history then: the user's jobs that had run and ended strictly before the submission
    (at the same instant a submission comes first), the last two in end order, ties by job id
    (the order of `errors._ave2_predictions`).
    """
    last_two = connection.execute(
        LAST_TWO_RUNS_BEFORE, {"user_id": job.user_id, "submit_s": job.submit_s, "job_id": job.job_id}
    ).all()
    ave2 = Ave2Predictor()
    for run_s, end_s in reversed(last_two):
        ave2.job_ended(job, run_s, end_s)  # same user: only the runtime matters
    return ave2.predict(job, job.submit_s)


def rebuild(store: Store) -> int:
    """Recount every user's totals from `errors.judged_jobs`; how many users have totals."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs  # pandas: only for a rebuild

    judged = judged_jobs(store)
    rows: dict[int, dict[str, Any]] = {}
    for job in judged.itertuples(index=False):
        totals = rows.setdefault(int(job.user_id), empty_user_totals(int(job.user_id)))
        add_job_to_totals(
            totals,
            predicted_s=int(job.predicted_s),
            run_s=int(job.run_s),
            requested_s=int(job.requested_s),
            ave2_s=int(job.ave2_s),
            corrections=int(job.corrections),
            end_s=int(job.end_s),
        )
    with store.engine.begin() as connection:
        connection.execute(delete(UserErrorRow))
        if rows:
            connection.execute(INSERT_USER_ERRORS, list(rows.values()))
    return len(rows)


def missing(store: Store) -> bool:
    """True when the store has judged jobs but no totals (upgraded from revision 0001)."""
    with store.session() as session:
        if session.scalar(select(UserErrorRow.user_id).limit(1)) is not None:
            return False
        judged = (
            select(JobRow.job_id)
            .join(PredictionRow, PredictionRow.job_id == JobRow.job_id)
            .where(JobRow.run_s > 0)
            .limit(1)
        )
        return session.scalar(judged) is not None


def user_totals(store: Store) -> list[dict[str, float | int]]:
    """Every user's `user_totals_summary`, by user id."""
    with store.session() as session:
        rows = session.scalars(select(UserErrorRow).order_by(UserErrorRow.user_id))
        return [user_totals_summary(row) for row in rows]


def site_totals(store: Store) -> dict[str, float]:
    """The means of `SITE_GAUGES` over every judged job of every user (0 before the first)."""
    with store.session() as session:
        jobs, abs_error, under, requested, ave2 = session.execute(
            select(
                func.coalesce(func.sum(UserErrorRow.jobs), 0),
                func.coalesce(func.sum(UserErrorRow.abs_error_sum_s), 0),
                func.coalesce(func.sum(UserErrorRow.under_jobs), 0),
                func.coalesce(func.sum(UserErrorRow.requested_abs_error_sum_s), 0),
                func.coalesce(func.sum(UserErrorRow.ave2_abs_error_sum_s), 0),
            )
        ).one()
    per_job = max(int(jobs), 1)
    return {
        "judged_jobs": float(jobs),
        "mae_s": float(abs_error) / per_job,
        "under_rate": float(under) / per_job,
        "requested_mae_s": float(requested) / per_job,
        "ave2_mae_s": float(ave2) / per_job,
    }
