"""A SLURM job as hpcpredict's typed events: the one place SLURM's view becomes a `JobRequest`.

The adapter has already turned SLURM's minutes into seconds and its "no value" markers (NO_VAL,
INFINITE) into None (adapter.py); what is decided here:

* the request: the user's original time limit, from the plugin's mark (`tag.py`) when the job
  has one (SLURM's limit may be the lowered one), else SLURM's limit; a job with no limit at all
  cannot be described (`NoTimeLimitError`);
* the processors: the count the plugin predicted for, from the mark, else SLURM's CPU count
  (at least 1): the rule docs/protocol.md states once ("Processors") and tests/test_slurm_plugin_lua.py
  holds both Lua scripts to;
* partition and job name: stable hashes (`jobs.label_id`); the learner does not read them.

The watcher hands these values to the service as they are (`PredictionService.record`), with no
round trip through the socket protocol's text.
"""

from __future__ import annotations

from hpcpredict.job_events import Ended, Started, Submitted
from hpcpredict.jobs import JobRequest, label_id
from hpcpredict.slurm.adapter import SlurmJob
from hpcpredict.slurm.tag import PredictionTag, request_s


class NoTimeLimitError(ValueError):
    """A job with no time limit: hpcpredict predicts fractions of a request, and there is none."""


def has_request(job: SlurmJob, tag: PredictionTag | None) -> bool:
    """The job has a request to be described by: the plugin's mark, or a limit SLURM holds (the
    user's ``--time``, or the partition's DefaultTime)."""
    return bool(request_s(tag, job.time_limit_s))


def job_request(job: SlurmJob, tag: PredictionTag | None) -> JobRequest:
    """The job as its user submitted it (module doc)."""
    requested_s = request_s(tag, job.time_limit_s)
    if not requested_s or requested_s <= 0:
        raise NoTimeLimitError(f"job {job.job_id} has no time limit: hpcpredict does not describe it")
    procs = tag.procs if tag is not None and tag.procs is not None else job.cpus
    return JobRequest(
        job_id=job.job_id,
        submit_s=job.submit_s,
        procs=max(1, procs),
        requested_s=requested_s,
        user_id=job.uid,
        group_id=job.gid,
        executable_id=label_id(job.name) if job.name else -1,
        partition_id=label_id(job.partition) if job.partition else -1,
    )


def submitted(job: SlurmJob, tag: PredictionTag | None) -> Submitted:
    """The submission, with what the plugin acted on: its prediction, the limit SLURM holds (the
    lowered one), and the token of the prediction's features (all None for an unmarked job)."""
    return Submitted(
        job_request(job, tag),
        given_prediction_s=None if tag is None else tag.prediction_s,
        limit_s=None if tag is None else job.time_limit_s,
        feature_token=None if tag is None else tag.token,
    )


def started(job: SlurmJob) -> Started:
    if job.start_s is None:
        raise ValueError(f"job {job.job_id} has not started")
    return Started(job.job_id, job.start_s)


def ended(job: SlurmJob, tag: PredictionTag | None) -> Ended:
    """The end, described whole (the service may never have seen the job). A job that never
    started ran 0 s; one SLURM killed at its limit (TIMEOUT) while that limit was below the
    request in the mark was killed at a limit hpcpredict lowered (its runtime is a lower bound)."""
    if job.end_s is None:
        raise ValueError(f"job {job.job_id} has not ended")
    start_s = job.start_s or job.end_s
    limit_s = job.time_limit_s
    lowered_kill = bool(
        tag is not None and job.state == "TIMEOUT" and limit_s is not None and limit_s < tag.request_s
    )
    return Ended(
        job.job_id,
        run_s=max(0, job.end_s - start_s) if job.start_s else 0,
        end_s=job.end_s,
        final_state=job.state,
        killed_at_lowered_limit=lowered_kill,
        # a job whose limit an admin set to UNLIMITED after it was recorded: the store has it
        request=job_request(job, tag) if has_request(job, tag) else None,
        given_prediction_s=None if tag is None else tag.prediction_s,
        feature_token=None if tag is None else tag.token,
    )
