"""``hpcpredict replay-slurm``: a slice of an SWF log replayed on a real SLURM, read back as SWF.

Each job of the slice is submitted at its scaled submit time as ``sbatch -n PROCS -t LIMIT
--wrap "sleep RUN"``, with the plugin (slurm-plugin/) and the daemon in whatever mode the site runs
(``--mode`` sets it); then what SLURM did (``squeue --json``: submit, start, end, limits, the
plugin's AdminComment mark) is written as SWF, which `hpcpredict` measures exactly as it measures
a simulation (`real_result`) and replays through the simulator (`compare`).

**Scaling** (docs/slurm-replay.md). A replay at speedup K divides every time of the log by K:
submit offsets (from the slice's first job), runtimes (whole seconds, at least 1) and requests.
SLURM limits are whole minutes, so the request becomes ``ceil(request / K / 60)`` minutes, at least
one: K must leave the slice's requests at several minutes for them to stay meaningful (a request
of 15 min at K = 60 would be 15 s and becomes 1 min, four times too long). `Scaling.report` says
how many requests the rounding moved by more than a tenth. A sleep is cut to its limit minus
`SLEEP_MARGIN_S` (launching a batch step takes about a second: a job running to its exact limit
could be killed). The machine: ``--procs`` processors; a log's jobs are scaled down with it when
the log's machine is larger (``round(q * P / M)``, at least 1).

**Users** (``users="log"``, `ensure_log_users`). Each job is submitted as its log user: root creates one
local account per user of the slice (``hpr<U>``, uid `USER_UID_BASE` + U, group `USER_GROUP`) and
submits with ``sbatch --uid --gid``, so that SLURM, the plugin and the daemon see the log's users
(the daemon learns each of them, as a site's would) and the written SWF carries the log's user and
group ids. ``users="self"`` submits everything as the caller (one user: the daemon learns a single
heavy user).

SLURM's own clocks are not scaled (bf_interval, the limit check every ~30 s, bf_resolution):
the model in `hpcpredict.sim.slurm_model.slurm_backfill` is given the same settings in the same seconds, so the
comparison is like for like, but a replay at speedup K is a cluster whose scheduler is K times
slower relative to its jobs than the real one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from hpcpredict.jobs import Job, JobRequest
from hpcpredict.slurm.adapter import ENDED_STATES, SlurmBackend, SlurmError, SlurmJob
from hpcpredict.slurm.convert import HistoryJob, to_swf
from hpcpredict.slurm.tag import parse_tag
from hpcpredict.sim.easy.simulation import SimulationResult
from hpcpredict.logs.swf import SwfRecord
from hpcpredict.logs.workload import Workload

SLEEP_MARGIN_S = 2  # a sleep ends this long before its limit (batch step launch, ~1 s here)
JOB_NAME_PREFIX = "hpr"  # job name hpr<log job id>: the log's job, readable in squeue
PLUGIN_SETTINGS = "hpcpredict_slurm.conf"  # beside slurm.conf (slurm-plugin/README.md)
MODES = ("record", "lower")
USERS = ("log", "self")
USER_UID_BASE = 30000  # log user U runs as uid 30000 + U (clear of system and people's accounts)
USER_GROUP = "hpcreplay"  # the replay users' group
USER_PREFIX = "hpr"  # log user U is the account hpr<U>


class ReplayError(RuntimeError):
    """The replay cannot go on (the message says what to check)."""


@dataclass(frozen=True)
class Scaling:
    """Log time -> replay time at `speedup`; log processors -> the replay machine's."""

    speedup: float
    log_procs: int
    machine_procs: int

    def __post_init__(self) -> None:
        if not self.speedup > 0:
            raise ValueError(f"the speedup must be > 0, got {self.speedup}")

    def offset_s(self, submit_s: int, origin_s: int) -> float:
        return (submit_s - origin_s) / self.speedup

    def time_limit_min(self, requested_s: int) -> int:
        return max(1, math.ceil(requested_s / self.speedup / 60))

    def sleep_s(self, run_s: int, time_limit_min: int) -> int:
        return max(1, min(round(run_s / self.speedup), time_limit_min * 60 - SLEEP_MARGIN_S))

    def procs(self, procs: int) -> int:
        if self.machine_procs >= self.log_procs:
            return procs
        return min(self.machine_procs, max(1, round(procs * self.machine_procs / self.log_procs)))


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """One job as it is submitted: at `offset_s` after the replay starts."""

    log_job_id: int
    offset_s: float
    procs: int
    sleep_s: int
    time_limit_min: int
    scaled_request_s: float  # request / speedup, before rounding to minutes
    log_user_id: int = -1  # the log's user and group (SWF: -1 when unknown)
    log_group_id: int = -1
    run_as: tuple[int, int] | None = None  # (uid, gid) to submit as (`ensure_log_users`); None: the caller

    def sbatch_arguments(self) -> list[str]:
        account = [] if self.run_as is None else [f"--uid={self.run_as[0]}", f"--gid={self.run_as[1]}"]
        # -D: the caller's directory may be closed to the log's users
        return ["-J", f"{JOB_NAME_PREFIX}{self.log_job_id}", "-n", str(self.procs), "-t", str(self.time_limit_min),
                "-o", "/dev/null", "-D", "/tmp", *account, "--wrap", f"sleep {self.sleep_s}"]


