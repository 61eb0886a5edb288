"""What a scheduler reports about a job's life, as typed values: the four events the daemon's
service records.

Two fronts produce them: the socket protocol (`hpcpredict.daemon.fronts.protocol` parses a line's
fields into one) and the SLURM watcher (`hpcpredict.slurm.requests` builds one from SLURM's view
of a job). Both hand the value to `PredictionService.record`, so a job seen by the watcher goes
to the service as the dataclass it was built as, without a round trip through protocol text.
They live outside `daemon` and `slurm` so that neither package imports the other for them.

Times are Unix seconds, durations seconds; a `request` is the job as its user submitted it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcpredict.jobs import JobRequest


@dataclass(frozen=True, slots=True)
class Submitted:
    """The job was submitted (`request.submit_s`).

    `given_prediction_s`: the prediction the scheduler already acted on (served by PREDICT before
    the job had an id); `limit_s`: the time limit the scheduler set, when it differs from the
    request; `feature_token`: the token PREDICT answered with (kept in the job's mark), under
    which the service holds the features that prediction was computed from, so the job learns
    from exactly those.
    """

    request: JobRequest
    given_prediction_s: int | None = None
    limit_s: int | None = None
    feature_token: str | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """The job began running at `start_s`; `request` records a job the service never saw."""

    job_id: int
    start_s: int
    request: JobRequest | None = None


@dataclass(frozen=True, slots=True)
class Ended:
    """The job ended at `end_s` after running `run_s` (0: it never ran).

    `final_state` is the scheduler's word (SLURM: COMPLETED, TIMEOUT, ...);
    `killed_at_lowered_limit` says it was killed at a limit hpcpredict lowered below the request.
    `given_prediction_s` and `feature_token` are what the job's mark says of its prediction (as in
    `Submitted`): used only when the service never saw the submission (a job whose whole life
    fell between two looks of the watcher, reported first by jobcomp.lua), whose submission is
    then recorded from them before the end, so that it learns from its prediction's features.
    """

    job_id: int
    run_s: int
    end_s: int
    final_state: str = "COMPLETED"
    killed_at_lowered_limit: bool = False
    request: JobRequest | None = None
    given_prediction_s: int | None = None
    feature_token: str | None = None


@dataclass(frozen=True, slots=True)
class LimitChanged:
    """The job's time limit was set to `new_limit_s` at `at_s` (a correction, the guard, an admin)."""

    job_id: int
    new_limit_s: int
    at_s: int


JobEvent = Submitted | Started | Ended | LimitChanged
