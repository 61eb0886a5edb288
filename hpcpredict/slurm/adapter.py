"""One way to talk to SLURM, two backends: the Slurm commands everywhere, pyslurm where it fits.

pyslurm's releases track recent Slurm versions and do not build against older libslurm (Debian 12
ships Slurm 22.05; PyPI's pyslurm is 25.11): design.md. So `select_backend` uses pyslurm only when
it is importable *and* its major.minor equals the installed Slurm's, and otherwise the command
line backend (``squeue --json``, ``scontrol``, ``sbatch --parsable``), which works on 22.05 and
later. The watcher and the tools see only `SlurmBackend`.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)

NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF
DEFAULT_TIMEOUT_S = 30.0
# Every job slurmctld still holds, ended ones included (24.11+ lists ended jobs only when asked).
SQUEUE_ALL_JOBS = ("squeue", "--json", "--states=all")
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
    """The Slurm commands (22.05 and later; ``SLURM_CONF`` from the environment)."""

    name = "cli"

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, runner: Runner = run_command) -> None:
        self.timeout_s = timeout_s
        self._run = runner

    def jobs(self) -> list[SlurmJob]:
        """Pending, running and recently ended jobs (for MinJobAge), from ``squeue --json -t all``.

        The states are asked for on every version: a bare ``squeue --json`` lists ended jobs on
        22.05 but not on 24.11 and later ("Zero jobs to dump" with finished jobs inside
        MinJobAge), and the watcher, the corrector's restart and ``replay-slurm`` all need the
        ends (docs/admin-guide.md, "SLURM versions"). ``-t all`` gives the same list on 22.05.
        """
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
        return next((job for job in self.jobs() if job.job_id == job_id), None)

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
        exit_code=_time(entry.get("exit_code")) if not isinstance(entry.get("exit_code"), Mapping) else None,
        eligible_s=_time(entry.get("eligible_time")),
        state_reason=str(entry.get("state_reason") or ""),
        array_job_id=_time(entry.get("array_job_id")),  # 0: not an array
        array_task_id=_index(entry.get("array_task_id")),
    )


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


# ---------------------------------------------------------------------------- pyslurm
class PyslurmBackend:
    """pyslurm (>= 23.2 API: `pyslurm.Jobs.load`, `Job.modify(JobSubmitDescription)`).

    Used only when its version matches the installed Slurm (`select_backend`); it cannot run on
    this project's test machines (pyslurm does not build against Slurm 22.05), so only its
    selection is tested here.
    """

    name = "pyslurm"

    def __init__(self, module: Any) -> None:
        self._pyslurm = module

    def jobs(self) -> list[SlurmJob]:
        return [self._convert(job) for job in self._pyslurm.Jobs.load().values()]

    def job(self, job_id: int) -> SlurmJob | None:
        try:
            return self._convert(self._pyslurm.Job.load(job_id))
        except self._pyslurm.RPCError:
            return None

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        self._pyslurm.Job(job_id).modify(self._pyslurm.JobSubmitDescription(time_limit=int(minutes)))

    def submit(self, arguments: Sequence[str]) -> int:
        raise SlurmError("submitting is done with the CLI backend (sbatch); pyslurm is for reading and limits")

    def cancel(self, job_id: int) -> None:
        self._pyslurm.Job(job_id).cancel()

    @staticmethod
    def _convert(job: Any) -> SlurmJob:
        limit = getattr(job, "time_limit", None)
        return SlurmJob(
            job_id=int(job.id),
            user_name=str(getattr(job, "user_name", "") or ""),
            uid=int(job.user_id),
            gid=int(job.group_id),
            state=str(job.state),
            partition=str(job.partition or ""),
            name=str(job.name or ""),
            cpus=int(job.cpus or 1),
            nodes=int(getattr(job, "num_nodes", 1) or 1),
            submit_s=int(job.submit_time or 0),
            start_s=int(job.start_time) if job.start_time and job.state in STARTED_STATES else None,
            end_s=int(job.end_time) if job.end_time and job.state in ENDED_STATES else None,
            time_limit_s=None if limit in (None, "UNLIMITED") else 60 * int(limit),
            admin_comment=str(getattr(job, "admin_comment", "") or ""),
            eligible_s=int(getattr(job, "eligible_time", 0) or 0) or None,
            state_reason=str(getattr(job, "state_reason", "") or ""),
        )


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
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def select_backend(
    prefer: str = "auto",
    *,
    importer: Callable[[str], Any] = importlib.import_module,
    runner: Runner = run_command,
) -> SlurmBackend:
    """`prefer` "cli", "pyslurm" (an error if unusable) or "auto" (pyslurm if it matches).

    pyslurm matches when its major.minor equals the installed Slurm's (pyslurm 25.11.x for
    Slurm 25.11.y): a mismatched pyslurm talks a different RPC protocol version.
    """
    if prefer not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"backend must be auto, cli or pyslurm, got {prefer!r}")
    if prefer == "cli":
        return CliBackend(runner=runner)
    reason = _pyslurm_unusable(importer, runner)
    if reason is None:
        return PyslurmBackend(importer("pyslurm"))
    if prefer == "pyslurm":
        raise SlurmError(f"pyslurm backend unusable: {reason}")
    logger.info("SLURM backend: command line (%s)", reason)
    return CliBackend(runner=runner)


def _pyslurm_unusable(importer: Callable[[str], Any], runner: Runner) -> str | None:
    try:
        module = importer("pyslurm")
    except ImportError:
        return "pyslurm is not installed (pip install 'hpcpredict[pyslurm]' where Slurm matches)"
    version = getattr(module, "__version__", None)
    slurm = installed_slurm_version(runner)
    if slurm is None:
        return "the installed Slurm version is unknown (scontrol --version failed)"
    if _major_minor(version) != _major_minor(slurm):
        return f"pyslurm {version} does not match Slurm {slurm}"
    return None
