"""``hpcpredict slurm-convert``: a site's SLURM history as an SWF log, to simulate and to train on.

Three sources:

* SLURM accounting (``sacct``, through slurmdbd): what most sites keep. The time limit there is
  the job's *final* one; where hpcpredict's plugin lowered it, the job's AdminComment mark
  (`hpcpredict.slurm.tag`) holds the user's original request, and that is what is written;
* the records of ``JobCompType=jobcomp/filetxt`` (one ``key=value`` line per finished job;
  checked on Slurm 22.05.8), for sites without accounting. They hold the final limit and no
  AdminComment: with hpcpredict's plugin lowering limits, prefer another source;
* the hpcpredict daemon's own database (``--db``): every job reported to it, with the user's
  original request (from the plugin's ``admin_comment`` mark) and the true runtime.

SWF mapping: user and group ids are the Unix uid/gid (so a model trained on the output meets
the live users, ``hpcpredict train``); requested time is the request in seconds (-1 unlimited);
processors the CPUs; status 1 completed, 0 failed/timeout, 5 cancelled; partitions and job
names are numbered by first appearance and listed in the header. Times count from the first
submission (``UnixStartTime``), read in the host's time zone (``TimeZoneString``).
"""

from __future__ import annotations

import os
import shutil
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from hpcpredict.slurm.adapter import Runner, SlurmError, run_command
from hpcpredict.slurm.tag import parse_tag, request_s
from hpcpredict.logs.swf import MISSING, SwfRecord

_STATUS = {"COMPLETED": 1, "CANCELLED": 5}  # everything else that ended: 0 (failed)
_USER = re.compile(r"^(?P<name>[^()]*)\((?P<id>-?\d+)\)$")


class ConvertError(ValueError):
    """A history record that cannot be read (the message names the file and line)."""


@dataclass(frozen=True, slots=True)
class HistoryJob:
    job_id: int
    uid: int
    gid: int
    state: str
    partition: str
    name: str
    cpus: int  # allocated (0 if it never ran)
    requested_cpus: int
    submit_s: int
    start_s: int | None  # None: never started
    end_s: int
    requested_s: int | None  # None: no limit


# ---------------------------------------------------------------------------- jobcomp/filetxt
def read_jobcomp_filetxt(path: str | os.PathLike[str]) -> Iterator[HistoryJob]:
    with open(path, encoding="utf-8", errors="replace") as stream:
        for line_no, line in enumerate(stream, 1):
            if line.strip():
                try:
                    yield _filetxt_job(line)
                except (KeyError, ValueError) as error:
                    raise ConvertError(f"{path}:{line_no}: not a jobcomp/filetxt record ({error})") from None


def _filetxt_job(line: str) -> HistoryJob:
    fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
    uid, gid = _id(fields["UserId"]), _id(fields["GroupId"])
    start = _local_time(fields["StartTime"])
    end = _local_time(fields["EndTime"])
    cpus = int(fields.get("ProcCnt", "0"))
    tres = dict(item.split("=", 1) for item in fields.get("Tres", "").split(",") if "=" in item)
    never_ran = cpus == 0 or fields.get("NodeList") in ("(null)", "")
    limit = fields.get("TimeLimit", "UNLIMITED")
    return HistoryJob(
        job_id=int(fields["JobId"]),
        uid=uid,
        gid=gid,
        state=fields["JobState"],
        partition=fields.get("Partition", ""),
        name=fields.get("Name", ""),
        cpus=cpus,
        requested_cpus=int(tres.get("cpu", cpus or 1)),
        submit_s=_local_time(fields["SubmitTime"]) or start or end or 0,
        start_s=None if never_ran else start,
        end_s=end or 0,
        requested_s=None if limit in ("UNLIMITED", "Partition_Limit") else request_s(None, 60 * int(limit)),
    )


def _id(text: str) -> int:
    match = _USER.match(text)
    if match is None:
        raise ValueError(f"expected name(id), got {text!r}")
    return int(match.group("id"))


def _local_time(text: str) -> int | None:
    if text in ("Unknown", "unknown", "None", "(null)", ""):
        return None
    return int(datetime.fromisoformat(text).timestamp())  # naive: the host's local time


# ---------------------------------------------------------------------------- sacct
SACCT_FIELDS = (
    "JobIDRaw", "UID", "GID", "State", "Partition", "AllocCPUS", "ReqCPUS", "Submit", "Start", "End",
    "TimelimitRaw", "NodeList", "JobName", "AdminComment",
)
# Every state a job can end in (sacct --helpformat / man sacct, 22.05): finished jobs only.
SACCT_ENDED_STATES = "BF,CA,CD,DL,F,NF,OOM,PR,TO"
# The unit separator: unlike '|', no job name or comment holds it.
SACCT_DELIMITER = "\x1f"
SACCT_TIMEOUT_S = 600.0  # a year of a large site's accounting takes a while


def sacct_command(starttime: str, endtime: str = "now") -> list[str]:
    """The sacct call: one line per job allocation (-X) of every user, ended in the window.

    ``SLURM_TIME_FORMAT=standard`` pins the time format a site may have changed (ISO 8601 in
    the host's local time, as jobcomp/filetxt writes it).
    """
    return [
        "env", "SLURM_TIME_FORMAT=standard",
        "sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
        f"--delimiter={SACCT_DELIMITER}", f"--starttime={starttime}", f"--endtime={endtime}",
        f"--state={SACCT_ENDED_STATES}", f"--format={','.join(SACCT_FIELDS)}",
    ]


