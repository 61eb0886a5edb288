"""The admin API's reads of the store: plain functions of a `Store`, run away from the loop.

They open their own sessions and never touch the `PredictionService` (which belongs to the event
loop's thread): a ``GET /errors`` over every judged job takes seconds on a big store, and PREDICT
on the socket must not wait for it. A thread is not far enough: pandas, the ORM and
the JSON encoder hold the GIL for milliseconds at a time, and the loop would wait for it. So the
HTTP API runs them in a worker *process* (`http_api.StoreReads`): `open_worker_store` is its
initializer, `in_worker` its entry point, and everything crosses as plain picklable values.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import select

from hpcpredict.daemon.core import user_errors
from hpcpredict.daemon.views.metrics import ServiceCounters
from hpcpredict.daemon.core.store import JobRow, PredictionRow, Store

_T = TypeVar("_T")

# The read workers' niceness: admin reads are background work. With GET /errors in a loop on two
# cores, a worker at the daemon's priority takes a core from the plugin's PREDICTs; niced, it gets
# what the daemon and slurmctld leave. (A thread could not be niced usefully: descheduled while
# holding the GIL, it would make the loop wait.)
READ_WORKER_NICENESS = 10

# The read worker's own connection pool to the daemon's store: set by `open_worker_store` in the
# worker process (never at import, never in the daemon's process).
_worker_store: Store | None = None


def open_worker_store(url: str) -> None:
    """The read worker's initializer: lower its priority, open its own engine on the store."""
    global _worker_store
    os.nice(READ_WORKER_NICENESS)
    _worker_store = Store(url)


def in_worker(read: Callable[..., _T], *args: object) -> _T:
    """`read(store, *args)` on the worker's store (`read`: one of this module's functions)."""
    assert _worker_store is not None, "not in a read worker (open_worker_store not run)"
    return read(_worker_store, *args)


def as_json(store: Store, read: Callable[..., object], *args: object) -> bytes:
    """`read(store, *args)` encoded as the API's JSON answer, by the worker: a big answer's
    encoding would otherwise hold the daemon's GIL."""
    return json.dumps(read(store, *args), allow_nan=False, default=str).encode()


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
    from hpcpredict.daemon.core.judged_errors import user_error_statistics  # pandas: only when asked

    frame = user_error_statistics(store, user_id=user_id, since_s=since_s)
    return json.loads(frame.to_json(orient="records", double_precision=15))


def user_totals(store: Store) -> list[dict[str, float | int]]:
    """Every user's running totals (one small query: `user_errors`)."""
    return user_errors.user_totals(store)


def site_totals(store: Store) -> dict[str, float]:
    """The site-wide error gauges of ``/metrics`` (one small query: `user_errors`)."""
    return user_errors.site_totals(store)


def metrics_exposition(
    store: Store,
    counts: ServiceCounters,
    gauges: dict[str, tuple[str, float]],
    counters: dict[str, tuple[str, float]],
    accept: str,
    daemon_pid: int,
) -> tuple[bytes, str]:
    """``/metrics``: the loop's snapshot (`counts`, `gauges`, `counters`) plus the site-wide
    totals, rendered (a few milliseconds of Python: not on the loop either)."""
    gauges = dict(gauges)
    for key, value in site_totals(store).items():
        name, help_text = user_errors.SITE_GAUGES[key]
        gauges[name] = (help_text, value)
    return counts.render(gauges, counters, accept=accept, process_id=daemon_pid)


def user_error_row(store: Store, user_id: int, since_s: int | None) -> dict[str, object] | None:
    """One user's exact statistics (`error_rows`), led by what lowering limits does for them
    (`site_summary` of their jobs, under "summary"); None for a user without judged jobs."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs, statistics_by_user  # pandas: only when asked
    from hpcpredict.daemon.views.site_summary import (
        MAE_SENTENCE,
        UNDER_SENTENCE,
        killed_at_lowered_limit_count,
        site_summary,
    )

    judged = judged_jobs(store, user_id=user_id, since_s=since_s, source="live")
    rows = json.loads(statistics_by_user(judged).to_json(orient="records", double_precision=15))
    if not rows:
        return None
    numbers = site_summary(judged, killed_at_lowered_limit_count(store, since_s, [user_id]))
    lead = {key: (None if value != value else value) for key, value in numbers.to_dict().items()}
    return {"summary": {**lead, "mae": MAE_SENTENCE, "under_predicted": UNDER_SENTENCE}, **rows[0]}


def summary(store: Store, since_s: int | None, db_url: str) -> dict[str, object]:
    """What lowering limits does, site-wide (`site_summary`), with the gate's checks and the
    two sentences that say how to read MAE and the under-prediction rate."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs  # pandas: only when asked
    from hpcpredict.daemon.views.site_summary import (
        GATE_TEXT,
        MAE_SENTENCE,
        UNDER_SENTENCE,
        gate_checks,
        killed_at_lowered_limit_count,
        simulate_hint,
        site_summary,
    )

    judged = judged_jobs(store, since_s=since_s, source="both")
    numbers = site_summary(judged, killed_at_lowered_limit_count(store, since_s))
    return json.loads(json.dumps({
        **{key: (None if value != value else value) for key, value in numbers.to_dict().items()},
        "gate": [{"verdict": verdict, "check": what} for verdict, what in gate_checks(numbers)],
        "gate_text": GATE_TEXT,
        "scheduling_effect": simulate_hint(db_url),
        "mae": MAE_SENTENCE,
        "under_predicted": UNDER_SENTENCE,
    }))


def explain(store: Store, kind: str, key: int, config: object) -> tuple[int, dict[str, object]]:
    """(404, an error) or (200, why the model predicted what it did) for job `key` (kind "job")
    or user `key` (kind "user"); `config` is the daemon's `DaemonConfig` (its untrained learner,
    for a store with no checkpoint yet)."""
    from hpcpredict.daemon.views.explain import ExplainError, explain_job, explain_user

    factory = config.predictor_factory  # type: ignore[attr-defined]
    try:
        why = explain_job(store, key, factory) if kind == "job" else explain_user(store, key, factory)
    except ExplainError as error:
        return 404, {"error": str(error), "code": f"unknown_{kind}"}
    return 200, json.loads(json.dumps(why.to_dict(), default=float))


def report_page(store: Store, since_s: int | None, db_url: str, health: dict[str, object], job: int | None,
                config: object) -> bytes:
    """GET /report: the sysadmin's page (`report_page`) with the daemon's state `health`, every
    judged job (history and live), and why job `job` got its limit when asked."""
    from hpcpredict.daemon.views.report_page import collect_page, live_html

    page = collect_page(store, config.predictor_factory, since_s=since_s, source="both",  # type: ignore[attr-defined]
                        db_url=db_url, daemon=health, asked_job=job)
    return live_html(page)
