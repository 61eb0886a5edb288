"""One way to talk to SLURM, two backends: the Slurm commands everywhere, pyslurm where it fits.

pyslurm's releases track Slurm's, one pyslurm per Slurm major.minor, built against that
libslurm (PyPI has 25.11 only; pyslurm 22.5.3 and 24.11.0 build from their sources against
Debian 12's 22.05 and trixie's 24.11: testbed/pyslurm_wheel.py). So `select_backend` uses pyslurm
only when it is installed *and* its major.minor equals the installed Slurm's (22.5.x for 22.05),
and otherwise the command line backend (``squeue --json``, ``scontrol``, ``sbatch --parsable``),
which works on 22.05 and later. The watcher and the tools see only `SlurmBackend`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hpcpredict.slurm_time import slurm_duration_s

logger = logging.getLogger(__name__)

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
DEFAULT_TIMEOUT_S = 30.0
# Every job slurmctld still holds, ended ones included (24.11+ lists ended jobs only when asked).
SQUEUE_ALL_JOBS = ("squeue", "--json", "--states=all")
# The lean listing (`CliBackend`'s default): only the fields a `SlurmJob` holds, each followed by
# a unit separator (no job name or admin comment holds one; a name may hold "|"), times as Unix
# seconds (SLURM_TIME_FORMAT). 22.05's squeue prints "JobID" as the record's own id (an array
# task's too), "exit_code" as the wait status, as its JSON does.
LEAN_FIELDS = ("JobID", "ArrayJobID", "ArrayTaskID", "UserName", "UserID", "GroupID", "State",
               "Partition", "NumCPUs", "NumNodes", "SubmitTime", "StartTime", "EndTime",
               "EligibleTime", "TimeLimit", "exit_code", "Reason", "Name", "admin_comment")
_SEPARATOR = "\x1f"
SQUEUE_LEAN = ("env", "SLURM_TIME_FORMAT=%s", "squeue", "--noheader", "--states=all",
               "--Format=" + ",".join(f"{field}:{_SEPARATOR}" for field in LEAN_FIELDS))
LISTINGS = ("lean", "json")
# States in which a job has ended (its end_time is real, not the end its limit allows).
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED",
                          "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
# States in which a job has run (its start_time is real, not a planned start); a job cancelled
# while pending ended without starting: its start_time is 0 and reads as None.
STARTED_STATES = ENDED_STATES | {"RUNNING", "SUSPENDED", "COMPLETING"}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message names the command, its exit code and stderr."""


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """A job as hpcpredict reads it from SLURM. Times are Unix seconds, None when not (yet)
    known; `time_limit_s` is the limit in force (None: no limit)."""

    job_id: int
    user_name: str
    uid: int
    gid: int
    state: str
    partition: str
    name: str
    cpus: int
    nodes: int
    submit_s: int
    start_s: int | None
    end_s: int | None
    time_limit_s: int | None
    admin_comment: str
    exit_code: int | None = None
    eligible_s: int | None = None  # when it became eligible to run (its wait starts there)
    state_reason: str = ""  # why it pends: Priority, Resources, Dependency, JobHeldUser...
    array_job_id: int | None = None  # a task of a job array: the array's id and the task's index
    array_task_id: int | None = None

    @property
    def update_id(self) -> int | str:
        """How ``scontrol update JobId=`` names this job alone. One task of an array keeps the
        array's own id as its job id (22.05 and 24.11: the last task split off), and
        ``JobId=<array id>`` updates *every* task of the array, so a task is named
        ``<array id>_<index>``; any other job by its id."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id


class SlurmBackend(Protocol):
    name: str

    def jobs(self) -> list[SlurmJob]: ...

    def job(self, job_id: int) -> SlurmJob | None: ...

    def set_time_limit(self, job_id: int | str, minutes: int) -> None: ...

    def submit(self, arguments: Sequence[str]) -> int: ...

    def cancel(self, job_id: int) -> None: ...


# ---------------------------------------------------------------------------- the command line
Runner = Callable[[Sequence[str], float], subprocess.CompletedProcess]


def run_command(command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as error:
        raise SlurmError(f"{command[0]}: not found (is slurm-client installed?)") from error
    except subprocess.TimeoutExpired as error:
        raise SlurmError(f"{' '.join(command)}: no answer in {timeout_s:g} s") from error
    if done.returncode != 0:
        raise SlurmError(f"{_program(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done


def _program(command: Sequence[str]) -> str:
    """The command as an error names it: whole when short (``scontrol update JobId=7
    TimeLimit=5`` says which job), the program alone when long (sacct's options run to 300
    characters and would bury the error the admin needs to read), past any `env VAR=value`."""
    words = list(command)
    if words and words[0] == "env":
        words = [word for word in words[1:] if "=" not in word or word.startswith("-")]
    if not words:
        return "(empty command)"
    text = " ".join(words)
    return text if len(text) <= _SHORT_COMMAND_CHARS else words[0]


_SHORT_COMMAND_CHARS = 80  # one terminal line with the error after it


class CliBackend:
    """The Slurm commands (22.05 and later; ``SLURM_CONF`` from the environment).

    `listing`: how `jobs` asks squeue, "lean" (its fields, `SQUEUE_LEAN`: at 100,000 jobs 9.4 MB
    where the JSON is 295 MB, docs/admin-guide.md "A large site") or "json" (``squeue --json``,
    every field; kept for a squeue whose lean fields differ)."""

    name = "cli"

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, runner: Runner = run_command,
                 listing: str = "lean") -> None:
        if listing not in LISTINGS:
            raise ValueError(f"listing must be one of {', '.join(LISTINGS)}, got {listing!r}")
        self.timeout_s = timeout_s
        self._run = runner
        self.listing = listing
        self._listed: dict[str, SlurmJob] = {}  # the last listing's records (`jobs_from_lean`)

    def jobs(self) -> list[SlurmJob]:
        """Pending, running and recently ended jobs (for MinJobAge), from ``squeue -t all``.

        The states are asked for on every version: a bare ``squeue --json`` lists ended jobs on
        22.05 but not on 24.11 and later ("Zero jobs to dump" with finished jobs inside
        MinJobAge), and the watcher, the corrector's restart and ``replay-slurm`` all need the
        ends (docs/admin-guide.md, "SLURM versions"). ``-t all`` gives the same list on 22.05.
        """
        if self.listing == "lean":
            listed: dict[str, SlurmJob] = {}
            jobs = jobs_from_lean(self._run(SQUEUE_LEAN, self.timeout_s).stdout, self._listed, listed)
            self._listed = listed
            return jobs
        done = self._run(SQUEUE_ALL_JOBS, self.timeout_s)
        try:
            document = json.loads(done.stdout)
        except json.JSONDecodeError as error:
            raise SlurmError(f"{' '.join(SQUEUE_ALL_JOBS)}: not JSON ({error})") from error
        errors = squeue_errors(document)
        if errors:  # e.g. slurmctld down: exit 0 after 9 s, no jobs, and this (22.05, measured)
            raise SlurmError(f"{' '.join(SQUEUE_ALL_JOBS)} answered no jobs but errors: {errors}")
        return [job_from_squeue(entry) for entry in document.get("jobs", [])]

    def job(self, job_id: int) -> SlurmJob | None:
        """One job, by its own id (an array task's record id too); None once SLURM has forgotten
        it. One job's read for slurmctld (``--jobs``), not the whole queue's."""
        if self.listing == "json":
            return next((job for job in self.jobs() if job.job_id == job_id), None)
        try:
            done = self._run((*SQUEUE_LEAN, f"--jobs={int(job_id)}"), self.timeout_s)
        except SlurmError as error:
            if "Invalid job id" in str(error):
                return None
            raise
        return next((job for job in jobs_from_lean(done.stdout) if job.job_id == job_id), None)

    def set_time_limit(self, job_id: int | str, minutes: int) -> None:
        """`job_id`: a job's id, or ``<array id>_<index>`` for one task of an array
        (`SlurmJob.update_id`)."""
        if minutes < 1:
            raise ValueError(f"a time limit is at least 1 minute, got {minutes}")
        if not re.fullmatch(r"\d+(_\d+)?", str(job_id)):
            raise ValueError(f"a job id is N or N_T, got {job_id!r}")
        self._run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={int(minutes)}"], self.timeout_s)

    def submit(self, arguments: Sequence[str]) -> int:
        done = self._run(["sbatch", "--parsable", *arguments], self.timeout_s)
        return int(done.stdout.strip().split(";")[0])

    def cancel(self, job_id: int) -> None:
        self._run(["scancel", str(int(job_id))], self.timeout_s)


def squeue_errors(document: Mapping[str, Any]) -> str:
    """The ``errors`` of a ``squeue --json`` document, in one line ("" when none). With slurmctld
    unreachable, squeue exits 0 and answers ``"jobs": []`` with an error ("slurm_load_jobs: Failed
    while looking for jobs"): read as a list of jobs, that is an empty queue, and everything the
    watcher derives from it (ends, the guard's "nobody waits") would be wrong."""
    found = []
    for error in document.get("errors") or []:
        if isinstance(error, Mapping):
            words = [str(error.get(key)) for key in ("source", "description", "error") if error.get(key)]
            found.append(": ".join(words) or json.dumps(error))
        else:
            found.append(str(error))
    return "; ".join(found)


def _time(value: Any) -> int | None:
    """A squeue time (Unix seconds; 0 or NO_VAL: none). 23.02+ wraps numbers in an object."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    value = int(value)
    return None if value <= 0 or value >= NO_VAL else value


def job_from_squeue(entry: Mapping[str, Any]) -> SlurmJob:
    """One job of ``squeue --json`` (22.05 field names, checked on a real 22.05.8)."""
    state = entry.get("job_state", "")
    if isinstance(state, list):  # 23.02+: a list of flags
        state = state[0] if state else ""
    limit_min = _time(entry.get("time_limit"))
    start_s = _time(entry.get("start_time")) if state in STARTED_STATES else None
    end_s = _time(entry.get("end_time")) if state in ENDED_STATES else None
    return SlurmJob(
        job_id=int(entry["job_id"]),
        user_name=str(entry.get("user_name") or ""),
        uid=int(entry.get("user_id", -1)),
        gid=int(entry.get("group_id", -1)),
        state=str(state),
        partition=str(entry.get("partition") or ""),
        name=str(entry.get("name") or ""),
        cpus=int(_time(entry.get("cpus")) or 1),
        nodes=int(_time(entry.get("node_count")) or 1),
        submit_s=_time(entry.get("submit_time")) or 0,
        start_s=start_s,
        end_s=end_s,
        time_limit_s=None if limit_min is None else 60 * limit_min,
        admin_comment=str(entry.get("admin_comment") or ""),
        exit_code=_exit_status(entry.get("exit_code")),
        eligible_s=_time(entry.get("eligible_time")),
        state_reason=str(entry.get("state_reason") or ""),
        array_job_id=_time(entry.get("array_job_id")),  # 0: not an array
        array_task_id=_index(entry.get("array_task_id")),
    )


def _exit_status(value: Any) -> int | None:
    """squeue's exit code as the wait status (None for 0): 22.05 gives the status itself (exit 3:
    768); 23.02+ an object, ``{"status": [...], "return_code": {number}, "signal": {"id":
    {number}, "name"}}``, made the same status here (`PyslurmBackend` reads the same)."""
    if isinstance(value, Mapping):
        code = _index(value.get("return_code")) or 0
        signal = value.get("signal")
        number = _index(signal.get("id")) if isinstance(signal, Mapping) else None
        return ((code & 0xFF) << 8 | (number or 0)) or None
    return _time(value)


def _index(value: Any) -> int | None:
    """An array task's index (0 included; None, NO_VAL or unset: not a task)."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or value == "":
        return None
    value = int(value)
    return None if value < 0 or value >= NO_VAL else value


def jobs_from_lean(text: str, known: Mapping[str, SlurmJob] | None = None,
                   keep: dict[str, SlurmJob] | None = None) -> list[SlurmJob]:
    """The jobs of `SQUEUE_LEAN`'s output, read as `job_from_squeue` reads the JSON (the same
    `SlurmJob` for the same job: tests/test_slurm_listing.py holds the two equal on a real
    slurmctld).

    A record is a line with one separator per field (a newline inside a job's name or comment
    continues it on the next line; a line without any, which squeue may print before the jobs,
    is no job). `known`: the records of the last listing, line -> job: an unchanged line is that
    same object, not parsed again (most of a large queue does not change in 10 s); `keep`
    receives this listing's, for the next."""
    width = len(LEAN_FIELDS)
    jobs = []
    cut = ""  # the start of a record a newline inside a field has cut
    for line in text.split("\n"):
        if cut:
            line = cut + "\n" + line
        separators = line.count(_SEPARATOR)
        if separators < width:
            cut = line if separators else ""
            continue
        cut = ""
        job = None if known is None else known.get(line)
        if job is None:
            fields = line.split(_SEPARATOR)
            if len(fields) != width + 1 or fields[-1]:
                raise SlurmError(f"squeue's lean listing: a record of {len(fields) - 1} fields, "
                                 f"not {width}: {line[:200]!r}")
            try:
                job = _job_from_fields(fields[:width])
            except ValueError as error:  # a field out of place: not the format asked for
                raise SlurmError(f"squeue's lean listing: a record that is not a job ({error}): "
                                 f"{line[:200]!r}") from error
        if keep is not None:
            keep[line] = job
        jobs.append(job)
    if cut:
        raise SlurmError(f"squeue's lean listing ends inside a record: {cut[:200]!r}")
    return jobs


def _job_from_fields(fields: list[str]) -> SlurmJob:
    (job_id, array_job_id, array_task_id, user_name, uid, gid, state, partition, cpus, nodes,
     submit, start, end, eligible, limit, exit_code, reason, name, admin_comment) = fields
    state = state.strip()
    # A job that is no array's shows its own id as ArrayJobID, and N/A as its task; JSON: 0.
    in_array = array_task_id.strip() not in ("N/A", "")
    limit_s = slurm_duration_s(limit)
    return SlurmJob(
        job_id=int(job_id),
        user_name=user_name.strip(),
        uid=int(uid),
        gid=int(gid),
        state=state,
        partition=partition.strip(),
        name=name,
        cpus=_lean_number(cpus) or 1,
        nodes=_lean_number(nodes) or 1,
        submit_s=_lean_number(submit) or 0,
        start_s=_lean_number(start) if state in STARTED_STATES else None,
        end_s=_lean_number(end) if state in ENDED_STATES else None,
        time_limit_s=limit_s if limit_s else None,
        admin_comment="" if admin_comment == "(null)" else admin_comment,
        exit_code=_lean_exit_status(exit_code),
        eligible_s=_lean_number(eligible),
        state_reason=_reason_name(reason),
        array_job_id=_lean_number(array_job_id) if in_array else None,
        array_task_id=_lean_index(array_task_id),
    )


def _reason_name(text: str) -> str:
    """The reason's name, as the JSON gives it: 24.11's and 26.05's squeue print the described
    reason where SLURM holds one ("RaisedSignal:9(Killed)", "ReqNodeNotAvail,
    UnavailableNodes:node1"), 22.05's the name alone (measured on the three)."""
    match = _REASON_NAME.match(text.strip())
    return match.group(0) if match else text.strip()


_REASON_NAME = re.compile(r"[A-Za-z_]+")


def _lean_number(text: str) -> int | None:
    """A lean field's number: None for N/A, (null), or 0 (squeue's "not set", as `_time` reads
    the JSON's)."""
    value = _lean_index(text)
    return value if value else None


def _lean_index(text: str) -> int | None:
    """A lean field's number, 0 included (an array's first task); None for N/A, (null) or a
    range ("1-5": a pending array's tasks, no task of its own)."""
    text = text.strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if value < NO_VAL else None


def _lean_exit_status(text: str) -> int | None:
    """squeue's exit code as the wait status (None for 0): a number (22.05: the status itself)
    or "code:signal"."""
    code, _, signal = text.strip().partition(":")
    if not code.isdigit():
        return None
    status = ((int(code) & 0xFF) << 8 | int(signal)) if signal.isdigit() else int(code)
    return status or None


# ---------------------------------------------------------------------------- pyslurm
# slurm_errno.h's ESLURM_INVALID_JOB_ID (22.05 and 24.11): the job is not (or no longer) there
ESLURM_INVALID_JOB_ID = 2017


class PyslurmBackend:
    """pyslurm's job API: `pyslurm.Jobs.load`, `pyslurm.Job.load`, `Job.modify` with a
    `JobSubmitDescription`, `Job.cancel`. pyslurm 22.5.3 has it beside its old `pyslurm.job()`
    dictionaries, and 24.11 keeps it (checked on both, built from their sources against Debian
    12's Slurm 22.05 and trixie's 24.11: testbed/pyslurm_wheel.py, tests/test_pyslurm_backend.py).

    It reads the same jobs as `CliBackend` and gives the same `SlurmJob` fields (the tests compare
    the two on a real slurmctld), except where libslurm itself words a field other than squeue:

    * `state` is libslurm's job_state_string, which names a job's flag before its base state
      ("COMPLETING" while a job's processes end, "REQUEUED", "CONFIGURING"), as 22.05's squeue
      does; 23.02 and later's squeue lists the base state first ("COMPLETED", "COMPLETING"), which
      `CliBackend` reads. In those few seconds pyslurm sees a completing job not ended yet.
    * `state_reason` is the job's reason, or its description when slurmctld wrote one
      (pyslurm prefers it); squeue gives the reason alone.
    * `exit_code` is the wait status, as 22.05's squeue gives it (the exit code times 256, or
      the signal; 24.11's squeue object is read the same way by `job_from_squeue`), but pyslurm
      reads an exit code of 128 or more as that less 128 (a shell's "killed by signal N").
    * `set_time_limit` of an array's own id sets that record's limit (its tasks not started
      yet), where ``scontrol update JobId=<array id>`` sets every task's.

    Submitting runs sbatch (`CliBackend.submit`): the caller's arguments are sbatch's. When
    slurmctld cannot be reached, every call raises `SlurmError` (never an empty list), as with the
    command line.
    """

    name = "pyslurm"

    def __init__(self, module: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S, runner: Runner = run_command) -> None:
        self._pyslurm = module
        self._cli = CliBackend(timeout_s=timeout_s, runner=runner)
        # the job id of each array task (its update_id "A_T") as last read: Job.modify names a
        # job by its own id, never "A_T" (JobSubmitDescription has no job_id_str)
        self._task_ids: dict[str, int] = {}

    def _rpc(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except self._pyslurm.RPCError as error:
            raise SlurmError(f"pyslurm {what} failed (errno {getattr(error, 'errno', '?')}): {error}") from error

    def jobs(self) -> list[SlurmJob]:
        """Every job slurmctld holds, ended ones within MinJobAge included (``squeue -t all``'s)."""
        loaded = self._rpc("Jobs.load", lambda: self._pyslurm.Jobs.load())
        users: dict[int, str] = {}
        jobs = [self._convert(job, users) for job in loaded.values()]
        self._task_ids = {str(job.update_id): job.job_id for job in jobs if isinstance(job.update_id, str)}
        return jobs

    def job(self, job_id: int) -> SlurmJob | None:
        """The job `job_id` (None when slurmctld has no such job). slurm_load_job answers every
        record of an array or a heterogeneous job asked by its first id, and `Job.load` keeps the
        first of them, which may be another: then the job is found among all of them."""
        try:
            loaded = self._pyslurm.Job.load(int(job_id))
        except self._pyslurm.RPCError as error:
            if getattr(error, "errno", None) == ESLURM_INVALID_JOB_ID:
                return None
            raise SlurmError(f"pyslurm Job.load({job_id}) failed (errno {getattr(error, 'errno', '?')}): {error}") from error
        if int(loaded.id) == int(job_id):
            return self._convert(loaded, {})
        return next((job for job in self.jobs() if job.job_id == int(job_id)), None)

    def set_time_limit(self, job_id: int | str, minutes: int) -> None:
        """`job_id`: a job's id, or ``<array id>_<index>`` for one task of an array
        (`SlurmJob.update_id`), whose own job id is looked up in the last read (read again when
        it is not there). `Job.modify` changes the one record its id names: a task alone, or an
        array's pending record with the tasks not started yet (class doc)."""
        if minutes < 1:
            raise ValueError(f"a time limit is at least 1 minute, got {minutes}")
        if not re.fullmatch(r"\d+(_\d+)?", str(job_id)):
            raise ValueError(f"a job id is N or N_T, got {job_id!r}")
        target = self._record_id(str(job_id))
        changes = self._pyslurm.JobSubmitDescription(time_limit=int(minutes))
        self._rpc(f"Job({job_id}).modify(time_limit={int(minutes)})",
                  lambda: self._pyslurm.Job(target).modify(changes))

    def _record_id(self, job_id: str) -> int:
        if "_" not in job_id:
            return int(job_id)
        if job_id not in self._task_ids:
            self.jobs()  # a task started since the last read
        if job_id not in self._task_ids:
            raise SlurmError(f"no array task {job_id} (a task not started yet is its array's pending "
                             "record, named by the array's id)")
        return self._task_ids[job_id]

    def submit(self, arguments: Sequence[str]) -> int:
        """sbatch's `arguments`, by sbatch (`CliBackend.submit`)."""
        return self._cli.submit(arguments)

    def cancel(self, job_id: int) -> None:
        self._rpc(f"Job({job_id}).cancel", lambda: self._pyslurm.Job(int(job_id)).cancel())

    @staticmethod
    def _convert(job: Any, users: dict[int, str]) -> SlurmJob:
        """One `pyslurm.Job` as `job_from_squeue` reads squeue's record of it (times of 0 or
        NO_VAL and limits of NO_VAL or INFINITE are None in pyslurm already)."""
        state = str(job.state or "")
        uid = int(job.user_id)
        if uid not in users:
            users[uid] = _user_name(uid)
        limit_min = job.time_limit
        array_id = job.array_id or None
        task = job.array_task_id
        if array_id is not None and task is None and not job.array_tasks_waiting:
            task = 0  # pyslurm reads a task index of 0 as unset; an array's pending record lists its tasks
        return SlurmJob(
            job_id=int(job.id),
            user_name=users[uid],
            uid=uid,
            gid=int(job.group_id),
            state=state,
            partition=str(job.partition or ""),
            name=str(job.name or ""),
            cpus=int(job.cpus or 1),
            nodes=int(job.num_nodes or 1),
            submit_s=_seconds(job.submit_time) or 0,
            start_s=_seconds(job.start_time) if state in STARTED_STATES else None,
            end_s=_seconds(job.end_time) if state in ENDED_STATES else None,
            time_limit_s=60 * int(limit_min) if isinstance(limit_min, int) and limit_min > 0 else None,
            admin_comment=str(job.admin_comment or ""),
            exit_code=_wait_status(job.exit_code, job.exit_code_signal),
            eligible_s=_seconds(job.eligible_time),
            state_reason=str(job.state_reason or ""),
            array_job_id=int(array_id) if array_id is not None else None,
            array_task_id=int(task) if task is not None else None,
        )


def _seconds(value: Any) -> int | None:
    """A pyslurm time (None when unset) as `_time` reads squeue's."""
    return _time(value) if isinstance(value, int) else None


def _wait_status(code: Any, signal: Any) -> int | None:
    """The wait status from pyslurm's exit code and signal (0: None, as squeue's 0)."""
    status = (int(code or 0) << 8) | int(signal or 0)
    return status or None


def _user_name(uid: int) -> str:
    """The name of `uid` as squeue shows it (the system's; "" when it has none)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return ""


# ---------------------------------------------------------------------------- selection
def installed_slurm_version(runner: Runner = run_command) -> str | None:
    """``scontrol --version`` ("slurm 22.05.8" / "slurm-wlm 22.05.8") -> "22.05.8". Without a
    slurm.conf it can find, Slurm 22.05's scontrol fails even to print its version (it looks for
    the controllers first; measured), so the daemons' ``-V``, which read no configuration, are asked
    next (the daemon runs on the slurmctld host)."""
    for command in (["scontrol", "--version"], ["slurmctld", "-V"], ["slurmd", "-V"]):
        try:
            text = runner(command, 10.0).stdout
        except SlurmError:
            continue
        match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
        if match:
            return match.group(0)
    return None


def _major_minor(version: str | None) -> tuple[int, int] | None:
    """"22.05.8" -> (22, 5), and pyslurm's "22.5.3" -> (22, 5): pyslurm drops Slurm's zero."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def select_backend(
    prefer: str = "auto",
    *,
    importer: Callable[[str], Any] | None = None,
    runner: Runner = run_command,
) -> SlurmBackend:
    """`prefer` "cli", "pyslurm" (an error if unusable) or "auto" (pyslurm if it matches).

    pyslurm matches when its major.minor equals the installed Slurm's (pyslurm 24.11.x for
    Slurm 24.11.y, 22.5.x for 22.05.y): a mismatched pyslurm talks a different RPC protocol
    version, or does not load at all.
    """
    if prefer not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"backend must be auto, cli or pyslurm, got {prefer!r}")
    if prefer == "cli":
        return CliBackend(runner=runner)
    importer = importer or import_pyslurm
    reason = _pyslurm_unusable(importer, runner)
    if reason is None:
        return PyslurmBackend(importer("pyslurm"), runner=runner)
    if prefer == "pyslurm":
        raise SlurmError(f"pyslurm backend unusable: {reason}")
    logger.info("SLURM backend: command line (%s)", reason)
    return CliBackend(runner=runner)


