"""Users' running error totals (``user_errors``) against the exact statistics of errors.py.

The totals are kept one job end at a time; the exact statistics are recomputed from every job.
On a replayed piece of the sample log (with corrections, and jobs the daemon only sees end) the
two must agree to the last job, on SQLite and on PostgreSQL; and a store upgraded from revision
0001, whose table is then empty, gets its totals back when the daemon opens it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from alembic import command
from sqlalchemy import delete, func, inspect, select

from hpcpredict.daemon.core import user_errors
from hpcpredict.daemon.core.judged_errors import user_error_statistics
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store, UserErrorRow
from hpcpredict.instants import Instant
from hpcpredict.learn.history import history_events
from hpcpredict.logs.workload import load_workload

SUBMITTED, STARTED, ENDED = Instant.SUBMISSION, Instant.START, Instant.TERMINATION

JOBS = 300
MEANS = ["count", "mae_s", "under_rate", "mean_ratio", "corrections", "requested_mae_s", "ave2_mae_s"]


def replay(store: Store, sample_log: Path) -> None:
    """The first jobs of the sample through the service; every 5th job is unseen until its end,
    every 3rd started job gets its limit raised twice."""
    workload = load_workload(sample_log)
    events, _ = history_events(workload.jobs[:JOBS], offset_s=workload.header.unix_start_time or 0)
    service = PredictionService.open(store, checkpoint_every=50)
    for event in events:
        job = event.request
        unseen = job.job_id % 5 == 0
        if event.kind == SUBMITTED and not unseen:
            service.submitted(job, event.time_s)
        elif event.kind == STARTED and not unseen:
            service.started(job.job_id, event.time_s)
            if job.job_id % 3 == 0:
                service.limit_changed(job.job_id, job.requested_s + 60, event.time_s)
                service.limit_changed(job.job_id, job.requested_s + 120, event.time_s + 1)
        elif event.kind == ENDED:
            service.ended(job.job_id, event.run_s, event.time_s, "COMPLETED", request=job)
    service.close()


def assert_totals_match_statistics(store: Store) -> None:
    exact = user_error_statistics(store)
    totals = pd.DataFrame(user_errors.user_totals(store))
    assert len(exact) > 5 and exact["corrections"].sum() > 0
    assert list(totals["user_id"]) == list(exact["user_id"])
    pd.testing.assert_frame_equal(
        totals[MEANS].astype(float), exact[MEANS].astype(float), rtol=1e-12, check_dtype=False
    )
    site = user_errors.site_totals(store)
    assert site["judged_jobs"] == exact["count"].sum()
    weights = exact["count"] / exact["count"].sum()
    assert site["mae_s"] == pytest.approx((exact["mae_s"] * weights).sum(), rel=1e-12)
    assert site["ave2_mae_s"] == pytest.approx((exact["ave2_mae_s"] * weights).sum(), rel=1e-12)


def test_running_totals_equal_the_exact_statistics(store: Store, sample_log: Path) -> None:
    replay(store, sample_log)
    assert_totals_match_statistics(store)


def test_a_store_upgraded_from_0001_gets_its_totals_when_opened(
    store: Store, sample_log: Path
) -> None:
    replay(store, sample_log)
    before = user_errors.user_totals(store)
    config = store.alembic_config()
    with store.engine.begin() as connection:  # back to the schema of revision 0001
        config.attributes["connection"] = connection
        command.downgrade(config, "0001")
    assert "user_errors" not in inspect(store.engine).get_table_names()
    PredictionService.open(store).close()  # upgrades, then counts what is already judged
    assert store.current_revision() == store.head_revision()
    pd.testing.assert_frame_equal(
        pd.DataFrame(user_errors.user_totals(store)), pd.DataFrame(before), rtol=1e-12
    )


def test_an_open_store_with_totals_is_not_recounted(store: Store, sample_log: Path) -> None:
    replay(store, sample_log)
    kept = user_errors.user_totals(store)[0]
    with store.session() as session, session.begin():  # a mark no rebuild would keep
        session.execute(delete(UserErrorRow).where(UserErrorRow.user_id != kept["user_id"]))
    assert not user_errors.missing(store)
    PredictionService.open(store).close()
    with store.session() as session:
        assert session.scalar(select(func.count()).select_from(UserErrorRow)) == 1
    assert user_errors.user_totals(store) == [kept]


def test_no_totals_before_the_first_judged_job(store: Store) -> None:
    assert not user_errors.missing(store)
    assert user_errors.user_totals(store) == []
    assert user_errors.site_totals(store) == {
        "judged_jobs": 0.0, "mae_s": 0.0, "under_rate": 0.0, "requested_mae_s": 0.0, "ave2_mae_s": 0.0
    }
