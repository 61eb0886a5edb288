"""The SLURM adapter's CLI backend and slurm-convert on a real SLURM; backend selection logic."""

from __future__ import annotations

import os
import re
import subprocess
import time
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from testbed.slurm_cluster import SlurmCluster

from hpcpredict.cli import main
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.slurm.adapter import (
    CliBackend,
    PyslurmBackend,
    SlurmError,
    installed_slurm_version,
    select_backend,
)
from hpcpredict.slurm.convert import read_jobcomp_filetxt
from hpcpredict.logs.swf import read_swf


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    slurm = SlurmCluster(extra_config=["JobCompType=jobcomp/filetxt", "JobCompLoc={dir}/jobcomp.log"])
    slurm.start_or_skip()
    os.environ["SLURM_CONF"] = str(slurm.conf)  # the backend's commands find this cluster
    yield slurm
    os.environ.pop("SLURM_CONF", None)
    slurm.cleanup()


# ---------------------------------------------------------------------------- the CLI backend
@pytest.mark.slurm
def test_cli_backend_submits_reads_limits_and_cancels(cluster: SlurmCluster) -> None:
    backend = CliBackend()
    job_id = backend.submit(["--hold", "--time=5", "-n", "3", "-J", "held job", "-o", "/dev/null", "--wrap", "sleep 30"])
    job = backend.job(job_id)
    assert job is not None
    assert (job.state, job.cpus, job.time_limit_s, job.start_s, job.end_s) == ("PENDING", 3, 300, None, None)
    assert (job.uid, job.user_name, job.partition, job.name) == (os.getuid(), "root", "debug", "held job")
    assert abs(job.submit_s - time.time()) < 60

    backend.set_time_limit(job_id, 10)
    assert backend.job(job_id).time_limit_s == 600
    backend.cancel(job_id)
    assert backend.job(job_id).state == "CANCELLED"


@pytest.mark.slurm
def test_one_task_of_an_array_gets_a_limit_of_its_own(cluster: SlurmCluster) -> None:
    """One task of a running array keeps the array's own id as its job id, and ``scontrol update
    JobId=<that id>`` would set the limit of every task: the corrector names a task
    ``<array id>_<index>`` (`SlurmJob.update_id`) and touches that task alone."""
    backend = CliBackend()
    array_id = backend.submit(["--time=5", "--array=0-2", "-o", "/dev/null", "--wrap", "sleep 30"])
    try:
        deadline = time.monotonic() + 30
        while True:
            tasks = [job for job in backend.jobs() if job.array_job_id == array_id]
            if len(tasks) == 3 and all(job.state == "RUNNING" for job in tasks):
                break
            assert time.monotonic() < deadline, tasks
            time.sleep(0.5)
        assert sorted(job.array_task_id for job in tasks) == [0, 1, 2]
        assert any(job.job_id == array_id for job in tasks)  # the task that keeps the array's id
        for minutes, job in enumerate(sorted(tasks, key=lambda job: job.job_id == array_id), start=7):
            backend.set_time_limit(job.update_id, minutes)
            assert job.update_id == f"{array_id}_{job.array_task_id}"
        limits = {job.array_task_id: job.time_limit_s for job in backend.jobs() if job.array_job_id == array_id}
        expected = {job.array_task_id: 60 * minutes
                    for minutes, job in enumerate(sorted(tasks, key=lambda job: job.job_id == array_id), start=7)}
        assert limits == expected
    finally:
        backend.cancel(array_id)


@pytest.mark.slurm
def test_a_running_job_has_a_start_and_no_end_yet(cluster: SlurmCluster) -> None:
    backend = CliBackend()
    job_id = backend.submit(["--time=2", "-o", "/dev/null", "--wrap", "sleep 20"])
    deadline = time.monotonic() + 30
    while (job := backend.job(job_id)).state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert job.state == "RUNNING" and job.start_s is not None and job.end_s is None
    backend.cancel(job_id)


@pytest.mark.slurm
def test_cli_errors_name_the_command(cluster: SlurmCluster) -> None:
    with pytest.raises(SlurmError, match=r"scontrol update JobId=999999 TimeLimit=5 failed"):
        CliBackend().set_time_limit(999999, 5)
    with pytest.raises(ValueError, match="at least 1 minute"):
        CliBackend().set_time_limit(1, 0)


# ---------------------------------------------------------------------------- selection
def fake_runner(version_text: str):
    def run(command, timeout_s):
        assert command == ["scontrol", "--version"]
        return subprocess.CompletedProcess(command, 0, stdout=version_text, stderr="")
    return run


def importer_of(version: str | None):
    def load(name: str):
        assert name == "pyslurm"
        if version is None:
            raise ImportError("No module named 'pyslurm'")
        return types.SimpleNamespace(__version__=version)
    return load