# Where libslurm looks for slurm.conf when SLURM_CONF is not set: Debian's path, then the copy a
# configless slurmd keeps (it would then ask DNS, which a test host or a site without SRV records
# answers with a fatal error)
SLURM_CONF_PATHS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf")


def import_pyslurm(name: str = "pyslurm") -> Any:
    """``import pyslurm``, but only where it can read a slurm.conf: its import calls
    slurm_init(), which ends the whole process (libslurm's fatal(), exit 1, after retrying for
    60 s when SLURM_CONF names a missing file; measured with 22.5.3) when it finds none. Without
    one, an ImportError saying so instead."""
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    configured = os.environ.get("SLURM_CONF")
    candidates = [configured] if configured else list(SLURM_CONF_PATHS)
    if not any(os.access(path, os.R_OK) for path in candidates):
        raise ImportError(f"no slurm.conf to read ({' or '.join(candidates)}): importing pyslurm "
                          "would end this process")
    return importlib.import_module(name)


def _pyslurm_unusable(importer: Callable[[str], Any], runner: Runner) -> str | None:
    """Why pyslurm cannot serve here (None: it can). Its installed version is read first from
    its metadata, without importing it: the import loads libslurm and slurm.conf, and a pyslurm of
    another Slurm fails there (its libslurm is not this one) or talks the wrong protocol."""
    slurm = installed_slurm_version(runner)
    declared = _distribution_version("pyslurm")
    if declared is not None and slurm is not None and _major_minor(declared) != _major_minor(slurm):
        return f"pyslurm {declared} does not match Slurm {slurm}"
    try:
        module = importer("pyslurm")
    except ImportError as error:
        if declared is None or isinstance(error, ModuleNotFoundError) and error.name == "pyslurm":
            return "pyslurm is not installed (pip install 'hpcpredict[pyslurm]' where Slurm matches)"
        return f"pyslurm {declared} is installed but does not load: {error}"
    version = getattr(module, "__version__", None)
    if slurm is None:
        return "the installed Slurm version is unknown (scontrol --version failed)"
    if _major_minor(version) != _major_minor(slurm):
        return f"pyslurm {version} does not match Slurm {slurm}"
    return None


def _distribution_version(name: str) -> str | None:
    """The version of the installed distribution `name` (None: not installed), from its metadata."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