def plan(workload: Workload, *, jobs: int, skip: int, scaling: Scaling) -> list[ReplayJob]:
    """The slice jobs[skip : skip + jobs] of the cleaned log, scaled."""
    chosen = list(workload.jobs[skip: skip + jobs])
    if not chosen:
        raise ReplayError(f"no job to replay: the log has {len(workload.jobs)} jobs after cleaning, "
                          f"--skip {skip}")
    origin_s = chosen[0].submit_s
    planned = []
    for job in chosen:
        limit_min = scaling.time_limit_min(job.requested_s)
        planned.append(ReplayJob(
            log_job_id=job.job_id,
            offset_s=scaling.offset_s(job.submit_s, origin_s),
            procs=scaling.procs(job.procs),
            sleep_s=scaling.sleep_s(job.run_s, limit_min),
            time_limit_min=limit_min,
            scaled_request_s=job.requested_s / scaling.speedup,
            log_user_id=job.user_id,
            log_group_id=job.request.group_id,
        ))
    return planned


# ---------------------------------------------------------------------------- the log's users
def replay_uid(log_user_id: int) -> int:
    """The local uid log user `log_user_id` runs as (a log without users: one account, U = 0)."""
    return USER_UID_BASE + max(0, log_user_id)


def ensure_log_users(planned: Sequence[ReplayJob]) -> tuple[int, list[str]]:
    """Local accounts for the slice's users (module doc, "Users"), created when missing (root:
    ``groupadd``/``useradd``, no home, no login shell; accounts already there are reused, so
    replays after the first create nothing): the group's gid and the accounts created now."""
    import grp
    import os

    if os.geteuid() != 0:
        raise ReplayError("replaying as the log's users needs root (useradd, sbatch --uid); "
                          "use --users self to submit every job as yourself")
    try:
        gid = grp.getgrnam(USER_GROUP).gr_gid
    except KeyError:
        _run_checked(["groupadd", "--force", USER_GROUP])
        gid = grp.getgrnam(USER_GROUP).gr_gid
    created = []
    for uid in sorted({replay_uid(job.log_user_id) for job in planned}):
        if _account_name(uid) is not None:
            continue
        name = f"{USER_PREFIX}{uid - USER_UID_BASE}"
        try:
            _run_checked(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                          "/usr/sbin/nologin", "--uid", str(uid), "--gid", str(gid), "--no-user-group", name])
        except ReplayError:
            # Two replays of the same users started together (on two clusters, with and without
            # a setting): the other one made the account between the look and useradd.
            if _account_name(uid) != name:
                raise
            continue
        created.append(name)
    return gid, created


def _account_name(uid: int) -> str | None:
    """The name of the account with `uid`, None when there is none."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def as_log_users(planned: Sequence[ReplayJob], gid: int) -> list[ReplayJob]:
    """Each job marked to be submitted as its log user's account."""
    return [replace(job, run_as=(replay_uid(job.log_user_id), gid)) for job in planned]


def _run_checked(command: list[str]) -> None:
    import subprocess

    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ReplayError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


def rounding_report(planned: Sequence[ReplayJob]) -> dict[str, float]:
    """How much SLURM's whole minutes moved the scaled requests: the share of jobs whose limit is
    more than 10% above request/K, the median ratio, and the span of the replay (seconds)."""
    ratios = np.array([job.time_limit_min * 60 / job.scaled_request_s for job in planned])
    return {
        "jobs": len(planned),
        "limits_over_10pct": float(np.mean(ratios > 1.1)),
        "median_limit_ratio": float(np.median(ratios)),
        "submission_span_s": planned[-1].offset_s,
        "longest_limit_min": max(job.time_limit_min for job in planned),
    }


