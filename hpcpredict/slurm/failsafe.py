"""The failsafe: every limit hpcpredict lowered goes back to its request once the watcher is gone.

In ``mode=lower`` the lowered limit is SLURM's kill time, and only the daemon's watcher raises it
before a job reaches it (`watcher.py`, `corrector.py`). The E-Loss predicts short on purpose, so at
any moment most running lowered jobs depend on it: with the daemon killed and kept down 8
minutes, 25 of 29 lowered jobs ended TIMEOUT before their request. The failsafe is what
does not share the daemon's fate: its own process and systemd unit (deploy/hpcpredict-failsafe.
service), no model, no store, no numpy; only SLURM's commands, the marks job_submit.lua leaves
in ``admin_comment`` (`tag.py`) and the watcher's heartbeat file (`heartbeat.py`).

Every `interval_s` it reads the heartbeat. While it is no older than `stale_after_s`, it does
nothing else (no SLURM command: its cost on a healthy cluster is one small file read). Once it is
older, or missing, or unreadable, it lists the jobs hpcpredict lowered (one lean ``squeue``) and
puts every one whose limit is below its request back at its request (``scontrol update`` in
batches), the jobs with the least time left first, and does so again at each look until the
heartbeat is fresh: a job that starts, or a limit someone lowers meanwhile, is caught at the next.

Why the bound is safe: after a look at SLURM in which the watcher wrote its heartbeat, every
running lowered job has more than the correction margin (120 s) left, and a pending one starts with
at least the plugin's least limit, one minute (`LEAST_LOWERED_LIMIT_S`). So a failsafe that acts
within `stale_after_s` + `interval_s` (40 + 5 s by default) of the last heartbeat, plus its own
squeue and scontrol time, reaches every job before SLURM would kill it; `FailsafeConfig.check`
refuses settings that break that budget.

What it changes, and only that (the same promises as the watcher's): only jobs whose mark says the
plugin lowered them (``mode=lower``, or an older plugin's mark without a mode); only upward; only
to the request recorded in the mark, never above it. It never lowers anything, so it cannot race
the watcher into killing a job: the worst a watcher that comes back can do is lower a pending job
again (`guard.guard_limit_s`), which is what it would have done anyway.

Meanwhile the plugin does not lower new jobs: the daemon, if it answers at all, answers PREDICT
with ``lower=0 hold=watcher_stale`` while its watcher's last good look is older than the same bound
(`SlurmWatcher.holds_lowering`), and a daemon that does not answer is a plugin that fails open.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpcpredict.paths import state_dir
from hpcpredict.slurm.adapter import Runner, SlurmError, run_command
from hpcpredict.slurm_time import slurm_duration_s
from hpcpredict.slurm.heartbeat import heartbeat_age_s, is_stale, read_heartbeat, write_json_atomically
from hpcpredict.slurm.tag import parse_tag

logger = logging.getLogger(__name__)

DEFAULT_STALE_AFTER_S = 40.0
DEFAULT_INTERVAL_S = 5.0
DEFAULT_TIMEOUT_S = 20.0  # one SLURM command; the budget below counts on it
# The least limit job_submit.lua sets: a prediction in whole minutes, at least one.
LEAST_LOWERED_LIMIT_S = 60
# What the failsafe's own commands may take, within that minute: a lean squeue at 100,000 jobs in
# the controller took 2 s, a batched scontrol update ~0.1 s (docs/admin-guide.md, "The failsafe").
COMMAND_ALLOWANCE_S = 10.0
BATCH = 100  # jobs per ``scontrol update JobId=a,b,c``: one RPC each, a short command line

# One line per job: the id scontrol takes (array tasks as A_T), the state, the limit, the time
# used, the mark last (the only field that could hold the separator). ``-r``: one line per array
# task, pending ones included. States in which a limit can still kill the job, or will.
LIST_LOWERED = ("squeue", "-h", "-r", "-t", "PENDING,RUNNING,SUSPENDED,CONFIGURING",
                "-O", "JobArrayID:|,State:|,TimeLimit:|,TimeUsed:|,admin_comment:")
RUNNING_STATES = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING"})
# What scontrol says of a job that ended between the listing and the update: nothing to restore.
_GONE = re.compile(r"invalid job id|already (?:completed|finished)|job has already finished", re.I)


class FailsafeConfigError(ValueError):
    """A [failsafe] setting that cannot be used; the message names the key."""


def _default_heartbeat() -> str:
    return str(state_dir() / "watcher.heartbeat")


def _default_status() -> str:
    return str(state_dir() / "failsafe.status")


@dataclass(frozen=True)
class FailsafeConfig:
    """The ``[failsafe]`` section of daemon.toml: read by the failsafe, and by the daemon (its
    watcher writes `heartbeat`, PREDICT holds lowering past `stale_after_s`, /health reads
    `status`). Defaults in the daemon's state folder, as its other files."""

    heartbeat: str = field(default_factory=_default_heartbeat)
    status: str = field(default_factory=_default_status)
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    interval_s: float = DEFAULT_INTERVAL_S

    def check(self) -> FailsafeConfig:
        for key in ("heartbeat", "status"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise FailsafeConfigError(f"[failsafe] {key}: expected a file path, got {getattr(self, key)!r}")
        for key in ("stale_after_s", "interval_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise FailsafeConfigError(f"[failsafe] {key}: expected a number of seconds above 0, got {value!r}")
        reach_s = self.stale_after_s + self.interval_s + COMMAND_ALLOWANCE_S
        if reach_s >= LEAST_LOWERED_LIMIT_S:
            raise FailsafeConfigError(
                f"[failsafe] stale_after_s ({self.stale_after_s:g}) + interval_s ({self.interval_s:g}) "
                f"+ {COMMAND_ALLOWANCE_S:g} s for its own SLURM commands must stay below "
                f"{LEAST_LOWERED_LIMIT_S} s, the least limit the plugin sets: a job lowered to one "
                "minute that starts just after the watcher's last look must be restored before it")
        return self

    @classmethod
    def from_section(cls, section: Mapping[str, Any], where: str) -> FailsafeConfig:
        """From a parsed ``[failsafe]`` table; errors name `where` (the file)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(section) - known
        if unknown:
            raise FailsafeConfigError(f"{where}: unknown key(s) {sorted(unknown)} in [failsafe]; known: {sorted(known)}")
        try:
            return cls(**section).check()
        except FailsafeConfigError as error:
            raise FailsafeConfigError(f"{where}: {error}") from None


def load_failsafe_config(path: str | os.PathLike[str] | None) -> FailsafeConfig:
    """The ``[failsafe]`` section of the daemon's TOML file (the defaults when None or absent),
    read with tomllib alone: the failsafe imports nothing of the daemon's configuration."""
    if path is None:
        return FailsafeConfig().check()
    import tomllib

    try:
        with Path(path).open("rb") as stream:
            data = tomllib.load(stream)
    except OSError as error:
        raise FailsafeConfigError(f"{path}: cannot read the configuration ({error.strerror})") from error
    except tomllib.TOMLDecodeError as error:
        raise FailsafeConfigError(f"{path}: not valid TOML ({error})") from error
    section = data.get("failsafe", {})
    if not isinstance(section, dict):
        raise FailsafeConfigError(f"{path}: [failsafe] must be a table")
    return FailsafeConfig.from_section(section, str(path))


# ---------------------------------------------------------------------------- reading SLURM
@dataclass(frozen=True, slots=True)
class LoweredJob:
    """A job hpcpredict lowered whose limit is below its request, as the lean listing shows it."""

    update_id: str  # the id ``scontrol update JobId=`` takes (array tasks as A_T)
    state: str
    limit_s: int
    used_s: int
    request_s: int

    @property
    def left_s(self) -> int:
        """Time before SLURM kills it at this limit: from now if running, from its start if not."""
        return self.limit_s - self.used_s if self.state in RUNNING_STATES else self.limit_s


def parse_lowered(text: str) -> list[LoweredJob]:
    """The jobs of `LIST_LOWERED`'s output that hpcpredict lowered below their request: a mark
    in lower mode (or an older plugin's, without a mode), and a limit below the mark's request.
    Lines that are not a job (a warning squeue printed) are skipped."""
    jobs = []
    for line in text.splitlines():
        fields = line.split("|", 4)
        if len(fields) != 5:
            continue
        update_id, state, limit, used, comment = (field.strip() for field in fields)
        tag = parse_tag(comment)
        if tag is None or tag.mode == "record" or not re.fullmatch(r"\d+(_\d+)?", update_id):
            continue
        limit_s, used_s = slurm_duration_s(limit), slurm_duration_s(used)
        if limit_s is None or limit_s >= tag.request_s:
            continue
        jobs.append(LoweredJob(update_id, state, limit_s, used_s or 0, tag.request_s))
    return jobs


def list_lowered(runner: Runner = run_command, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[LoweredJob]:
    return parse_lowered(runner(LIST_LOWERED, timeout_s).stdout)


# ---------------------------------------------------------------------------- restoring
@dataclass
class Restoration:
    """What one pass of `restore` did."""

    restored: list[LoweredJob] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def running(self) -> int:
        return sum(job.state in RUNNING_STATES for job in self.restored)


def restore_order(jobs: Iterable[LoweredJob]) -> list[list[LoweredJob]]:
    """The batches `restore` sends, most urgent first: one request (``TimeLimit=``) per batch, at
    most `BATCH` jobs, batches in the order of their most urgent job (the least time left)."""
    by_request: dict[int, list[LoweredJob]] = {}
    for job in sorted(jobs, key=lambda job: (job.left_s, job.update_id)):
        by_request.setdefault(job.request_s, []).append(job)
    batches = [group[start:start + BATCH] for group in by_request.values()
               for start in range(0, len(group), BATCH)]
    return sorted(batches, key=lambda batch: batch[0].left_s)


def request_minutes(request_s: int) -> int:
    """The request as scontrol's whole minutes, never above it (the plugin records whole minutes)."""
    return max(1, request_s // 60)


def restore(jobs: Sequence[LoweredJob], runner: Runner = run_command,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> Restoration:
    """Put every job of `jobs` back at its request. A batch whose scontrol fails only because some
    of its jobs ended meanwhile counts the others as restored; any other failure is reported and
    its jobs are tried again at the next pass (they are still below their request)."""
    done = Restoration()
    for batch in restore_order(jobs):
        command = ["scontrol", "update", "JobId=" + ",".join(job.update_id for job in batch),
                   f"TimeLimit={request_minutes(batch[0].request_s)}"]
        try:
            runner(command, timeout_s)
        except SlurmError as error:
            problems = [line for line in str(error).split(":", 1)[-1].splitlines()
                        if line.strip() and not _GONE.search(line)]
            if problems:
                done.errors.append(str(error))
                continue
        done.restored.extend(batch)
    return done


# ---------------------------------------------------------------------------- the loop
@dataclass
class FailsafeStatus:
    """What the failsafe last saw and did, written to `FailsafeConfig.status` at every look (the
    daemon's /health and /metrics read it; an admin can cat it)."""

    time_s: float = 0.0
    pid: int = 0
    # watching (heartbeat fresh) | restoring (stale: lowered limits put back) | idle (stale, and no
    # job lowered below its request: record mode, or no watcher ever ran)
    state: str = "starting"
    heartbeat_age_s: float | None = None
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    looks: int = 0
    restored_total: int = 0  # limits put back since the failsafe started
    lowered_left: int = 0  # jobs still below their request after the last restoring look
    stale_since_s: float | None = None
    last_restore_s: float | None = None
    errors: int = 0
    last_error: str = ""


def write_status(path: str | os.PathLike[str], status: FailsafeStatus) -> None:
    write_json_atomically(path, asdict(status))


def read_status(path: str | os.PathLike[str]) -> FailsafeStatus | None:
    """The failsafe's last status, or None (no failsafe has run, or the file is not one)."""
    try:
        data = json.loads(Path(path).read_text())
        return FailsafeStatus(**data)
    except (OSError, ValueError, TypeError):
        return None


class Failsafe:
    """`look()` once; `run(stop)` every `interval_s` until `stop` is set."""

    def __init__(self, config: FailsafeConfig, *, runner: Runner = run_command,
                 timeout_s: float = DEFAULT_TIMEOUT_S, clock: Any = time.time) -> None:
        self.config = config
        self.runner = runner
        self.timeout_s = timeout_s
        self.clock = clock
        self.status = FailsafeStatus(pid=os.getpid(), stale_after_s=config.stale_after_s)

    def look(self) -> FailsafeStatus:
        status = self.status
        now_s = self.clock()
        age_s = heartbeat_age_s(read_heartbeat(self.config.heartbeat), now_s)
        status.time_s, status.heartbeat_age_s, status.looks = now_s, age_s, status.looks + 1
        if not is_stale(age_s, self.config.stale_after_s):
            if status.state == "restoring":
                logger.info("the watcher's heartbeat is fresh again (%.0f s old): watching; the watcher "
                            "lowers pending jobs again itself", age_s)
            status.state, status.stale_since_s, status.lowered_left = "watching", None, 0
        else:
            if status.stale_since_s is None:
                status.stale_since_s = now_s
            self._restore_all(age_s)
        self._write_status()
        return status

    def _restore_all(self, age_s: float | None) -> None:
        """A stale heartbeat: every lowered job back at its request. With none lowered (record
        mode, or the watcher never started) the failsafe is "idle", not "restoring": nothing is at
        risk, and the restoring alert stays quiet."""
        status = self.status
        try:
            lowered = list_lowered(self.runner, self.timeout_s)
        except SlurmError as error:
            self._failed(f"cannot list the lowered jobs: {error}")
            self._enter("restoring", age_s)  # unknown: assume the worst
            return
        if not lowered:
            status.lowered_left = 0
            self._enter("idle", age_s)
            return
        self._enter("restoring", age_s)
        done = restore(lowered, self.runner, self.timeout_s)
        for job in done.restored:
            logger.info("job %s (%s, used %d s): time limit %d -> %d min (its request)", job.update_id,
                        job.state.lower(), job.used_s, job.limit_s // 60, request_minutes(job.request_s))
        for error in done.errors:
            self._failed(error)
        status.restored_total += len(done.restored)
        status.lowered_left = len(lowered) - len(done.restored)
        status.last_restore_s = self.clock()
        logger.warning("restored %d limit(s) (%d running, %d pending)%s", len(done.restored), done.running,
                       len(done.restored) - done.running,
                       f"; {status.lowered_left} left for the next look" if status.lowered_left else "")

    def _enter(self, state: str, age_s: float | None) -> None:
        """Said once, at the change: the heartbeat's age, and what the failsafe does about it."""
        if state == self.status.state:
            return
        beat = "missing or unreadable" if age_s is None else f"{age_s:.0f} s old"
        if state == "restoring":
            logger.warning("the watcher's heartbeat is %s (bound %g s): putting every job hpcpredict lowered "
                           "back at its request, and again at each look until it is fresh", beat,
                           self.config.stale_after_s)
        else:
            logger.info("the watcher's heartbeat is %s (bound %g s); no job is below the request its mark "
                        "records: nothing to restore (looking again every %g s)", beat,
                        self.config.stale_after_s, self.config.interval_s)
        self.status.state = state

    def _failed(self, message: str) -> None:
        self.status.errors += 1
        self.status.last_error = message
        logger.error("%s", message)

    def _write_status(self) -> None:
        try:
            write_status(self.config.status, self.status)
        except OSError as error:
            self._failed(f"cannot write the status file {self.config.status}: {error.strerror}")

    def run(self, stop: threading.Event) -> None:
        logger.info("failsafe: watching %s every %g s (stale after %g s)", self.config.heartbeat,
                    self.config.interval_s, self.config.stale_after_s)
        while not stop.is_set():
            began = time.monotonic()
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the failsafe must outlive any one look's bug
                logger.exception("failsafe: the look failed; trying again in %g s", self.config.interval_s)
            stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - began)))
