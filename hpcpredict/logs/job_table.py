"""A cleaned log's jobs as columns, and as the `Job` sequence the simulator reads.

Why both: building 300,000 `Job` and `JobRequest` objects costs ~0.5 s, which `hpcpredict info`
and the summaries never need (they read columns), while the replay and the predictors read one
`JobRequest` per job. `JobTable` is a `Sequence[Job]` whose objects are built once, on first
access to a job; `len()` and the columns never build them, and a replay builds only the
`JobRequest`s (`requests()`: the simulator reads the rest as columns).

The objects are built with the cycle collector paused (`hpcpredict.collector`): they hold
integers and each other, never a cycle, and the collections their number triggered took 40% of
the build's CPU on CEA-Curie.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from hpcpredict.collector import collector_paused
from hpcpredict.jobs import Job, JobRequest

#: JobRequest's fields, then Job's own, in the order their constructors take them.
REQUEST_FIELDS = (
    "job_id", "submit_s", "procs", "requested_s", "user_id", "group_id", "executable_id",
    "queue_id", "partition_id",
)
JOB_FIELDS = ("run_s", "status", "wait_s")


@dataclass(eq=False)
class JobTable(Sequence[Job]):
    """`columns[name]` for every name of REQUEST_FIELDS and JOB_FIELDS, one row per job."""

    columns: dict[str, np.ndarray]
    _jobs: list[Job] | None = field(default=None, repr=False)
    _requests: list[JobRequest] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.columns["job_id"])

    @overload
    def __getitem__(self, index: int) -> Job: ...

    @overload
    def __getitem__(self, index: slice) -> list[Job]: ...

    def __getitem__(self, index: int | slice) -> Job | list[Job]:
        return self.jobs()[index]

    def __iter__(self) -> Iterator[Job]:
        return iter(self.jobs())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def jobs(self) -> list[Job]:
        """The jobs as objects, built on the first call (Python integers, as a log's parse gives)."""
        if self._jobs is None:
            requests = self.requests()
            with collector_paused():
                self._jobs = list(map(Job, requests, *(self.columns[name].tolist() for name in JOB_FIELDS)))
        return self._jobs

    def requests(self) -> list[JobRequest]:
        """The jobs' `JobRequest`s (each `jobs()[i].request`), built on the first call."""
        if self._requests is None:
            with collector_paused():
                self._requests = list(map(JobRequest, *(self.columns[name].tolist() for name in REQUEST_FIELDS)))
        return self._requests

    def __getstate__(self) -> dict[str, object]:
        """Pickled as columns only (a worker process builds its own objects)."""
        return {"columns": self.columns, "_jobs": None, "_requests": None}


def job_column(jobs: Sequence[Job], name: str) -> np.ndarray:
    """One column (REQUEST_FIELDS, JOB_FIELDS) of `jobs`: the table's own array when `jobs` is a
    `JobTable`, else read off the objects."""
    if isinstance(jobs, JobTable):
        return jobs.columns[name]
    if name in REQUEST_FIELDS:
        return np.array([getattr(job.request, name) for job in jobs])
    return np.array([getattr(job, name) for job in jobs])
