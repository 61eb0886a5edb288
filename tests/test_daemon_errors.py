"""Per-user error statistics on a small history whose every number is worked out by hand.

Every test runs on SQLite and on PostgreSQL (the `store` fixture of tests/conftest.py): the
statistics are computed from the same queries on both.
"""

from __future__ import annotations

import pandas as pd
import pytest

from hpcpredict.daemon.core.judged_errors import ERROR_COLUMNS, user_error_statistics
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import CorrectionRow, JobRow, PredictionRow, Store
from hpcpredict.jobs import JobRequest


def add_job(
    store: Store,
    job_id: int,
    user_id: int,
    submit_s: int,
    requested_s: int,
    *,
    predicted_s: int | None,
    run_s: int | None,
    end_s: int | None,
    corrections: int = 0,
) -> None:
    """A job row as the service leaves it, plus its first prediction and its corrections."""
    request = JobRequest(
        job_id=job_id, submit_s=submit_s, procs=1, requested_s=requested_s, user_id=user_id
    )
    row = JobRow.from_request(
        request, status="submitted" if end_s is None else "ended", observed=predicted_s is not None
    )
    row.run_s, row.end_s = run_s, end_s
    with store.session() as session, session.begin():
        session.add(row)
        session.flush()
        if predicted_s is not None:
            session.add(
                PredictionRow(
                    job_id=job_id, predicted_s=predicted_s, predicted_at_s=submit_s, model_t=0
                )
            )
            # A later answer to the same job: the first one is the one judged.
            session.add(
                PredictionRow(job_id=job_id, predicted_s=1, predicted_at_s=submit_s + 1, model_t=0)
            )
        for k in range(corrections):
            session.add(
                CorrectionRow(
                    job_id=job_id,
                    old_limit_s=requested_s,
                    new_limit_s=requested_s + k,
                    changed_at_s=submit_s + k,
                    event_seq=0,
                )
            )


@pytest.fixture
def history(store: Store) -> Store:
    """User 1: three judged jobs, one that never ran. User 2: two judged jobs and one the
    daemon never saw submitted (no prediction: not judged, but in AVE2's history).

    AVE2 at each submission (jobs in end order; the request until two jobs have ended):
      job 1 (t=0)    user 1 has no history        -> 1000 (its request)
      job 2 (t=100)  user 1 has no history        -> 1000
      job 3 (t=1200) jobs 1 (400 s), 2 (800 s)    -> (800 + 400) // 2 = 600
      job 5 (t=50)   user 2 has no history        -> 300
      job 7 (t=700)  jobs 5 (100 s), 6 (200 s)    -> (200 + 100) // 2 = 150, within 600
    """
    add_job(store, 1, 1, 0, 1000, predicted_s=500, run_s=400, end_s=500)
    add_job(store, 2, 1, 100, 1000, predicted_s=600, run_s=800, end_s=1000)
    add_job(store, 3, 1, 1200, 2000, predicted_s=500, run_s=1000, end_s=2500, corrections=2)
    add_job(store, 4, 1, 1300, 2000, predicted_s=900, run_s=0, end_s=1400, corrections=1)
    add_job(store, 5, 2, 50, 300, predicted_s=300, run_s=100, end_s=400)
    add_job(store, 6, 2, 450, 300, predicted_s=None, run_s=200, end_s=600)
    add_job(store, 7, 2, 700, 600, predicted_s=150, run_s=300, end_s=1500)
    add_job(store, 8, 2, 1600, 600, predicted_s=100, run_s=None, end_s=None)  # still queued
    return store


def test_statistics_by_hand(history: Store) -> None:
    table = user_error_statistics(history)
    assert list(table.columns) == list(ERROR_COLUMNS)
    expected = pd.DataFrame(
        {
            "user_id": [1, 2],
            # user 1: |500-400| = 100, |600-800| = 200, |500-1000| = 500
            # user 2: |300-100| = 200, |150-300| = 150
            "count": [3, 2],
            "mae_s": [800 / 3, 175.0],
            "median_ae_s": [200.0, 175.0],
            "under_rate": [2 / 3, 1 / 2],  # jobs 2 and 3; job 7
            "mean_ratio": [(500 / 400 + 600 / 800 + 500 / 1000) / 3, (300 / 100 + 150 / 300) / 2],
            "corrections": [2, 0],  # job 4 never ran: not judged, nor its correction
            # requests: |1000-400|, |1000-800|, |2000-1000|; |300-100|, |600-300|
            "requested_mae_s": [1800 / 3, 250.0],
            # AVE2 (fixture doc): |1000-400|, |1000-800|, |600-1000|; |300-100|, |150-300|
            "ave2_mae_s": [1200 / 3, 175.0],
        }
    )
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)


def test_user_and_since_filters(history: Store) -> None:
    only_two = user_error_statistics(history, user_id=2)
    assert only_two["user_id"].tolist() == [2]
    assert only_two["mae_s"].tolist() == [175.0]
    # Jobs ended from t=1001 on: job 3 (user 1) and job 7 (user 2); AVE2 still saw the jobs
    # that ended before, so job 3 keeps its AVE2 of 600.
    recent = user_error_statistics(history, since_s=1001)
    assert recent["count"].tolist() == [1, 1]
    assert recent["mae_s"].tolist() == [500.0, 150.0]
    assert recent["ave2_mae_s"].tolist() == [400.0, 150.0]
    assert recent["corrections"].tolist() == [2, 0]
    assert user_error_statistics(history, user_id=1, since_s=1001)["count"].tolist() == [1]


def test_no_judged_job_gives_an_empty_table(store: Store) -> None:
    table = user_error_statistics(store)
    assert table.empty and list(table.columns) == list(ERROR_COLUMNS)
    add_job(store, 8, 2, 1600, 600, predicted_s=100, run_s=None, end_s=None)
    assert user_error_statistics(store).empty
    assert user_error_statistics(store, user_id=3).empty


def test_statistics_of_a_service_run(store: Store) -> None:
    """Through the service: its predictions are the ones judged."""
    service = PredictionService(store)
    predictions = []
    for k in range(4):
        request = JobRequest(job_id=k, submit_s=1000 * k, procs=2, requested_s=3600, user_id=9)
        predictions.append(service.submitted(request, request.submit_s))
        service.limit_changed(k, 1200 + k, 1000 * k + 60)
        service.ended(k, 600, 1000 * k + 600, "COMPLETED")
    table = user_error_statistics(store)
    assert table["count"].tolist() == [4]
    assert table["corrections"].tolist() == [4]
    assert table["mae_s"].tolist() == [sum(abs(p - 600) for p in predictions) / 4]
    # AVE2: the request for jobs 0 and 1, then (600 + 600) // 2.
    assert table["ave2_mae_s"].tolist() == [(3000 + 3000 + 0 + 0) / 4]
    assert table["requested_mae_s"].tolist() == [3000.0]
