"""The adapter's pyslurm backend on a real slurmctld, beside the command line backend: the same
jobs, read the same way, changed the same way.

pyslurm is built from ../shared/pyslurm for this Slurm and this Python (testbed/pyslurm_wheel.py:
22.5.3 on the host's 22.05, 24.11.0 in the trixie chroot's 24.11, ``pytest -m slurm --slurm-system
24.11 tests/test_pyslurm_backend.py``), cached, and installed into a folder of this module's
(``pip install --target``) put on sys.path for these tests alone. Where it cannot be built the
tests skip, or fail with HPCPREDICT_REQUIRE_SERVERS=1 (CI).

Every test on the cluster runs on both backends (``backend``) and compares what it reads with
what the other reads (``both``): running, pending and ended jobs, limits set and read back, jobs
without a limit, arrays (a pending array's one record, the tasks of a running one), heterogeneous
jobs, and slurmctld down. Two more check, without a cluster, that `select_backend` never imports
a pyslurm that would end the process or fail: none without a slurm.conf, none of another Slurm.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import skip_or_fail

from hpcpredict.slurm.adapter import (
    CliBackend,
    PyslurmBackend,
    SlurmBackend,
    SlurmError,
    SlurmJob,
    import_pyslurm,
    select_backend,
)
from testbed.slurm_cluster import SlurmCluster, wait_for

BACKENDS = ("cli", "pyslurm")


@pytest.fixture(scope="module")
def pyslurm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The matching pyslurm's wheel (built now if not cached) installed into a private folder."""
    from testbed.pyslurm_wheel import WheelUnavailable, wheel

    try:
        built = wheel(sys.executable, log=lambda line: print(f"pyslurm_wheel: {line}", file=sys.stderr))
    except WheelUnavailable as error:
        skip_or_fail(f"no pyslurm wheel for this Slurm: {error}")
    folder = tmp_path_factory.mktemp("pyslurm")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-index", "--no-deps", "--target", str(folder), str(built)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture(scope="module")
def cluster(pyslurm_folder: Path) -> Iterator[SlurmCluster]:
    """Two nodes, so that a heterogeneous job's components can run (one node each), and a
    backfill pass every 2 s (heterogeneous jobs may wait for one; 30 s by default)."""
    slurm = SlurmCluster(nodes=2, node_cpus=8, extra_config=["SchedulerParameters=bf_interval=2"])
    slurm.start_or_skip()
    os.environ["SLURM_CONF"] = str(slurm.conf)  # both backends find this cluster (pyslurm at import)
    yield slurm
    os.environ.pop("SLURM_CONF", None)
    slurm.cleanup()


@pytest.fixture(scope="module")
def pyslurm(pyslurm_folder: Path, cluster: SlurmCluster) -> Iterator[Any]:
    """pyslurm imported from its folder (after SLURM_CONF: its import reads slurm.conf), and gone
    from sys.path and sys.modules afterwards, so that later tests in this process see no pyslurm."""
    sys.path.insert(0, str(pyslurm_folder))
    try:
        import pyslurm as module
    except ImportError as error:
        sys.path.remove(str(pyslurm_folder))
        pytest.fail(f"the pyslurm built for this Slurm does not import: {error}")
    yield module
    sys.path.remove(str(pyslurm_folder))
    for name in [name for name in sys.modules if name == "pyslurm" or name.startswith("pyslurm.")]:
        del sys.modules[name]


@pytest.fixture
def both(pyslurm: Any, cluster: SlurmCluster) -> Iterator[dict[str, SlurmBackend]]:
    """The two backends on the cluster; every job still there is cancelled afterwards."""
    yield {"cli": CliBackend(), "pyslurm": PyslurmBackend(pyslurm)}
    cluster.run(["scancel", "--user=root"], check=False)
    wait_for(lambda: not cluster.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip(), 60,
             "the test's jobs to go", cluster)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, both: dict[str, SlurmBackend]) -> SlurmBackend:
    return both[request.param]


def the_same_read(both: dict[str, SlurmBackend], job_ids: set[int]) -> dict[int, SlurmJob]:
    """`job_ids` as both backends read them, asserted equal; pyslurm's read. The two reads are
    two moments of a live slurmctld (a pending record's reason changes as it schedules): the
    comparison is of reads between which the CLI's own read did not change, tried for 10 s."""
    def read(name: str) -> dict[int, SlurmJob]:
        return {job.job_id: job for job in both[name].jobs() if job.job_id in job_ids}

    for _ in range(10):
        before, via_pyslurm, after = read("cli"), read("pyslurm"), read("cli")
        if before == after:
            break
        time.sleep(1)
    reads = {"cli": after, "pyslurm": via_pyslurm}
    assert set(reads["pyslurm"]) == set(reads["cli"]) == job_ids, reads
    for job_id in sorted(job_ids):
        cli, via_pyslurm = reads["cli"][job_id], reads["pyslurm"][job_id]
        assert via_pyslurm == cli, differences(cli, via_pyslurm)
    return reads["pyslurm"]


