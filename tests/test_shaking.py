"""Shaken replicas (hpcpredict/sim/shaking.py) and the replicated runs built on them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.jobs import Job, JobRequest
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run, run_replicated
from hpcpredict.sim.shaking import replica, shake_jobs
from hpcpredict.logs.workload import load_workload
from job_strategies import jobs_in_submission_order


def _identity(job: Job) -> tuple[int, int, int, int, int, int]:
    """Everything shaking must keep: id, user, procs, request, runtime, status."""
    return (job.job_id, job.user_id, job.procs, job.requested_s, job.run_s, job.status)


jobs_strategy = jobs_in_submission_order()


@given(jobs=jobs_strategy, shake_s=st.integers(0, 600), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_shaking_keeps_every_job_and_moves_submissions_within_the_shake(
    jobs: list[Job], shake_s: int, seed: int
) -> None:
    shaken = shake_jobs(jobs, shake_s, np.random.default_rng(seed))
    assert Counter(map(_identity, shaken)) == Counter(map(_identity, jobs))
    original = {job.job_id: job.submit_s for job in jobs}
    for job in shaken:
        assert job.submit_s >= 0
        assert abs(job.submit_s - original[job.job_id]) <= shake_s or job.submit_s == 0
    submits = [job.submit_s for job in shaken]
    assert submits == sorted(submits)


@given(jobs=jobs_strategy, shake_s=st.integers(0, 600), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_a_table_is_shaken_as_its_jobs_are(jobs: list[Job], shake_s: int, seed: int) -> None:
    """A loaded log's `JobTable` is shaken as columns (no job object built): the same jobs in
    the same order as the objects' shaking gives, and a table again."""
    from hpcpredict.logs.job_table import JOB_FIELDS, REQUEST_FIELDS, JobTable, job_column

    table = JobTable({name: np.asarray(job_column(jobs, name), dtype=np.int64)
                      for name in (*REQUEST_FIELDS, *JOB_FIELDS)})
    shaken = shake_jobs(table, shake_s, np.random.default_rng(seed))
    assert isinstance(shaken, JobTable) and shaken._jobs is None
    assert list(shaken) == shake_jobs(jobs, shake_s, np.random.default_rng(seed))


def ties_in_log_order(shaken: list[Job]) -> bool:
    """Do jobs the shaking left at equal submit times come in the log's order (ids ascending)?"""
    return all(a.job_id < b.job_id for a, b in zip(shaken, shaken[1:]) if a.submit_s == b.submit_s)


@pytest.mark.parametrize("shake_s", [0, 2, 60])
def test_equal_submit_times_keep_the_logs_order(shake_s: int) -> None:
    """Ties after shaking (with a shake of 0, of 2 s: five values for 200 jobs, of 60 s: the
    ones the clamp at 0 and chance give) keep the log's order."""
    jobs = [Job(JobRequest(job_id=i, submit_s=30 + i // 50, procs=1, requested_s=10, user_id=1),
                run_s=5) for i in range(200)]
    shaken = shake_jobs(jobs, shake_s, np.random.default_rng(1))
    assert sum(a.submit_s == b.submit_s for a, b in zip(shaken, shaken[1:])) > 100  # many ties
    assert ties_in_log_order(shaken)
    if shake_s == 0:
        assert [job.job_id for job in shaken] == list(range(200))


@given(jobs=jobs_strategy, shake_s=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_ties_keep_the_logs_order_whatever_the_shake(jobs: list[Job], shake_s: int, seed: int) -> None:
    assert ties_in_log_order(shake_jobs(jobs, shake_s, np.random.default_rng(seed)))


def test_negative_shake_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        shake_jobs([], -1, np.random.default_rng(0))


def test_replicas_are_reproducible_and_independent_of_how_many_are_asked(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    assert replica(workload, 0) is workload  # replica 0 is the log itself
    third = replica(workload, 3, shake_s=60, seed=7)
    again = replica(workload, 3, shake_s=60, seed=7)
    assert third.jobs == again.jobs
    assert third.jobs != workload.jobs
    assert replica(workload, 3, shake_s=60, seed=8).jobs != third.jobs
    assert replica(workload, 2, shake_s=60, seed=7).jobs != third.jobs
    moved = [a.submit_s - b.submit_s for a, b in
             zip(sorted(third.jobs, key=lambda j: j.job_id), sorted(workload.jobs, key=lambda j: j.job_id))]
    assert max(moved) <= 60 and min(moved) >= -60 and any(moved)


def test_one_replica_gives_todays_numbers_exactly(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    spec = RunSpec()  # the learned default
    runs = run_replicated(workload, [spec, RunSpec("easy", "requested", "requested")], replicas=1)
    assert runs.replicas == 1
    assert runs.metrics[0][0] == compute_metrics(run(workload, spec))
    assert runs.unshaken[0].start_s == run(workload, spec).start_s


def test_every_configuration_sees_the_same_shaken_logs(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    # Clairvoyant EASY on replica r equals a run on replica(workload, r) done by hand: the
    # replicated runner gives each configuration exactly the same perturbed log.
    spec = RunSpec("easy", "clairvoyant", "requested")
    runs = run_replicated(workload, [RunSpec(), spec], replicas=3, shake_s=30, seed=5)
    for index in range(3):
        expected = compute_metrics(run(replica(workload, index, shake_s=30, seed=5), spec))
        assert runs.metrics[1][index] == expected
    assert len({m.ave_bsld for m in runs.metrics[1]}) > 1  # the shaking changed something
