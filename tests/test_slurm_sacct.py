"""``hpcpredict slurm-convert --sacct``: SLURM accounting to SWF.

The parser on hand-written sacct lines (what Slurm 22.05.8 printed here, fields in
`SACCT_FIELDS` order), then the whole path on a real slurmctld + slurmd + slurmdbd + MariaDB
(testbed/slurm_cluster.py, ``accounting=True``): jobs run, one marked by hpcpredict's plugin, one
cancelled while running, one cancelled before it ran, and the SWF written from sacct.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from testbed.slurm_cluster import SlurmCluster

from hpcpredict.cli import main
from hpcpredict.slurm.adapter import SlurmError
from hpcpredict.slurm.convert import (
    SACCT_DELIMITER,
    SACCT_FIELDS,
    ConvertError,
    parse_sacct,
    read_sacct,
    sacct_command,
)
from hpcpredict.slurm.tag import PredictionTag
from hpcpredict.logs.swf import read_swf


def sacct_line(**fields: str) -> str:
    values = {
        "JobIDRaw": "7", "UID": "1000", "GID": "100", "State": "COMPLETED", "Partition": "debug",
        "AllocCPUS": "4", "ReqCPUS": "4", "Submit": "2026-11-23T03:50:14", "Start": "2026-11-23T03:50:16",
        "End": "2026-11-23T03:51:16", "TimelimitRaw": "5", "NodeList": "node1", "JobName": "a|b",
        "AdminComment": "",
    }
    values.update(fields)
    return SACCT_DELIMITER.join(values[name] for name in SACCT_FIELDS)


def local(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


# ---------------------------------------------------------------------------- the parser
def test_a_finished_job_line() -> None:
    (job,) = parse_sacct([sacct_line()])
    assert (job.job_id, job.uid, job.gid, job.state, job.partition, job.name) == (7, 1000, 100, "COMPLETED", "debug", "a|b")
    assert (job.cpus, job.requested_cpus, job.requested_s) == (4, 4, 300)
    assert (job.submit_s, job.start_s, job.end_s) == (
        local("2026-11-23T03:50:14"), local("2026-11-23T03:50:16"), local("2026-11-23T03:51:16"))


def test_the_plugins_mark_gives_the_original_request() -> None:
    mark = PredictionTag(request_s=3600, prediction_s=600).format()
    (job,) = parse_sacct([sacct_line(TimelimitRaw="10", AdminComment=mark)])
    assert job.requested_s == 3600  # not the lowered 10 minutes


@pytest.mark.parametrize(
    ("fields", "state", "ran", "requested_s"),
    [
        ({"State": "CANCELLED by 0", "NodeList": "None assigned", "AllocCPUS": "0"}, "CANCELLED", False, 300),
        ({"State": "TIMEOUT", "TimelimitRaw": "UNLIMITED"}, "TIMEOUT", True, None),
        ({"State": "FAILED", "TimelimitRaw": "Partition_Limit"}, "FAILED", True, None),
        # the year SLURM's backfill gives a job without a limit when it starts it: no request
        ({"State": "COMPLETED", "TimelimitRaw": "525600"}, "COMPLETED", True, None),
        ({"State": "COMPLETED", "TimelimitRaw": "525600",
          "AdminComment": "hpcpredict:request_s=31536000,prediction_s=600,mode=lower"}, "COMPLETED", True, 31_536_000),
    ],
)
def test_states_limits_and_jobs_that_never_ran(
    fields: dict[str, str], state: str, ran: bool, requested_s: int | None
) -> None:
    (job,) = parse_sacct([sacct_line(**fields)])
    assert (job.state, job.start_s is not None, job.requested_s) == (state, ran, requested_s)
    assert job.cpus == (4 if ran else 0)


def test_an_unreadable_line_is_named() -> None:
    with pytest.raises(ConvertError, match=r"sacct:2: expected 14 fields .*; got 3 fields"):
        list(parse_sacct([sacct_line(), SACCT_DELIMITER.join("123"), sacct_line()]))
    with pytest.raises(ConvertError, match="sacct:1: .*invalid literal"):
        list(parse_sacct([sacct_line(UID="someone")]))


def test_sacct_failing_is_reported() -> None:
    def failing(command: list[str], timeout_s: float) -> subprocess.CompletedProcess:
        assert command == sacct_command("2026-01-01")
        raise SlurmError("sacct failed (exit 1): sacct: error: Problem talking to the database")

    with pytest.raises(ConvertError, match="sacct: .*Problem talking to the database"):
        list(read_sacct("2026-01-01", runner=failing))


def test_one_source_exactly(tmp_path: Path) -> None:
    for args in ([], ["--sacct", "--db", "sqlite:///x.db"]):
        result = CliRunner().invoke(main, ["slurm-convert", *args, "-o", str(tmp_path / "x.swf")])
        assert result.exit_code == 2 and "exactly one source" in result.output


# ---------------------------------------------------------------------------- a real slurmdbd
@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    slurm = SlurmCluster(accounting=True)
    slurm.start_or_skip()
    os.environ["SLURM_CONF"] = str(slurm.conf)  # sacct finds this cluster's slurmdbd
    yield slurm
    os.environ.pop("SLURM_CONF", None)
    slurm.cleanup()


def finished_in_sacct(cluster: SlurmCluster, job_ids: list[int]) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        lines = cluster.run(sacct_command("2020-01-01"), check=False).stdout.splitlines()
        if {int(line.split(SACCT_DELIMITER)[0]) for line in lines} >= set(job_ids):
            break
        time.sleep(0.5)
    return lines


@pytest.mark.slurm
def test_accounting_becomes_a_simulable_swf(cluster: SlurmCluster, tmp_path: Path) -> None:
    marked = cluster.sbatch("--time=1", "-n", "2", script="sleep 2")
    cluster.run(["scontrol", "update", f"JobId={marked}",
                 f"AdminComment={PredictionTag(request_s=600, prediction_s=60).format()}"])
    plain = cluster.sbatch("--time=3", script="sleep 1")
    failed = cluster.sbatch("--time=2", "-n", "3", script="exit 3")
    killed = cluster.sbatch("--time=5", script="sleep 300")
    held = cluster.sbatch("--time=4", "--hold", script="true")
    deadline = time.monotonic() + 30
    while cluster.job_fields(killed)["JobState"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.run(["scancel", str(killed), str(held)])
    submitted = [marked, plain, failed, killed, held]
    assert len(finished_in_sacct(cluster, submitted)) >= len(submitted)

    out = tmp_path / "history.swf"
    result = CliRunner().invoke(main, ["slurm-convert", "--sacct", "--starttime", "now-1hours", "-o", str(out),
                                       "--procs", "16"])
    assert result.exit_code == 0, result.output
    swf = read_swf(out)
    records = {record.job_id: record for record in swf.records}
    assert set(submitted) <= set(records)
    first, second, third, fourth, fifth = (records[job] for job in submitted)
    assert abs(first.run_s - 2) <= 1 and abs(second.run_s - 1) <= 1
    assert [r.requested_time_s for r in (first, second, third, fourth, fifth)] == [600, 180, 120, 300, 240]
    assert [r.status for r in (first, second, third, fourth, fifth)] == [1, 1, 0, 5, 5]
    assert (first.allocated_procs, first.requested_procs, third.requested_procs) == (2, 2, 3)
    assert fifth.run_s == 0 and fifth.wait_s == -1  # cancelled before it ran
    assert first.user_id == os.getuid() and swf.header.max_procs == 16

    simulated = CliRunner().invoke(main, ["simulate", str(out), "--format", "json"])
    assert simulated.exit_code == 0, simulated.output
