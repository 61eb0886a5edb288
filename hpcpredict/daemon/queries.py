"""The admin API's reads of the store: plain functions of a `Store`, safe to run on any thread.

They open their own sessions and never touch the `PredictionService` (which belongs to the event
loop's thread), so the HTTP API runs them in an executor: a ``GET /errors`` over every judged job
takes seconds on a big store, and PREDICT on the socket must not wait for it (issue 17).
"""

from __future__ import annotations

import json

from sqlalchemy import select

from hpcpredict.daemon import user_errors
from hpcpredict.daemon.store import JobRow, PredictionRow, Store


def recent_predictions(store: Store, limit: int) -> list[dict[str, object]]:
    """The last `limit` predictions recorded at submission, newest first, with their jobs."""
    statement = (
        select(PredictionRow, JobRow)
        .join(JobRow, JobRow.job_id == PredictionRow.job_id)
        .order_by(PredictionRow.id.desc())
        .limit(limit)
    )
    with store.session() as session:
        return [
            {
                "job_id": job.job_id,
                "user_id": job.user_id,
                "procs": job.procs,
                "requested_s": job.requested_s,
                "predicted_s": prediction.predicted_s,
                "predicted_at_s": prediction.predicted_at_s,
                "status": job.status,
                "run_s": job.run_s,
            }
            for prediction, job in session.execute(statement)
        ]


def error_rows(store: Store, user_id: int | None, since_s: int | None) -> list[dict[str, object]]:
    """Exact per-user error statistics (medians included) of the jobs judged since `since_s`."""
    from hpcpredict.daemon.errors import user_error_statistics  # pandas: only when asked

    frame = user_error_statistics(store, user_id=user_id, since_s=since_s)
    return json.loads(frame.to_json(orient="records", double_precision=15))


def user_totals(store: Store) -> list[dict[str, float | int]]:
    """Every user's running totals (one small query: `user_errors`)."""
    return user_errors.user_totals(store)


def site_totals(store: Store) -> dict[str, float]:
    """The site-wide error gauges of ``/metrics`` (one small query: `user_errors`)."""
    return user_errors.site_totals(store)
