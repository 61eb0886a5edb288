"""The job model shared by the simulator, the predictors and (later) the daemon.

A `JobRequest` is what is known when a job is submitted: the only thing a predictor may read
when it predicts. A `Job` adds what the log tells us happened (the true runtime), which only the
simulator and the clairvoyant oracle may read. Keeping them apart makes leakage a type error
rather than a code-review finding (docs/method.md §2: nothing known only at completion enters x_j).
All times are whole seconds; processors are counts.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A job as its user submitted it (SWF fields 1, 2, 8/5, 9, 12, 13, 14, 15, 16)."""

    job_id: int
    submit_s: int
    procs: int
    requested_s: int
    user_id: int
    group_id: int = -1
    executable_id: int = -1
    queue_id: int = -1
    partition_id: int = -1


@dataclass(frozen=True, slots=True)
class Job:
    """A job of a cleaned log: its request plus its true runtime (SWF field 4) and exit status."""

    request: JobRequest
    run_s: int
    status: int = -1
    # How long the job waited on the machine that produced the log (SWF field 3; -1 unknown).
    # The simulator ignores it (it schedules the job itself); replaying a history as it
    # happened (``hpcpredict train``) needs it for the start events.
    wait_s: int = -1

    @property
    def job_id(self) -> int:
        return self.request.job_id

    @property
    def submit_s(self) -> int:
        return self.request.submit_s

    @property
    def procs(self) -> int:
        return self.request.procs

    @property
    def requested_s(self) -> int:
        return self.request.requested_s

    @property
    def user_id(self) -> int:
        return self.request.user_id


def label_id(name: str) -> int:
    """A stable non-negative id for a partition or job name (CRC-32, 31 bits).

    The learner reads neither (docs/method.md §2), so the id only has to be stable across restarts
    and hosts, which a hash is without a registry to keep in step.
    """
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF
