"""Hypothesis strategies for logs of jobs, shared by the tests of the transforms of a log
(shaking, load scaling)."""

from __future__ import annotations

from hypothesis import strategies as st

from hpcpredict.jobs import Job, JobRequest


def jobs_in_submission_order(*, max_submit_s: int = 10_000, min_size: int = 0,
                             max_size: int = 60) -> st.SearchStrategy[list[Job]]:
    """Lists of jobs sorted by submission (ties possible), ids 1.. in that order, up to 64
    processors, 10 users, each job asking a minute more than it runs."""
    return st.lists(
        st.tuples(st.integers(0, max_submit_s), st.integers(1, 64), st.integers(1, 5_000),
                  st.integers(0, 9)),
        min_size=min_size,
        max_size=max_size,
    ).map(
        lambda rows: [
            Job(JobRequest(job_id=i + 1, submit_s=submit, procs=procs, requested_s=run + 60,
                           user_id=user), run_s=run)
            for i, (submit, procs, run, user) in enumerate(sorted(rows))
        ]
    )
