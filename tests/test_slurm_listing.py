"""The command line backend's lean listing (`SQUEUE_LEAN`, its default) against squeue's JSON,
which it replaced for the watcher's polls: the same `SlurmJob` for every job a site can have,
read from a real slurmctld (22.05 on the host; 24.11 and 26.05 through tests/test_slurm_versions.py's
"rest" group), and one job read alone with ``--jobs``. Without a cluster: the parser on records
as squeue prints them, names with newlines and separators included.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcpredict.slurm.adapter import (
    LEAN_FIELDS,
    CliBackend,
    SlurmError,
    SlurmJob,
    jobs_from_lean,
    run_command,
)
from testbed.slurm_cluster import SlurmCluster, wait_for

SEPARATOR = "\x1f"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    """Two nodes (a heterogeneous job's components run one on each), a backfill pass every 2 s."""
    slurm = SlurmCluster(nodes=2, node_cpus=4, extra_config=["SchedulerParameters=bf_interval=2"])
    slurm.start_or_skip()
    yield slurm
    slurm.cleanup()


class Recording:
    """`run_command` that keeps the commands it ran (the cluster's SLURM_CONF in the environment)."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
        self.commands.append(list(command))
        env_command = ["env", f"SLURM_CONF={self.cluster.conf}", *command]
        return run_command(env_command, timeout_s)


def reads(cluster: SlurmCluster) -> tuple[CliBackend, CliBackend, Recording]:
    runner = Recording(cluster)
    return CliBackend(runner=runner), CliBackend(listing="json", runner=runner), runner


def differences(json_read: SlurmJob, lean_read: SlurmJob) -> dict[str, tuple[object, object]]:
    return {field.name: (getattr(json_read, field.name), getattr(lean_read, field.name))
            for field in dataclasses.fields(SlurmJob)
            if getattr(json_read, field.name) != getattr(lean_read, field.name)}


@pytest.mark.slurm
def test_the_lean_listing_reads_every_kind_of_job_as_the_json_does(cluster: SlurmCluster) -> None:
    lean, json_backend, _ = reads(cluster)
    submitted = {
        "held": lean.submit(["--hold", "--time=5", "-n", "3", "-J", "held | job", "-o", "/dev/null",
                             "--wrap", "sleep 30"]),
        "running": lean.submit(["--time=10", "-n", "2", "-J", "running", "-o", "/dev/null",
                                "--wrap", "sleep 120"]),
        "failed": lean.submit(["--time=3", "-o", "/dev/null", "--wrap", "exit 3"]),
        "killed": lean.submit(["--time=3", "-o", "/dev/null", "--wrap", "kill -9 $$"]),
        "completed": lean.submit(["--time=3", "-o", "/dev/null", "--wrap", "true"]),
        "no limit": lean.submit(["--hold", "-o", "/dev/null", "--wrap", "sleep 30"]),
        "held array": lean.submit(["--hold", "--array=1-5", "--time=4", "-o", "/dev/null", "--wrap", "sleep 30"]),
        "running array": lean.submit(["--array=0-1", "--time=4", "-o", "/dev/null", "--wrap", "sleep 120"]),
        "heterogeneous": lean.submit(["--time=2", "-n", "1", "-o", "/dev/null", ":", "-n", "1", "--time=3",
                                      "--wrap", "sleep 120"]),
    }
    cluster.run(["scontrol", "update", f"JobId={submitted['held']}",
                 "AdminComment=hpcpredict:v1|p=60|r=300|t=abc"])

    def settled() -> list[SlurmJob]:
        jobs = json_backend.jobs()
        states = {job.job_id: job.state for job in jobs}
        done = all(states.get(submitted[name]) in ("FAILED", "COMPLETED") for name in ("failed", "killed", "completed"))
        running = states.get(submitted["running"]) == "RUNNING" and sum(
            job.state == "RUNNING" and job.array_job_id == submitted["running array"] for job in jobs) == 2
        return jobs if done and running else []

    wait_for(settled, 60, "the jobs to run and end", cluster)
    for _ in range(10):  # two moments of a live slurmctld: compare reads the JSON agrees with
        before, lean_jobs, after = json_backend.jobs(), lean.jobs(), json_backend.jobs()
        if before == after:
            break
        time.sleep(1)
    by_id = {job.job_id: job for job in after}
    assert sorted(job.job_id for job in lean_jobs) == sorted(by_id)
    for job in lean_jobs:
        assert job == by_id[job.job_id], differences(by_id[job.job_id], job)
    # What the comparison covered, so that a read that drops a kind cannot pass unseen.
    kinds = {(job.state, job.array_task_id is not None, job.time_limit_s is None) for job in lean_jobs}
    assert {("PENDING", False, True), ("RUNNING", True, False), ("FAILED", False, False),
            ("COMPLETED", False, False)} <= kinds
    held = next(job for job in lean_jobs if job.job_id == submitted["held"])
    assert (held.name, held.admin_comment, held.cpus) == ("held | job", "hpcpredict:v1|p=60|r=300|t=abc", 3)
    assert {job.exit_code for job in lean_jobs if job.job_id in (submitted["failed"], submitted["killed"])} == {
        3 << 8, 9}


@pytest.mark.slurm
def test_one_job_is_read_alone(cluster: SlurmCluster) -> None:
    lean, _, runner = reads(cluster)
    job_id = lean.submit(["--hold", "--time=7", "-J", "alone", "-o", "/dev/null", "--wrap", "sleep 30"])
    array_id = lean.submit(["--array=0-1", "--time=4", "-o", "/dev/null", "--wrap", "sleep 60"])
    wait_for(lambda: sum(job.array_job_id == array_id and job.state == "RUNNING" for job in lean.jobs()) == 2,
             60, "the array's two tasks to run", cluster)
    runner.commands.clear()
    job = lean.job(job_id)
    assert job is not None and (job.job_id, job.name, job.time_limit_s) == (job_id, "alone", 420)
    assert runner.commands == [[*runner.commands[0][:-1], f"--jobs={job_id}"]], runner.commands
    tasks = [job for job in lean.jobs() if job.array_job_id == array_id]
    for task in tasks:  # a task by its own record id
        assert lean.job(task.job_id) == task
    assert lean.job(999_999) is None
    cluster.run(["scancel", str(job_id), str(array_id)], check=False)


def lean_text(job: SlurmJob) -> str:
    """`job` as squeue prints it in the lean listing (22.05's words for what is not set)."""
    def number(value: int | None) -> str:
        return "N/A" if value is None else str(value)

    minutes, seconds = divmod(job.time_limit_s or 0, 60)
    values = {
        "JobID": str(job.job_id),
        "ArrayJobID": str(job.array_job_id if job.array_job_id is not None else job.job_id),
        # a pending array's own record shows the range of its tasks
        "ArrayTaskID": ("N/A" if job.array_job_id is None else
                        "1-5" if job.array_task_id is None else str(job.array_task_id)),
        "UserName": job.user_name, "UserID": str(job.uid), "GroupID": str(job.gid),
        "State": job.state, "Partition": job.partition, "NumCPUs": str(job.cpus),
        "NumNodes": str(job.nodes), "SubmitTime": str(job.submit_s), "StartTime": number(job.start_s),
        "EndTime": number(job.end_s), "EligibleTime": number(job.eligible_s),
        "TimeLimit": "UNLIMITED" if job.time_limit_s is None else f"{minutes}:{seconds:02d}",
        "exit_code": str(job.exit_code or 0), "Reason": job.state_reason, "Name": job.name,
        "admin_comment": job.admin_comment or "(null)",
    }
    return "".join(values[field] + SEPARATOR for field in LEAN_FIELDS) + "\n"


TEXT = st.text(st.characters(blacklist_characters=SEPARATOR, blacklist_categories=("Cs",)), max_size=30)
STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "TIMEOUT", "CANCELLED")


@st.composite
def listed_jobs(draw: st.DrawFn) -> SlurmJob:
    state = draw(st.sampled_from(STATES))
    started = state != "PENDING"
    times = st.integers(1, 2_000_000_000)
    array = draw(st.booleans())
    return SlurmJob(
        job_id=draw(st.integers(1, 10**7)), user_name=draw(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)),
        uid=draw(st.integers(0, 70_000)), gid=draw(st.integers(0, 70_000)), state=state,
        partition=draw(st.sampled_from(["debug", "long"])), name=draw(TEXT),
        cpus=draw(st.integers(1, 10_000)), nodes=draw(st.integers(1, 100)), submit_s=draw(times),
        start_s=draw(times) if started else None,
        end_s=draw(times) if state not in ("PENDING", "RUNNING") else None,
        time_limit_s=draw(st.none() | st.integers(1, 10**5).map(lambda m: 60 * m)),
        admin_comment=draw(TEXT.filter(lambda text: text != "(null)")),
        exit_code=draw(st.none() | st.integers(1, 65_535)), eligible_s=draw(st.none() | times),
        state_reason=draw(st.sampled_from(["None", "Priority", "Resources", "JobHeldUser"])),
        array_job_id=draw(st.integers(1, 10**7)) if array else None,
        array_task_id=draw(st.none() | st.integers(0, 1000)) if array else None,
    )


