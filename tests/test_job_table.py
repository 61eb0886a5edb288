"""`JobTable`: the jobs as columns, their objects built once and only when read; a replay of a
table reads its columns and builds only the `JobRequest`s (issue 31)."""

from __future__ import annotations

import gc
import pickle
from pathlib import Path

import pytest

from hpcpredict.logs.job_table import JobTable
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

SAMPLE = Path(__file__).resolve().parents[1] / "swf" / "KTH-SP2-sample.swf"


@pytest.fixture(scope="module")
def workload():
    return load_workload(SAMPLE)


def _fresh(workload):
    """The workload with a table whose objects are not built yet."""
    import dataclasses

    table = JobTable(dict(workload.jobs.columns))
    return dataclasses.replace(workload, jobs=table), table


def test_the_requests_are_the_jobs_requests(workload) -> None:
    _, table = _fresh(workload)
    requests = table.requests()
    assert table._jobs is None  # the requests alone build no Job
    jobs = table.jobs()
    assert len(jobs) == len(requests) == len(table)
    assert all(job.request is request for job, request in zip(jobs, requests))
    assert table.requests() is requests and table.jobs() is jobs  # built once


@pytest.mark.parametrize("enabled", [True, False])
def test_building_leaves_the_cycle_collector_as_it_was(workload, enabled: bool) -> None:
    _, table = _fresh(workload)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        table.jobs()
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_a_pickled_table_carries_columns_only(workload) -> None:
    _, table = _fresh(workload)
    table.jobs()
    copy = pickle.loads(pickle.dumps(table))
    assert copy._jobs is None and copy._requests is None
    assert copy.requests() == table.requests()


@pytest.mark.parametrize("spec", [
    RunSpec.from_keys(starvation_guard_s=86_400), RunSpec("easy", "requested", "requested"),
])
def test_a_replay_of_a_table_builds_no_job_and_equals_the_replay_of_the_objects(workload, spec) -> None:
    import dataclasses

    from_table, table = _fresh(workload)
    result = run(from_table, spec)
    metrics = compute_metrics(result)
    assert table._jobs is None  # the replay and its metrics read columns only
    assert table._requests is None  # (the compiled loop: no request object either)
    from_objects = dataclasses.replace(workload, jobs=list(table.jobs()))
    expected = run(from_objects, spec)
    for column in ("start_s", "initial_prediction_s", "final_prediction_s", "corrections", "backfilled"):
        assert getattr(result, column) == getattr(expected, column)
    assert metrics == compute_metrics(expected)


def test_runs_in_the_compiled_loop_build_no_object_here_or_in_the_workers(workload) -> None:
    """`run_replicated(jobs=2)` with a run and its baseline, both in the compiled loop, builds
    neither the log's requests nor its Job objects (they read the table's columns): nothing to
    build before the workers fork."""
    from hpcpredict.sim.runner import run_replicated

    from_table, table = _fresh(workload)
    specs = [RunSpec.from_keys(starvation_guard_s=86_400), RunSpec("easy", "requested", "requested")]
    runs = run_replicated(from_table, specs, jobs=2)
    assert [m[0] for m in runs.metrics] == [compute_metrics(run(from_table, spec)) for spec in specs]
    assert table._requests is None and table._jobs is None