def read_sacct(
    starttime: str, endtime: str = "now", *, runner: Runner = run_command
) -> Iterator[HistoryJob]:
    """The jobs that ended between `starttime` and `endtime` (sacct's time syntax)."""
    if runner is run_command and shutil.which("sacct") is None:
        # Checked here: through `env`, a missing sacct is env's exit 127 and a long command line.
        raise ConvertError("sacct: command not found (install slurm-client, or use --jobcomp FILE)")
    try:
        output = runner(sacct_command(starttime, endtime), SACCT_TIMEOUT_S).stdout
    except SlurmError as error:
        raise ConvertError(f"sacct: {error}") from None
    return parse_sacct(output.splitlines())


def parse_sacct(lines: Iterable[str], source: str = "sacct") -> Iterator[HistoryJob]:
    for line_no, line in enumerate(lines, 1):
        if line.strip():
            try:
                yield _sacct_job(line)
            except (KeyError, ValueError) as error:
                raise ConvertError(
                    f"{source}:{line_no}: expected {len(SACCT_FIELDS)} fields "
                    f"({', '.join(SACCT_FIELDS)}; {error}): {line[:200]!r}"
                ) from None


def _sacct_job(line: str) -> HistoryJob:
    values = line.split(SACCT_DELIMITER)
    if len(values) != len(SACCT_FIELDS):
        raise ValueError(f"got {len(values)} fields")
    fields = dict(zip(SACCT_FIELDS, values))
    start = _local_time(fields["Start"])
    end = _local_time(fields["End"])
    cpus = int(fields["AllocCPUS"] or 0)
    never_ran = start is None or fields["NodeList"] in ("None assigned", "(null)", "")
    tag = parse_tag(fields["AdminComment"])
    limit = fields["TimelimitRaw"]
    if tag is not None:
        requested_s: int | None = tag.request_s  # lowered by hpcpredict: the user's request
    elif limit in ("UNLIMITED", "Partition_Limit", "INVALID", ""):
        requested_s = None
    else:  # SLURM's limit; its backfill's year for a job without one is no request
        requested_s = request_s(None, 60 * int(limit))
    return HistoryJob(
        job_id=int(fields["JobIDRaw"]),
        uid=int(fields["UID"]),
        gid=int(fields["GID"]),
        state=fields["State"].split()[0],  # "CANCELLED by 1000" -> CANCELLED
        partition=fields["Partition"],
        name=fields["JobName"],
        cpus=0 if never_ran else cpus,
        requested_cpus=int(fields["ReqCPUS"] or cpus or 1),
        submit_s=_local_time(fields["Submit"]) or start or end or 0,
        start_s=None if never_ran else start,
        end_s=end or start or 0,
        requested_s=requested_s,
    )


# ---------------------------------------------------------------------------- SWF
def to_swf(
    jobs: Iterable[HistoryJob], *, max_procs: int | None = None, source: str = "SLURM"
) -> tuple[list[str], list[SwfRecord]]:
    """Header lines and records (sorted by submission) for `hpcpredict.logs.swf.write_swf`."""
    ordered = sorted(jobs, key=lambda job: (job.submit_s, job.job_id))
    if not ordered:
        raise ConvertError("no finished job to convert")
    origin = ordered[0].submit_s
    partitions: dict[str, int] = {}
    names: dict[str, int] = {}
    records = []
    for job in ordered:
        partition_id = partitions.setdefault(job.partition, len(partitions) + 1) if job.partition else MISSING
        executable_id = names.setdefault(job.name, len(names) + 1) if job.name else MISSING
        ran = job.start_s is not None
        records.append(
            SwfRecord(
                job_id=job.job_id,
                submit_s=job.submit_s - origin,
                wait_s=max(0, job.start_s - job.submit_s) if ran else MISSING,
                run_s=max(0, job.end_s - job.start_s) if ran else 0,
                allocated_procs=job.cpus if ran else MISSING,
                avg_cpu_s=MISSING,
                used_memory_kb=MISSING,
                requested_procs=job.requested_cpus,
                requested_time_s=MISSING if job.requested_s is None else job.requested_s,
                requested_memory_kb=MISSING,
                status=_STATUS.get(job.state, 0),
                user_id=job.uid,
                group_id=job.gid,
                executable_id=executable_id,
                queue_id=MISSING,
                partition_id=partition_id,
                preceding_job_id=MISSING,
                think_time_s=MISSING,
            )
        )
    procs = max_procs if max_procs is not None else max(job.requested_cpus for job in ordered)
    header = [
        "; Version: 2.2",
        f"; Computer: {source}",
        "; Conversion: hpcpredict slurm-convert (user and group ids are Unix ids)",
        f"; UnixStartTime: {origin}",
        f"; TimeZoneString: {local_time_zone()}",
        f"; MaxJobs: {len(records)}",
        f"; MaxRecords: {len(records)}",
        f"; MaxProcs: {procs}",
        *(f"; Partition: {number} {name}" for name, number in partitions.items()),
    ]
    if max_procs is None:
        header.append("; Note: MaxProcs is the largest job's request (give --procs for the machine's size)")
    return header, records


def local_time_zone() -> str:
    """The host's IANA time zone name (TZ, /etc/timezone, /etc/localtime), else UTC."""
    if os.environ.get("TZ", "").strip(":"):
        return os.environ["TZ"].strip(":")
    timezone_file = Path("/etc/timezone")
    if timezone_file.is_file() and timezone_file.read_text().strip():
        return timezone_file.read_text().strip()
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        target = os.readlink(localtime)
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    return "UTC"