@given(st.lists(listed_jobs(), max_size=8))
def test_the_parser_reads_back_every_job_printed(jobs: list[SlurmJob]) -> None:
    """Names and comments with "|", spaces or newlines, task 0, a pending array's record."""
    text = "".join(lean_text(job) for job in jobs)
    assert jobs_from_lean(text) == jobs


def test_a_line_before_the_jobs_is_skipped_and_a_broken_record_refused() -> None:
    job = SlurmJob(7, "alice", 1000, 1000, "RUNNING", "debug", "two\nlines", 4, 1, 100, 160, None, 3600,
                   "", None, 100, "None")
    assert jobs_from_lean("squeue: warning: a warning\n" + lean_text(job) + "\n") == [job]
    with pytest.raises(SlurmError, match="not a job"):
        jobs_from_lean(lean_text(job).replace(f"{SEPARATOR}1000{SEPARATOR}", f"{SEPARATOR}x{SEPARATOR}", 1))
    with pytest.raises(SlurmError, match="ends inside a record"):
        jobs_from_lean(lean_text(job)[:40])


def test_an_unchanged_record_is_the_same_job_not_read_again() -> None:
    first, second = (SlurmJob(k, "alice", 1000, 1000, "PENDING", "debug", "x", 1, 1, 100, None, None, 600,
                              "", None, None, "Priority") for k in (1, 2))
    listed: dict[str, SlurmJob] = {}
    jobs = jobs_from_lean(lean_text(first) + lean_text(second), None, listed)
    again: dict[str, SlurmJob] = {}
    changed = dataclasses.replace(second, state_reason="Resources")
    later = jobs_from_lean(lean_text(first) + lean_text(changed), listed, again)
    assert later[0] is jobs[0] and later[1] == changed and later[1] is not jobs[1]
    assert list(again.values()) == later


def test_a_code_and_signal_exit_is_the_wait_status() -> None:
    job = SlurmJob(8, "bob", 1001, 1001, "FAILED", "debug", "x", 1, 1, 100, 110, 120, 600, "", 3 << 8, 100, "None")
    assert jobs_from_lean(lean_text(job).replace(f"{SEPARATOR}768{SEPARATOR}", f"{SEPARATOR}3:0{SEPARATOR}")) == [job]