def test_pyslurm_is_used_only_when_it_matches_slurm() -> None:
    assert isinstance(select_backend(importer=importer_of(None), runner=fake_runner("slurm 25.11.2")), CliBackend)
    assert isinstance(select_backend(importer=importer_of("25.11.1"), runner=fake_runner("slurm 22.05.8")), CliBackend)
    chosen = select_backend(importer=importer_of("25.11.1"), runner=fake_runner("slurm 25.11.2"))
    assert isinstance(chosen, PyslurmBackend)
    assert isinstance(select_backend("cli", importer=importer_of("25.11.1"), runner=fake_runner("slurm 25.11.2")), CliBackend)
    with pytest.raises(SlurmError, match="does not match Slurm 22.05.8"):
        select_backend("pyslurm", importer=importer_of("25.11.1"), runner=fake_runner("slurm-wlm 22.05.8"))
    with pytest.raises(ValueError):
        select_backend("rest")


def test_the_extra_named_when_pyslurm_is_missing_exists() -> None:
    """The advice `select_backend` logs must be installable: the package declares that extra."""
    with pytest.raises(SlurmError) as raised:
        select_backend("pyslurm", importer=importer_of(None), runner=fake_runner("slurm 25.11.2"))
    extra = re.search(r"hpcpredict\[(\w+)\]", str(raised.value))
    assert extra is not None, str(raised.value)
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert any(
        requirement.startswith("pyslurm")
        for requirement in project["optional-dependencies"][extra.group(1)]
    )