def differences(cli: SlurmJob, via_pyslurm: SlurmJob) -> dict[str, tuple[object, object]]:
    return {field.name: (getattr(cli, field.name), getattr(via_pyslurm, field.name))
            for field in dataclasses.fields(SlurmJob) if getattr(cli, field.name) != getattr(via_pyslurm, field.name)}


def wait_for_state(backend: SlurmBackend, job_ids: set[int], state: str, cluster: SlurmCluster) -> list[SlurmJob]:
    def reached() -> list[SlurmJob]:
        jobs = [job for job in backend.jobs() if job.job_id in job_ids]
        return jobs if len(jobs) == len(job_ids) and all(job.state == state for job in jobs) else []

    return wait_for(reached, 60, f"jobs {sorted(job_ids)} {state}", cluster)


# ---------------------------------------------------------------------------- selection
def a_pyslurm_that_must_not_load(folder: Path, version: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A "pyslurm" of `version` (its metadata) first on sys.path, whose import leaves a mark and
    fails (a real one ends the process without slurm.conf, and fails on another libslurm); this
    module's real one, if imported, out of sys.modules meanwhile. The mark's path."""
    (folder / "pyslurm").mkdir()
    mark = folder / "imported"
    (folder / "pyslurm" / "__init__.py").write_text(f"open({str(mark)!r}, 'w').close()\nraise RuntimeError('imported')\n")
    (folder / f"pyslurm-{version}.dist-info").mkdir()
    (folder / f"pyslurm-{version}.dist-info" / "METADATA").write_text(f"Name: pyslurm\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(folder))
    for name in [name for name in sys.modules if name == "pyslurm" or name.startswith("pyslurm.")]:
        monkeypatch.delitem(sys.modules, name)
    return mark


def test_pyslurm_is_not_imported_without_a_slurm_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its import would read slurm.conf and, finding none, end the daemon (libslurm's fatal();
    measured): without one, the command line, and pyslurm never imported."""
    imported = a_pyslurm_that_must_not_load(tmp_path, "22.5.3", monkeypatch)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-slurm.conf"))
    with pytest.raises(ImportError, match="no slurm.conf"):
        import_pyslurm()
    runner = lambda command, timeout_s: subprocess.CompletedProcess(command, 0, "slurm 22.05.8", "")
    assert isinstance(select_backend("auto", runner=runner), CliBackend)
    with pytest.raises(SlurmError, match="installed but does not load: no slurm.conf"):
        select_backend("pyslurm", runner=runner)
    assert not imported.exists()


def test_a_pyslurm_of_another_slurm_is_not_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its metadata says which Slurm it is for: PyPI's 25.11 on 22.05 is the command line, read
    from the version alone (imported, it would fail on another libslurm)."""
    imported = a_pyslurm_that_must_not_load(tmp_path, "25.11.1", monkeypatch)
    monkeypatch.setenv("SLURM_CONF", "/dev/null")
    runner = lambda command, timeout_s: subprocess.CompletedProcess(command, 0, "slurm-wlm 22.05.8", "")
    assert isinstance(select_backend("auto", runner=runner), CliBackend)
    with pytest.raises(SlurmError, match="pyslurm 25.11.1 does not match Slurm 22.05.8"):
        select_backend("pyslurm", runner=runner)
    assert not imported.exists()


@pytest.mark.slurm
def test_auto_chooses_the_matching_pyslurm(pyslurm: Any, cluster: SlurmCluster) -> None:
    """With the pyslurm of this Slurm importable (22.5.x for 22.05: major.minor compared as
    numbers), "auto" is pyslurm; "cli" is still the command line."""
    version = cluster.run(["scontrol", "--version"]).stdout.split()[-1]
    assert [int(part) for part in pyslurm.__version__.split(".")[:2]] == [int(part) for part in version.split(".")[:2]]
    assert isinstance(select_backend("auto"), PyslurmBackend)
    assert isinstance(select_backend("pyslurm"), PyslurmBackend)
    assert isinstance(select_backend("cli"), CliBackend)


# ---------------------------------------------------------------------------- reads
@pytest.mark.slurm
def test_pending_running_and_ended_jobs(backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster) -> None:
    held = backend.submit(["--hold", "--time=5", "-n", "3", "-J", "held job", "-o", "/dev/null", "--wrap", "sleep 30"])
    running = backend.submit(["--time=10", "-n", "2", "-J", "running", "-o", "/dev/null", "--wrap", "sleep 60"])
    failed = backend.submit(["--time=3", "-o", "/dev/null", "--wrap", "exit 3"])
    began = time.time()
    wait_for_state(backend, {running}, "RUNNING", cluster)
    wait_for_state(backend, {failed}, "FAILED", cluster)

    pending = backend.job(held)
    assert pending is not None
    assert (pending.state, pending.cpus, pending.nodes, pending.time_limit_s, pending.start_s, pending.end_s) == (
        "PENDING", 3, 1, 300, None, None)
    assert (pending.uid, pending.gid, pending.user_name, pending.partition, pending.name) == (0, 0, "root", "debug", "held job")
    assert pending.state_reason == "JobHeldUser" and pending.admin_comment == ""
    assert abs(pending.submit_s - began) < 60
    assert (pending.array_job_id, pending.array_task_id, pending.update_id) == (None, None, held)

    job = backend.job(running)
    assert (job.state, job.cpus, job.time_limit_s, job.end_s, job.name) == ("RUNNING", 2, 600, None, "running")
    assert job.start_s is not None and job.submit_s <= job.start_s <= time.time() + 1

    ended = backend.job(failed)
    assert ended.state == "FAILED" and ended.exit_code == 3 << 8
    assert ended.start_s is not None and ended.end_s is not None and ended.start_s <= ended.end_s

    assert backend.job(999_999) is None
    the_same_read(both, {held, running, failed})


@pytest.mark.slurm
def test_a_limit_set_is_read_back(backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster) -> None:
    held = backend.submit(["--hold", "--time=5", "-o", "/dev/null", "--wrap", "sleep 30"])
    running = backend.submit(["--time=20", "-o", "/dev/null", "--wrap", "sleep 60"])
    wait_for_state(backend, {running}, "RUNNING", cluster)
    backend.set_time_limit(held, 9)
    backend.set_time_limit(running, 7)
    for reader in both.values():
        assert reader.job(held).time_limit_s == 540
        assert reader.job(running).time_limit_s == 420
    assert cluster.job_fields(running)["TimeLimit"] == "00:07:00"
    with pytest.raises(ValueError, match="at least 1 minute"):
        backend.set_time_limit(held, 0)
    with pytest.raises(SlurmError):
        backend.set_time_limit(999_999, 5)
    the_same_read(both, {held, running})


@pytest.mark.slurm
def test_jobs_without_a_limit(backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster) -> None:
    """No --time (the partition has MaxTime=INFINITE and no DefaultTime), and --time=UNLIMITED:
    no limit, None. A job without one that SLURM's backfill scheduler starts gets a year
    (backfill.c; tests/test_slurm_e2e.py), which both backends read alike."""
    pending = backend.submit(["--hold", "-o", "/dev/null", "--wrap", "sleep 30"])
    unlimited = backend.submit(["--hold", "--time=UNLIMITED", "-o", "/dev/null", "--wrap", "sleep 30"])
    running = backend.submit(["-o", "/dev/null", "--wrap", "sleep 60"])
    wait_for_state(backend, {running}, "RUNNING", cluster)
    jobs = the_same_read(both, {pending, unlimited, running})
    assert [jobs[job_id].time_limit_s for job_id in (pending, unlimited)] == [None, None]
    assert jobs[running].time_limit_s in (None, 365 * 86400) and jobs[running].start_s is not None


# ---------------------------------------------------------------------------- arrays
@pytest.mark.slurm
def test_a_pending_array_is_one_record(backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster) -> None:
    array = backend.submit(["--hold", "--time=5", "--array=0-3", "-o", "/dev/null", "--wrap", "sleep 30"])
    jobs = the_same_read(both, {array})
    record = jobs[array]
    assert (record.state, record.array_job_id, record.array_task_id, record.update_id) == ("PENDING", array, None, array)
    backend.set_time_limit(record.update_id, 8)  # the pending tasks' one record
    assert all(reader.job(array).time_limit_s == 480 for reader in both.values())


@pytest.mark.slurm
def test_each_running_task_of_an_array_is_its_own_record(
    backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster
) -> None:
    """Tasks 0-2 run, task 3 waits (``%3``): each running task a record of its own (task 0
    included, whose index pyslurm reads as unset), and the array's own record, still pending, is
    task 3's, the last one left; each running task gets a limit of its own by its
    ``<array id>_<index>``, read back alike by both backends."""
    array = backend.submit(["--time=5", "--array=0-3%3", "-o", "/dev/null", "--wrap", "sleep 60"])

    def started() -> list[SlurmJob]:
        tasks = [job for job in backend.jobs() if job.array_job_id == array]
        running = [job for job in tasks if job.state == "RUNNING"]
        return tasks if len(running) == 3 else []

    tasks = wait_for(started, 60, "three tasks running", cluster)
    running = sorted((job for job in tasks if job.state == "RUNNING"), key=lambda job: job.array_task_id)
    assert [job.array_task_id for job in running] == [0, 1, 2]
    assert [job.update_id for job in running] == [f"{array}_{task}" for task in (0, 1, 2)]
    waiting = [job for job in tasks if job.state == "PENDING"]
    assert [(job.job_id, job.array_task_id, job.update_id) for job in waiting] == [(array, 3, f"{array}_3")], tasks
    for minutes, job in enumerate(running, start=11):
        backend.set_time_limit(job.update_id, minutes)
    jobs = the_same_read(both, {job.job_id for job in tasks})
    assert {job.array_task_id: job.time_limit_s for job in jobs.values() if job.state == "RUNNING"} == {
        0: 660, 1: 720, 2: 780}
    assert jobs[array].time_limit_s == 300  # the waiting task's record: untouched


@pytest.mark.slurm
def test_an_arrays_own_id_names_its_record_for_pyslurm_and_every_task_for_scontrol(
    backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster
) -> None:
    """The one difference of their limit changes (PyslurmBackend's doc): `Job.modify` of an
    array's id changes the record of the tasks not started yet, ``scontrol update JobId=`` every
    task's. The corrector never asks either: it names each started task by its own."""
    array = backend.submit(["--time=5", "--array=0-5%2", "-o", "/dev/null", "--wrap", "sleep 60"])
    wait_for(lambda: sum(job.state == "RUNNING" for job in backend.jobs() if job.array_job_id == array) == 2, 60,
             "two tasks running", cluster)
    backend.set_time_limit(array, 9)
    jobs = the_same_read(both, {job.job_id for job in both["cli"].jobs() if job.array_job_id == array})
    running = {job.time_limit_s for job in jobs.values() if job.state == "RUNNING"}
    assert jobs[array].state == "PENDING" and jobs[array].time_limit_s == 540
    assert running == ({300} if backend.name == "pyslurm" else {540})


# ---------------------------------------------------------------------------- heterogeneous jobs
@pytest.mark.slurm
def test_a_heterogeneous_job_is_one_record_per_component(
    backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster
) -> None:
    leader = backend.submit(["-o", "/dev/null", "--time=20", "-n", "1", ":", "--time=40", "-n", "2", "--wrap", "sleep 60"])
    components = wait_for_state(backend, {leader, leader + 1}, "RUNNING", cluster)
    by_id = {job.job_id: job for job in components}
    assert [(by_id[job_id].time_limit_s, by_id[job_id].cpus) for job_id in (leader, leader + 1)] == [(1200, 1), (2400, 2)]
    assert backend.job(leader + 1).time_limit_s == 2400
    backend.set_time_limit(leader + 1, 30)  # one component alone
    jobs = the_same_read(both, {leader, leader + 1})
    assert [jobs[job_id].time_limit_s for job_id in (leader, leader + 1)] == [1200, 1800]


# ---------------------------------------------------------------------------- slurmctld down
@pytest.mark.slurm
def test_slurmctld_down_is_an_error_not_an_empty_queue(
    backend: SlurmBackend, both: dict[str, SlurmBackend], cluster: SlurmCluster
) -> None:
    """A read that cannot reach slurmctld raises `SlurmError` (the watcher then knows it cannot
    read SLURM), never an empty list; so does a limit change. slurmctld is started again after."""
    job_id = backend.submit(["--hold", "--time=5", "-o", "/dev/null", "--wrap", "sleep 30"])
    assert cluster.controller is not None
    cluster.controller.terminate()
    cluster.controller.wait(30)
    try:
        began = time.monotonic()
        with pytest.raises(SlurmError):
            backend.jobs()
        with pytest.raises(SlurmError):
            backend.job(job_id)
        with pytest.raises(SlurmError):
            backend.set_time_limit(job_id, 7)
        print(f"{backend.name}: three calls failed in {time.monotonic() - began:.1f} s")
    finally:
        cluster.restart_controller()
    wait_for(lambda: backend.job(job_id) is not None, 60, "the job after slurmctld's restart", cluster)
    assert backend.job(job_id).time_limit_s == 300
