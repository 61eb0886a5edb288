"""`hpcpredict replay-slurm` on a real SLURM (testbed/slurm_cluster.py): a CI-sized slice of the sample
log replayed with the plugin and a real daemon, in lower then record mode, and read back as SWF.

What SLURM did is asserted, never how fast: every job ran to completion, the limits are those the
plugin set (lowered to the prediction in whole minutes, the user's request in the mark; untouched in
record mode), and the SWF written back is a valid log that replay-compare measures. The daemon
runs untrained, its readiness floor off (``--min-trained-jobs 0``: docs/daemon.md, "Readiness"),
and without its SLURM watcher, and jobcomp.lua is not installed, so it never learns during the
test and predicts 1 s for every job: lower mode lowers every limit to 1 minute,
deterministically (a daemon learning as jobs end changes its answers within seconds, which
would make the limits depend on timing). The slice's sleeps are far shorter than a minute, so no
job needs the corrector (tests/test_slurm_e2e.py covers it).
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed.daemon_thread import wait_until_answering
from testbed.slurm_cluster import SlurmCluster

from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.experiments.slurm_replay import Scaling, plan, real_result, replay_uid
from hpcpredict.logs.swf import read_swf
from hpcpredict.logs.workload import load_workload

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
PLUGIN_DIR = REPO / "slurm-plugin"
SAMPLE = REPO / "swf" / "KTH-SP2-sample.swf"
NODES = 4
# 30 jobs submitted within 6 s at speedup 10: requests of 1 to 6 minutes, sleeps of 1-2 s, enough
# work to queue on 4 one-CPU nodes (checked by test_the_slice_is_what_the_test_needs).
SKIP, JOBS, SPEEDUP = 699, 30, 10


# A deadline, not a speed check: a fresh clone's first replay-compare compiles the simulator's and
# the SLURM model's kernels while the rest of the suite compiles and replays beside it; 120 s was
# outlasted once in a fresh clone's full run (2026-12-02).
COMPARE_DEADLINE_S = 600


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    slurm = SlurmCluster(job_submit_lua=PLUGIN_DIR / "job_submit.lua", nodes=NODES, node_cpus=1)
    slurm.extra_files["hpcpredict_slurm.conf"] = (
        f"socket={slurm.dir}/hpcpredict.sock\ntimeout_ms=300\nspool={slurm.dir}/jobcomp.spool\nmode=record\n"
    )
    slurm.start_or_skip()
    socket_path = str(slurm.dir / "hpcpredict.sock")
    serve = subprocess.Popen(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{slurm.dir / 'state.db'}",
         "--create-db", "--min-trained-jobs", "0", "--socket", socket_path, "--http", "", "--spool", str(slurm.dir / "jobcomp.spool")],
        env=slurm.env, stdout=(slurm.dir / "serve.log").open("wb"), stderr=subprocess.STDOUT,
    )
    try:
        wait_until_answering(socket_path, serve, lambda: (slurm.dir / "serve.log").read_text(errors="replace"))
        yield slurm
    finally:
        serve.terminate()
        serve.wait(30)
        slurm.cleanup()


def replay(cluster: SlurmCluster, mode: str, jobs: int, tmp_path: Path,
           users: str = "log") -> tuple[Path, list[dict[str, str]]]:
    output, table = tmp_path / f"{mode}.swf", tmp_path / f"{mode}.csv"
    done = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "replay-slurm", str(SAMPLE), "--jobs", str(jobs),
         "--skip", str(SKIP), "--speedup", str(SPEEDUP), "--mode", mode, "--procs", str(NODES),
         "--poll-s", "1", "-o", str(output), "--csv", str(table), "--users", users],
        env=cluster.env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr + cluster.log_tail()
    assert f"wrote {jobs} jobs to {output} ({jobs} COMPLETED)" in done.stdout
    with table.open() as stream:
        return output, list(csv.DictReader(stream))


def planned_jobs():
    workload = load_workload(SAMPLE)
    return plan(workload, jobs=JOBS, skip=SKIP, scaling=Scaling(SPEEDUP, workload.machine_procs, NODES))


def test_the_slice_is_what_the_test_needs():
    planned = planned_jobs()
    assert len(planned) == JOBS
    assert planned[-1].offset_s <= 10  # a burst: the queue forms at once
    assert max(job.sleep_s for job in planned) <= 5  # no job comes near its 1-minute lowered limit
    assert sum(job.time_limit_min > 1 for job in planned) >= 10  # lowering is visible
    assert sum(job.sleep_s * job.procs for job in planned) > NODES * planned[-1].offset_s  # work queues
    assert all(job.log_user_id > 0 for job in planned)  # a user to submit as (the burst is one user's)


def test_lower_mode_every_job_runs_under_the_limit_the_plugin_set(cluster: SlurmCluster, tmp_path: Path):
    output, rows = replay(cluster, "lower", JOBS, tmp_path)
    planned = {job.log_job_id: job for job in planned_jobs()}
    assert sorted(int(row["log_job_id"]) for row in rows) == sorted(planned)
    lowered = 0
    for row in rows:
        job = planned[int(row["log_job_id"])]
        assert row["state"] == "COMPLETED"
        assert int(row["request_min"]) == job.time_limit_min
        prediction_s = int(row["prediction_s"])  # the plugin's mark is there
        assert prediction_s == 1  # the untrained model
        limit = int(row["final_limit_min"])
        assert limit == max(1, min(job.time_limit_min, math.ceil(prediction_s / 60))) == 1
        lowered += limit < job.time_limit_min
    assert lowered == sum(job.time_limit_min > 1 for job in planned.values()) >= 10
    # The SWF written back keeps the users' requests (from the mark), not the lowered limits.
    log = read_swf(output)
    assert len(log.records) == JOBS
    requests = sorted(record.requested_time_s for record in log.records)
    assert requests == sorted(60 * job.time_limit_min for job in planned.values())
    assert all(record.status == 1 and record.wait_s >= 0 and record.run_s >= 1 for record in log.records)
    # Each job ran as its log user's account, and the SWF keeps the log's user and group ids.
    assert all(int(row["slurm_uid"]) == replay_uid(planned[int(row["log_job_id"])].log_user_id) for row in rows)
    by_slurm_id = {int(row["slurm_job_id"]): planned[int(row["log_job_id"])] for row in rows}
    assert {(r.user_id, r.group_id) for r in log.records} == {
        (job.log_user_id, job.log_group_id) for job in planned.values()}
    assert all((r.user_id, r.group_id) == (by_slurm_id[r.job_id].log_user_id, by_slurm_id[r.job_id].log_group_id)
               for r in log.records)
    # The model fed the very limits the plugin set measures the same jobs.
    compared = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "replay-compare", str(output), "--predictor", "plugin",
         "--plugin-csv", str(tmp_path / "lower.csv"), "--format", "json"],
        capture_output=True, text=True, timeout=COMPARE_DEADLINE_S,
    )
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    assert result["model"] == "slurm-backfill + plugin limits + incremental"
    assert result["agreement"]["jobs"] == JOBS


def test_record_mode_leaves_the_limits_and_the_swf_measures_like_a_simulation(cluster: SlurmCluster,
                                                                           tmp_path: Path):
    output, rows = replay(cluster, "record", 12, tmp_path, users="self")
    planned = {job.log_job_id: job for job in planned_jobs()}
    for row in rows:
        assert row["state"] == "COMPLETED" and int(row["slurm_uid"]) == os.getuid()  # --users self
        assert row["prediction_s"] == "1"  # recorded...
        assert int(row["final_limit_min"]) == planned[int(row["log_job_id"])].time_limit_min  # ...not applied
    workload = load_workload(output)
    assert len(workload.jobs) == 12 and workload.machine_procs == NODES
    assert {job.user_id for job in workload.jobs} == {os.getuid()}
    real = real_result(workload)
    starts = [start - job.submit_s for start, job in zip(real.start_s, workload.jobs)]
    assert starts == [job.wait_s for job in workload.jobs]
    assert compute_metrics(real).ave_bsld >= 1.0
    compared = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "replay-compare", str(output), "--format", "json"],
        capture_output=True, text=True, timeout=COMPARE_DEADLINE_S,
    )
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    assert result["agreement"]["jobs"] == 12
    assert -1.0 <= result["agreement"]["spearman_start_order"] <= 1.0
    assert result["slurm"]["ave_bsld"] == pytest.approx(compute_metrics(real).ave_bsld)