@pytest.mark.slurm
def test_the_installed_slurm_version_is_read(cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """On every release tested (22.05, 24.11, 26.05): the version is read, with or without a
    slurm.conf to find, and the backend is pyslurm only for a pyslurm of that major.minor (none is
    installed here: PyPI's 25.11 matches no Debian release, so it is the command line)."""
    version = cluster.run(["scontrol", "--version"]).stdout.split()[-1]
    assert installed_slurm_version() == version
    monkeypatch.delenv("SLURM_CONF")  # 22.05's scontrol cannot print its version without one
    assert installed_slurm_version() == version
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    assert isinstance(select_backend(), CliBackend)
    major, minor = (int(part) for part in version.split(".")[:2])
    assert isinstance(select_backend(importer=importer_of(f"{major}.{minor}.0")), PyslurmBackend)
    assert isinstance(select_backend(importer=importer_of(f"{major}.{minor + 1}.0")), CliBackend)


# ---------------------------------------------------------------------------- slurm-convert
@pytest.mark.slurm
def test_jobcomp_records_become_a_simulable_swf(cluster: SlurmCluster, tmp_path: Path) -> None:
    log = cluster.dir / "jobcomp.log"
    before = log.read_text().count("\n") if log.exists() else 0
    submitted = [
        cluster.sbatch("--time=5", "-n", "1", script="sleep 1"),
        cluster.sbatch("--time=3", "-n", "3", script="sleep 3"),
        cluster.sbatch("--time=2", "-n", "2", script="false"),
    ]
    deadline = time.monotonic() + 60
    while (log.read_text().count("\n") if log.exists() else 0) < before + 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    jobs = {job.job_id: job for job in read_jobcomp_filetxt(log)}
    assert set(submitted) <= set(jobs)
    out = tmp_path / "history.swf"
    result = CliRunner().invoke(main, ["slurm-convert", "--jobcomp", str(log), "-o", str(out), "--procs", "16"])
    assert result.exit_code == 0, result.output
    swf = read_swf(out)
    records = {record.job_id: record for record in swf.records}
    first, second, failed = (records[j] for j in submitted)
    assert abs(first.run_s - 1) <= 1 and abs(second.run_s - 3) <= 1
    assert (first.requested_time_s, second.requested_time_s, failed.requested_time_s) == (300, 180, 120)
    assert (first.allocated_procs, second.allocated_procs, second.requested_procs) == (1, 3, 3)
    assert (first.status, failed.status) == (1, 0)
    assert first.user_id == os.getuid() and swf.header.max_procs == 16
    assert swf.header.unix_start_time == min(job.submit_s for job in jobs.values())

    simulated = CliRunner().invoke(main, ["simulate", str(out), "--format", "json"])
    assert simulated.exit_code == 0, simulated.output


def test_the_daemon_database_exports_the_original_requests(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        service = PredictionService.open(store)
        for job_id, (run_s, requested_s) in enumerate([(50, 600), (400, 3600), (0, 60)], start=1):
            job = JobRequest(job_id, 1_000 + 10 * job_id, 2 * job_id, requested_s, user_id=1000 + job_id % 2)
            service.submitted(job, job.submit_s, given_prediction_s=30)
            if run_s:
                service.started(job_id, job.submit_s + 5)
            service.ended(job_id, run_s, job.submit_s + 5 + run_s, "COMPLETED" if run_s else "CANCELLED")
    finally:
        store.close()
    out = tmp_path / "from-db.swf"
    result = CliRunner().invoke(main, ["slurm-convert", "--db", url, "-o", str(out)])
    assert result.exit_code == 0, result.output
    records = read_swf(out).records
    assert [(r.job_id, r.run_s, r.requested_time_s, r.wait_s, r.status) for r in records] == [
        (1, 50, 600, 5, 1), (2, 400, 3600, 5, 1), (3, 0, 60, -1, 5)]
    trained = CliRunner().invoke(main, ["train", str(out), "--db", f"sqlite:///{tmp_path / 'new.db'}"])
    assert trained.exit_code == 0, trained.output


def test_convert_needs_exactly_one_source(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["slurm-convert", "-o", str(tmp_path / "x.swf")])
    assert result.exit_code == 2 and "exactly one source" in result.output
    bad = tmp_path / "bad.log"
    bad.write_text("this is not a record\n")
    result = CliRunner().invoke(main, ["slurm-convert", "--jobcomp", str(bad), "-o", str(tmp_path / "x.swf")])
    assert result.exit_code == 1 and f"{bad}:1" in result.output


# What Slurm 22.05.8's `squeue --json --states=all` printed, exit status 0, with slurmctld down.
SLURMCTLD_DOWN = ('{"meta": {}, "errors": [{"description": "Failed while looking for jobs", "error_number": -1, '
                  '"error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}')


def test_an_answer_with_errors_is_an_error_not_an_empty_queue() -> None:
    """The JSON listing's case (squeue --json exits 0 with slurmctld down, on 22.05); the lean
    listing's squeue exits 1 then (the real-SLURM test below)."""
    def runner(command, timeout_s):
        return subprocess.CompletedProcess(command, 0, stdout=SLURMCTLD_DOWN, stderr="")

    with pytest.raises(SlurmError, match="answered no jobs but errors: slurm_load_jobs: Failed while looking for jobs"):
        CliBackend(runner=runner, listing="json").jobs()

    def healthy(command, timeout_s):
        return subprocess.CompletedProcess(command, 0, stdout='{"meta": {}, "errors": [], "jobs": []}', stderr="")

    assert CliBackend(runner=healthy, listing="json").jobs() == []  # an empty queue, really


@pytest.mark.slurm
@pytest.mark.parametrize("listing", ["lean", "json"])
def test_with_slurmctld_down_the_watcher_knows_it_cannot_read_slurm(listing: str) -> None:
    """On a real SLURM whose slurmctld is stopped: the CLI backend raises (squeue --json exits 0
    with an error and no jobs on 22.05, 1 on 24.11 and 26.05; the lean listing's squeue exits 1), the watcher counts the failed look, does not vouch for the limits,
    and says it once in its log; once slurmctld is back, the next look reads the queue again."""
    import logging

    from hpcpredict.slurm.watcher import SlurmWatcher

    cluster = SlurmCluster()
    cluster.start_or_skip()
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        cluster.sbatch("--time=30", script="sleep 300")
        recorded = []
        watcher = SlurmWatcher(CliBackend(listing=listing), recorded.append, lambda job_id: None,
                               stale_after_s=40)
        watcher.poll()
        assert watcher.report.read_failures == 0 and recorded, watcher.report
        vouched = watcher.vouched_at_s
        cluster.controller.terminate()
        cluster.controller.wait(30)
        handler = logging.Handler()
        lines: list[str] = []
        handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("hpcpredict.slurm.watcher").addHandler(handler)
        try:
            watcher.poll()
            watcher.poll()
        finally:
            logging.getLogger("hpcpredict.slurm.watcher").removeHandler(handler)
        assert watcher.report.read_failures == 2 and watcher.vouched_at_s == vouched
        # 22.05: exit 0 and an errors entry; 24.11 and 26.05: exit 1 (both an error, never a queue)
        assert ("Failed while looking for jobs" in watcher.report.last_error
                or "Unable to contact slurm controller" in watcher.report.last_error), watcher.report
        assert sum("cannot read SLURM's jobs" in line for line in lines) == 1, lines
        index = cluster.processes.index(cluster.controller)
        cluster.controller = cluster._spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
        cluster.processes[index] = cluster.controller
        cluster._wait_until_idle()
        watcher.poll()
        assert watcher.vouched_at_s > vouched and watcher.report.read_failures == 2  # read, and vouched again
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        cluster.cleanup()