# ---------------------------------------------------------------------------- the plugin's mode
def set_plugin_mode(slurm_conf: Path, mode: str) -> Path:
    """Write ``mode=`` into hpcpredict_slurm.conf beside slurm.conf (other lines kept) and touch
    job_submit.lua, which slurmctld then reloads with the settings at the next submission
    (slurm-plugin/README.md)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    folder = slurm_conf.parent
    script = folder / "job_submit.lua"
    if not script.is_file():
        raise ReplayError(f"{script}: not found; install slurm-plugin/ beside {slurm_conf} for --mode")
    settings = folder / PLUGIN_SETTINGS
    lines = settings.read_text().splitlines() if settings.is_file() else []
    lines = [line for line in lines if line.split("=", 1)[0].strip() != "mode"] + [f"mode={mode}"]
    settings.write_text("\n".join(lines) + "\n")
    script.touch()
    return settings


# ---------------------------------------------------------------------------- submitting, watching
Clock = Callable[[], float]
Sleep = Callable[[float], None]


def run_replay(
    planned: Sequence[ReplayJob],
    backend: SlurmBackend,
    *,
    poll_s: float = 5.0,
    timeout_s: float | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    progress: Callable[[int, int], None] | None = None,
) -> dict[int, tuple[ReplayJob, SlurmJob]]:
    """Submit every job at its offset, poll ``squeue --json`` until all have ended.

    Returns SLURM's last record of each job by SLURM job id. Ended jobs stay in squeue for
    MinJobAge (300 s by default), far longer than `poll_s`, so each is seen ended at least once;
    one that vanishes before is an error. Any failure cancels what was submitted.
    """
    if timeout_s is None:  # a safety net only: every job one after the other, plus the span
        timeout_s = planned[-1].offset_s + sum(60 * job.time_limit_min for job in planned) + 600
    submitted: dict[int, ReplayJob] = {}
    seen: dict[int, SlurmJob] = {}
    begin = clock()
    next_job = 0
    next_poll = begin
    try:
        while True:
            elapsed = clock() - begin
            while next_job < len(planned) and planned[next_job].offset_s <= elapsed:
                job = planned[next_job]
                submitted[backend.submit(job.sbatch_arguments())] = job
                next_job += 1
            if clock() >= next_poll:
                ended = _poll(backend, submitted, seen)
                if progress is not None:
                    progress(next_job, ended)
                if next_job == len(planned) and ended == len(planned):
                    return {job_id: (submitted[job_id], seen[job_id]) for job_id in submitted}
                if clock() - begin > timeout_s:
                    raise ReplayError(f"{len(planned) - ended} jobs still not ended after {timeout_s:.0f} s")
                next_poll = clock() + poll_s
            upcoming = planned[next_job].offset_s + begin if next_job < len(planned) else next_poll
            sleep(max(0.0, min(upcoming, next_poll) - clock()))
    except BaseException:
        for job_id in submitted:
            if job_id not in seen or seen[job_id].state not in ENDED_STATES:
                try:
                    backend.cancel(job_id)
                except SlurmError:
                    pass  # already gone: nothing to cancel
        raise


def _poll(backend: SlurmBackend, submitted: dict[int, ReplayJob], seen: dict[int, SlurmJob]) -> int:
    current = {job.job_id: job for job in backend.jobs() if job.job_id in submitted}
    for job_id in submitted:
        if job_id in current:
            seen[job_id] = current[job_id]
        elif job_id in seen and seen[job_id].state not in ENDED_STATES:
            raise ReplayError(f"job {job_id} left squeue before it was seen ended: raise MinJobAge "
                              f"above the poll interval")
    return sum(1 for job in seen.values() if job.state in ENDED_STATES)


# ---------------------------------------------------------------------------- what SLURM did
def to_history(outcome: dict[int, tuple[ReplayJob, SlurmJob]]) -> list[HistoryJob]:
    """SLURM's records as `slurm-convert` reads a history: the request is the user's (the
    plugin's mark when it lowered the limit, else the limit)."""
    history = []
    for planned, job in outcome.values():
        tag = parse_tag(job.admin_comment)
        requested_s = tag.request_s if tag is not None else job.time_limit_s
        # submitted as the log's users: the SWF keeps the log's ids; else SLURM's (the caller's)
        uid, gid = (planned.log_user_id, planned.log_group_id) if planned.run_as else (job.uid, job.gid)
        history.append(HistoryJob(
            job_id=job.job_id, uid=uid, gid=gid, state=job.state, partition=job.partition,
            name=job.name, cpus=job.cpus if job.start_s is not None else 0,
            requested_cpus=planned.procs, submit_s=job.submit_s, start_s=job.start_s,
            end_s=job.end_s if job.end_s is not None else job.submit_s, requested_s=requested_s,
        ))
    return history


def replay_swf(
    outcome: dict[int, tuple[ReplayJob, SlurmJob]], machine_procs: int, notes: Sequence[str]
) -> tuple[list[str], list[SwfRecord]]:
    header, records = to_swf(to_history(outcome), max_procs=machine_procs, source="SLURM replay")
    return header + [f"; Note: {note}" for note in notes], records


def real_result(workload: Workload, label: str = "SLURM") -> SimulationResult:
    """What SLURM did, read from a replay's SWF (its waits), in the simulator's result type, so that
    `compute_metrics` gives AVEbsld and the waits exactly as for a simulation."""
    jobs: Sequence[Job] = workload.jobs
    missing = [job.job_id for job in jobs if job.wait_s < 0]
    if missing:
        raise ReplayError(f"{workload.path}: jobs without a wait (never started?): {missing[:5]}")
    requested = [job.requested_s for job in jobs]
    return SimulationResult(
        jobs=jobs, machine_procs=workload.machine_procs, scheduler=label, predictor="requested",
        correction="requested", start_s=[job.submit_s + job.wait_s for job in jobs],
        initial_prediction_s=requested, final_prediction_s=requested, corrections=[0] * len(jobs),
        backfilled=[False] * len(jobs), first_reserved_start_s=[-1] * len(jobs),
    )


@dataclass(frozen=True)
class Agreement:
    """Per-job agreement of a model's schedule with SLURM's, on the same jobs."""

    jobs: int
    mean_abs_start_diff_s: float
    median_abs_start_diff_s: float
    spearman_start_order: float  # rank correlation of the start times (1: same order)
    same_start_share: float  # jobs started within `tolerance_s` of SLURM's start
    tolerance_s: int

    def to_dict(self) -> dict[str, float | int]:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def agreement(real: SimulationResult, model: SimulationResult, tolerance_s: int = 60) -> Agreement:
    from scipy.stats import spearmanr  # heavy import, only here

    real_start = np.asarray(real.start_s, dtype=float)
    model_start = np.asarray(model.start_s, dtype=float)
    if len(real_start) != len(model_start):
        raise ValueError("the two schedules are not of the same jobs")
    diff = np.abs(real_start - model_start)
    rho = float(spearmanr(real_start, model_start).statistic) if len(diff) > 1 else 1.0
    return Agreement(
        jobs=len(diff), mean_abs_start_diff_s=float(diff.mean()),
        median_abs_start_diff_s=float(np.median(diff)), spearman_start_order=rho,
        same_start_share=float(np.mean(diff <= tolerance_s)), tolerance_s=tolerance_s,
    )


class PluginLimitPredictor:
    """The limit the plugin gave each job of a replay in lower mode: its prediction in whole
    minutes, at least 1, never above the request (job_submit.lua's rule), read from replay-slurm's
    CSV. Fed to the model, it isolates the scheduler: the model plans with the very limits SLURM
    was given, and the correction policy raises them as the corrector did."""

    name = "plugin limits"

    def __init__(self, limits_s: dict[int, int]) -> None:
        self._limits_s = limits_s

    @classmethod
    def from_csv(cls, path: Path) -> PluginLimitPredictor:
        import csv

        limits = {}
        with path.open(newline="") as stream:
            for row in csv.DictReader(stream):
                request_min = int(row["request_min"])
                prediction = row["prediction_s"]
                minutes = request_min if not prediction else max(1, min(request_min, math.ceil(int(prediction) / 60)))
                limits[int(row["slurm_job_id"])] = 60 * minutes
        return cls(limits)

    def predict(self, request: JobRequest, now_s: int) -> int:
        return min(self._limits_s[request.job_id], request.requested_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


def write_outcome_csv(path: Path, outcome: dict[int, tuple[ReplayJob, SlurmJob]]) -> None:
    """One line per job: the log's job, SLURM's, the limits and the plugin's mark."""
    lines = ["log_job_id,slurm_job_id,state,procs,sleep_s,request_min,final_limit_min,"
             "prediction_s,submit_s,start_s,end_s,log_user_id,slurm_uid"]
    for job_id, (planned, job) in sorted(outcome.items()):
        tag = parse_tag(job.admin_comment)
        lines.append(",".join(str(value) for value in (
            planned.log_job_id, job_id, job.state, planned.procs, planned.sleep_s,
            planned.time_limit_min, "" if job.time_limit_s is None else job.time_limit_s // 60,
            "" if tag is None else tag.prediction_s, job.submit_s,
            "" if job.start_s is None else job.start_s, "" if job.end_s is None else job.end_s,
            planned.log_user_id, job.uid,
        )))
    path.write_text("\n".join(lines) + "\n")
