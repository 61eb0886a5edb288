"""End to end on a real SLURM (issue 7): slurmctld + slurmd on loopback with slurm-plugin's
job_submit.lua and jobcomp.lua, and `hpcpredict serve --slurm` as a real process.

The daemon starts from an untrained model with the readiness floor off (``--min-trained-jobs 0``,
docs/daemon.md), so it predicts 1 s for every job: the plugin lowers every limit to 1 minute,
and a job that runs 100 s is killed (limit + SLURM's 30 s check) unless the corrector raises its
limit in time. The tests run in file order on one cluster; the long
scenario (corrector, with a daemon killed and restarted in the middle) comes first, while the
model is still untrained.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed.daemon_thread import wait_until_answering
from testbed.slurm_cluster import SlurmCluster, wait_for
from sqlalchemy import select

from hpcpredict.daemon.core.events import request_from_json
from hpcpredict.daemon.fronts.client import DaemonClient
from hpcpredict.daemon.fronts.protocol import job_request
from hpcpredict.history_keys import HISTORY_KEYS, history_key
from hpcpredict.jobs import label_id
from hpcpredict.daemon.core.store import CorrectionRow, EventRow, JobRow, Store
from hpcpredict.slurm.tag import parse_tag

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PLUGIN_DIR = Path(__file__).resolve().parent.parent / "slurm-plugin"
TIMEOUT_MS = 300
LONG_JOB_S = 100  # > 1 min + SLURM's 30 s check: killed unless corrected
HISTORY_JOBS = 50  # one-minute jobs taught before the guard test


class ServeProcess:
    def __init__(self, cluster: SlurmCluster, db_name: str = "hpcpredict.db") -> None:
        self.cluster = cluster
        self.socket = str(cluster.dir / "hpcpredict.sock")
        self.db = f"sqlite:///{cluster.dir / db_name}"
        self.spool = str(cluster.dir / "jobcomp.spool")
        self.process: subprocess.Popen | None = None
        self.env = cluster.env  # the fault tests put wrapped SLURM commands first on its PATH

    def start(self, *options: str) -> None:
        log = (self.cluster.dir / "serve.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", self.db, "--create-db", "--min-trained-jobs", "0", "--socket", self.socket,
             "--http", "", "--spool", self.spool, "--slurm", "--slurm-backend", "cli",
             "--slurm-interval-s", "2", "--correction-margin-s", "90", "--log-level", "info", *options],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        wait_until_answering(self.socket, self.process, self.log)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(30)
        self.process = None

    def log(self) -> str:
        return (self.cluster.dir / "serve.log").read_text(errors="replace")[-3000:]

    def store(self) -> Store:
        return Store(self.db)


def plugged_cluster(**options: object) -> SlurmCluster:
    """A cluster with both plugin scripts, set to talk to the daemon in its folder (not started);
    `options` go to SlurmCluster."""
    conf = f"socket={{dir}}/hpcpredict.sock\ntimeout_ms={TIMEOUT_MS}\nspool={{dir}}/jobcomp.spool\n"
    slurm = SlurmCluster(job_submit_lua=PLUGIN_DIR / "job_submit.lua", jobcomp_lua=PLUGIN_DIR / "jobcomp.lua",
                         **options)  # type: ignore[arg-type]
    slurm.extra_files["hpcpredict_slurm.conf"] = conf.format(dir=slurm.dir)
    return slurm


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    slurm = plugged_cluster()
    slurm.start_or_skip()
    yield slurm
    slurm.cleanup()


@pytest.fixture(scope="module")
def daemon(cluster: SlurmCluster) -> Iterator[ServeProcess]:
    serve = ServeProcess(cluster)
    serve.start()
    yield serve
    serve.stop()


def stored_job(serve: ServeProcess, job_id: int) -> JobRow | None:
    store = serve.store()
    try:
        with store.session() as session:
            row = session.get(JobRow, job_id)
            if row is not None:
                session.expunge(row)
            return row
    finally:
        store.close()


def corrections(serve: ServeProcess, job_id: int) -> list[tuple[int, int]]:
    store = serve.store()
    try:
        with store.session() as session:
            return [(c.old_limit_s, c.new_limit_s) for c in
                    session.query(CorrectionRow).filter_by(job_id=job_id).order_by(CorrectionRow.id)]
    finally:
        store.close()


def wait_for_recorded_limit(cluster: SlurmCluster, serve: ServeProcess, job_id: int, limit_s: int) -> None:
    """Wait (30 s) until the daemon's last recorded limit change of `job_id` is to `limit_s`. The
    watcher records a change after scontrol returns, so SLURM shows a limit before the store does
    (a test reading the store at once failed on 24.11 under load)."""
    def recorded() -> bool:
        changes = corrections(serve, job_id)
        return bool(changes) and changes[-1][1] == limit_s

    wait_for(recorded, 30, f"the daemon to record job {job_id}'s limit of {limit_s} s", cluster)


def minutes(limit: str) -> int:
    """SLURM's "[D-]HH:MM:SS" -> whole minutes."""
    days, _, clock = limit.rpartition("-")
    hours, mins, _ = (int(part) for part in clock.split(":"))
    return (int(days) if days else 0) * 1440 + hours * 60 + mins


# ---------------------------------------------------------------------------- the scenarios
def submitted_through_the_plugin(cluster: SlurmCluster, *options: str, script: str, tries: int = 5) -> int:
    """A job the plugin marked. The plugin fails open (no mark, the limit untouched) when the daemon
    does not answer within its 300 ms; a daemon just started, on a machine starting eight
    clusters at once (tests/test_slurm_versions.py), has missed that once in CI. Such a job is
    cancelled and submitted again, `tries` times at most; a plugin that never marks still fails
    the test that needs the mark.

    Each try is submitted held and released only once marked: an unmarked job cancelled after it
    started would be learned (a 1 s run), and one learned job moves the untrained model's
    prediction from 1 s to the request, which the tests after a retry do not expect (seen once in
    CI). A job cancelled while held never ran, and is not learned (daemon/core/learning.py,
    ``never_ran``)."""
    for attempt in range(tries):
        job_id = cluster.sbatch("--hold", *options, script=script)
        if cluster.job_fields(job_id).get("AdminComment", "").startswith("hpcpredict:"):
            cluster.run(["scontrol", "release", str(job_id)])
            return job_id
        cluster.run(["scancel", str(job_id)])
        # a daemon busy for a few seconds (its writer taking the first events, on a machine
        # running a dozen clusters) misses back-to-back tries: the next one waits for it
        time.sleep(2 * (attempt + 1))
    raise AssertionError(f"the plugin marked none of {tries} jobs submitted with {options}")


def test_lowered_limits_are_corrected_in_time_even_across_a_daemon_restart(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    steady = submitted_through_the_plugin(cluster, "--time=60", "-n", "2", script=f"sleep {LONG_JOB_S}")
    restarted = submitted_through_the_plugin(cluster, "--time=60", "-n", "2", script=f"sleep {LONG_JOB_S}")
    for job_id in (steady, restarted):
        fields = cluster.job_fields(job_id)
        # the untrained model predicts 1 s: lowered to 1 minute, the request kept
        assert fields.get("AdminComment", "").startswith(
            "hpcpredict:request_s=3600,prediction_s=1,mode=lower,procs=2,token="), fields
    # The corrector raises both limits shortly after the jobs start.
    wait_for(lambda: all(corrections(daemon, j) for j in (steady, restarted)), 60, "first corrections", cluster)
    first = {job_id: corrections(daemon, job_id) for job_id in (steady, restarted)}
    for job_id, changes in first.items():
        assert changes[0][0] == 60 and changes[0][1] > 60  # from the lowered minute, upwards
        assert cluster.job_fields(job_id)["TimeLimit"] != "00:01:00"

    daemon.stop(signal.SIGKILL)  # mid-run: the jobs are running with raised limits
    time.sleep(3)
    daemon.start()

    def ended() -> bool:
        return all(cluster.job_fields(j)["JobState"] in ("COMPLETED", "TIMEOUT", "FAILED", "CANCELLED")
                   for j in (steady, restarted))

    wait_for(ended, LONG_JOB_S + 90, "the long jobs to end", cluster, poll_s=2)
    for job_id in (steady, restarted):
        assert cluster.job_fields(job_id)["JobState"] == "COMPLETED", cluster.job_fields(job_id)
        changes = corrections(daemon, job_id)
        assert changes[: len(first[job_id])] == first[job_id]
        # INCREMENTAL steps, each from the limit the previous one set, never the same twice,
        # the restart included; SLURM's limit is the last one recorded.
        assert all(new > old for old, new in changes)
        assert all(changes[i][0] == changes[i - 1][1] for i in range(1, len(changes)))
        assert 60 * minutes(cluster.job_fields(job_id)["TimeLimit"]) == changes[-1][1]
        row = wait_for(lambda j=job_id: stored_job(daemon, j) if (r := stored_job(daemon, j)) and r.status == "ended" else None,
                       30, f"job {job_id} ended in the store", cluster)
        assert row.final_state == "COMPLETED" and row.killed_at_lowered_limit is False
        assert row.requested_s == 3600 and LONG_JOB_S - 2 <= row.run_s <= LONG_JOB_S + 5


def test_a_try_the_plugin_did_not_mark_is_cancelled_while_held_and_teaches_nothing(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """`submitted_through_the_plugin`'s retry, made to happen: with the daemon paused (SIGSTOP:
    it accepts connections, answers none) the plugin fails open and the held try goes unmarked;
    the helper cancels it. A job cancelled while held never ran: the store records it ended
    without learning it (``never_ran``), and the model's count of learned jobs does not move,
    which is what keeps the tests that expect the untrained model's 1 s after a retry."""
    assert daemon.process is not None
    with DaemonClient(daemon.socket) as client:
        trained_before = client.request("PING")["trained_jobs"]
    daemon.process.send_signal(signal.SIGSTOP)
    try:
        unmarked = cluster.sbatch("--hold", "--time=60", "-n", "2", script="sleep 1")
        assert not cluster.job_fields(unmarked).get("AdminComment", "").startswith("hpcpredict:")
        cluster.run(["scancel", str(unmarked)])
    finally:
        daemon.process.send_signal(signal.SIGCONT)
    row = wait_for(lambda: (lambda r: r if r is not None and r.status == "ended" else None)(
        stored_job(daemon, unmarked)), 60, "the cancelled try ended in the store", cluster)
    assert row.learned is False and row.learn_rule == "never_ran" and row.run_s == 0, row
    with DaemonClient(daemon.socket) as client:
        assert client.request("PING")["trained_jobs"] == trained_before


def test_finished_jobs_reach_the_store_and_change_the_next_prediction(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    with DaemonClient(daemon.socket) as client:
        before = client.request("PREDICT", uid=0, procs=2, time_limit=3600)
    jobs = [cluster.sbatch("--time=60", "-n", "2", script="sleep 2") for _ in range(3)]
    wait_for(lambda: all((r := stored_job(daemon, j)) and r.status == "ended" for j in jobs), 60,
             "short jobs learned", cluster)
    with DaemonClient(daemon.socket) as client:
        after = client.request("PREDICT", uid=0, procs=2, time_limit=3600)
    assert int(after["prediction"]) != int(before["prediction"])
    for job_id in jobs:
        row = stored_job(daemon, job_id)
        assert row.learned is True and 1 <= row.run_s <= 5


def test_a_job_learns_from_the_features_its_prediction_was_computed_from(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """The plugin marks the job with the daemon's feature token and the processors predicted
    for; the watcher's SUBMIT carries the token, and the event logged for the job holds the
    features PREDICT computed (requested time, processors) instead of features computed later."""
    job_id = cluster.sbatch("--time=45", "-n", "3", "--hold", script="sleep 1")
    try:
        tag = parse_tag(cluster.job_fields(job_id)["AdminComment"])
        assert tag is not None and tag.token is not None and tag.procs == 3, tag
        payload = wait_for(lambda: submitted_payload(daemon, job_id), 30, "the watcher's SUBMIT", cluster)
    finally:
        cluster.run(["scancel", str(job_id)])
    assert "features" in payload, payload
    assert payload["features"][0] == 45 * 60 and payload["features"][7] == 3.0
    assert payload["job"]["procs"] == 3 and payload["job"]["requested_s"] == 45 * 60


def test_a_job_first_reported_by_jobcomp_learns_from_its_prediction_s_features(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """With no watcher (``--no-slurm``: a watcher looking only every ten minutes, as this test had,
    is refused now, since its heartbeat would always read as stale to the failsafe), a short job's
    first report is jobcomp.lua's END; it carries the mark's prediction and token, and the daemon
    records the submission from them (the features PREDICT computed) before the end, instead of
    learning an unseen job."""
    daemon.stop()
    daemon.start("--no-slurm")
    try:
        job_id = cluster.sbatch("--time=40", "-n", "2", script="sleep 1")
        tag = parse_tag(cluster.job_fields(job_id)["AdminComment"])
        assert tag is not None and tag.token is not None, tag
        row = wait_for(lambda: (lambda r: r if r is not None and r.status == "ended" else None)(
            stored_job(daemon, job_id)), 60, "jobcomp's END", cluster)
        payload = submitted_payload(daemon, job_id)
    finally:
        daemon.stop()
        daemon.start()
    assert payload is not None and "features" in payload, payload
    assert payload["features"][0] == 40 * 60 and payload["features"][7] == 2.0
    assert row.learn_rule != "unseen", row.learn_rule


def watcher_evidence(cluster: SlurmCluster, daemon: ServeProcess, job_id: int) -> str:
    """What a test waiting on the watcher needs when the wait fails: what SLURM lists of the job
    (the watcher's own ``squeue --json --states=all``), what the store holds of it, the running
    daemon's log records (from its last start), then every thread's stack (SIGUSR1: where is the
    watcher?). The records come first: a thread dump can fill a suite log's tail."""
    listed = cluster.run(["squeue", "--json", "--states=all"], check=False)
    entry = [{key: job.get(key) for key in ("job_state", "time_limit", "submit_time", "end_time", "admin_comment")}
             for job in json.loads(listed.stdout or "{}").get("jobs", []) if job.get("job_id") == job_id]
    row = stored_job(daemon, job_id)
    before = (cluster.dir / "serve.log").read_text(errors="replace")
    lines = before.splitlines()
    started = max((i for i, line in enumerate(lines) if "serving on" in line), default=0)
    records = lines[started:][-150:]
    daemon.process.send_signal(signal.SIGUSR1)
    time.sleep(2)
    stacks = (cluster.dir / "serve.log").read_text(errors="replace")[len(before):]
    return "\n".join([f"squeue (rc {listed.returncode}) lists the job as: {entry}",
                      f"the store's row: {None if row is None else (row.status, row.requested_s, row.learn_rule)}",
                      "the daemon's log since its last start:", *records,
                      "every thread's stack:", stacks[-8000:]])


def wait_for_no_limit_word(cluster: SlurmCluster, daemon: ServeProcess, job_id: int) -> None:
    """Wait (60 s) for the watcher to say `job_id` has no time limit; if it does not, fail with
    `watcher_evidence`."""
    def said() -> bool:
        log = (cluster.dir / "serve.log").read_text(errors="replace")
        return f"job {job_id} has no time limit: not recorded" in log

    try:
        wait_for(said, 60, f"the watcher's word on job {job_id}")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{watcher_evidence(cluster, daemon, job_id)}") from None


def submitted_payload(serve: ServeProcess, job_id: int) -> dict | None:
    store = serve.store()
    try:
        with store.session() as session:
            text = session.scalar(select(EventRow.payload_json).where(
                EventRow.job_id == job_id, EventRow.kind == "submitted"))
            return None if text is None else json.loads(text)
    finally:
        store.close()


def test_the_fields_a_history_can_be_keyed_by_reach_the_daemon(cluster: SlurmCluster, daemon: ServeProcess) -> None:
    """`--history-by` keys a history by the user and the job's group, name or partition
    (hpcpredict/history_keys.py): the plugin sends them with PREDICT, and the watcher's SUBMIT,
    which the learner learns from, carries the same values (label_id of the names, as the
    simulator reads an SWF log's numbers)."""
    partition = cluster.run(["sinfo", "-h", "-o", "%R"]).stdout.split()[0]
    job_id = cluster.sbatch("--time=30", f"--partition={partition}", "--job-name=keyed-app", "--hold",
                            script="sleep 1")
    try:
        fields = cluster.job_fields(job_id)
        payload = wait_for(lambda: submitted_payload(daemon, job_id), 30, "the watcher's SUBMIT", cluster)
    finally:
        cluster.run(["scancel", str(job_id)])
    job = payload["job"]
    assert job["executable_id"] == label_id("keyed-app") and job["partition_id"] == label_id(partition), job
    assert job["group_id"] == int(fields["GroupId"].rpartition("(")[2].rstrip(")")), (job, fields["GroupId"])
    # PREDICT's request from the fields the plugin sent for this job: the key SUBMIT learns under
    asked = job_request({"uid": job["user_id"], "gid": job["group_id"], "procs": job["procs"],
                         "time_limit": job["requested_s"], "partition": partition, "name": "keyed-app"},
                        job_id=job_id, now_s=job["submit_s"])
    for history_by in HISTORY_KEYS:
        assert history_key(asked, history_by) == history_key(request_from_json(job), history_by)


def test_daemon_stopped_sbatch_succeeds_untouched(cluster: SlurmCluster, daemon: ServeProcess) -> None:
    """Not timed: that the plugin does not wait with no daemon is checked on the plugin's own
    call (test_slurm_plugin_lua.py::test_daemon_down_passes_untouched_at_once); a whole sbatch
    also times slurmctld's RPCs, which a loaded machine stretches."""
    daemon.stop()
    try:
        job_id = cluster.sbatch("--time=60", script="sleep 1")
        fields = cluster.job_fields(job_id)
        assert fields["TimeLimit"] == "01:00:00" and fields.get("AdminComment", "") in ("", "(null)")
    finally:
        daemon.start()


def test_daemon_hung_sbatch_returns_within_the_timeout(cluster: SlurmCluster, daemon: ServeProcess) -> None:
    """Timed (docs/testing.md), the fail-open contract inside a real slurmctld: a hung daemon
    costs a submission the plugin's timeout (300 ms), not slurmctld's RPC timeout. The lower
    bound shows the plugin waited; the upper one (the timeout + 5 s) leaves room for a loaded
    machine's slurmctld and sbatch, and is still below the 10 s MessageTimeout at which a
    plugin blocked on the socket would make sbatch fail."""
    daemon.stop()
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hung.bind(daemon.socket)
    hung.listen(16)  # accepts, never answers: what a stuck daemon looks like to the plugin
    try:
        began = time.monotonic()
        job_id = cluster.sbatch("--time=60", script="sleep 1")
        elapsed = time.monotonic() - began
        assert cluster.job_fields(job_id)["TimeLimit"] == "01:00:00"
        assert TIMEOUT_MS / 1000 <= elapsed < TIMEOUT_MS / 1000 + 5.0
    finally:
        hung.close()
        os.unlink(daemon.socket)
        daemon.start()


def test_jobs_without_a_time_limit_pass_untouched(cluster: SlurmCluster, daemon: ServeProcess) -> None:
    """No --time (the partition has no DefaultTime): the plugin leaves the job alone, the watcher
    says so once and never logs an ERROR at its polls, jobcomp.lua's END (no time_limit) is
    acknowledged, not refused, and the job is not recorded (watcher.py's module doc). On a loaded
    machine SLURM's backfill scheduler may be the one that starts it, with a year's limit: failed
    here once in CI on 26.05 (the job learned as a one-year request) before that year was read as
    no request (test_a_job_without_a_limit_started_by_slurms_backfill_is_not_recorded)."""
    job_id = cluster.sbatch(script="sleep 3")
    fields = cluster.job_fields(job_id)
    assert "hpcpredict" not in fields.get("AdminComment", "")
    # The partition's (MaxTime=INFINITE, no DefaultTime), or the year SLURM's backfill gives such a
    # job when it is the one that starts it, which may come before this look on a loaded machine.
    assert fields["TimeLimit"] in ("UNLIMITED", "365-00:00:00"), fields["TimeLimit"]
    wait_for(lambda: cluster.job_fields(job_id)["JobState"] == "COMPLETED", 60, "the job's end", cluster)

    def mentions() -> list[str]:
        serve_log = (cluster.dir / "serve.log").read_text(errors="replace")
        return [line for line in serve_log.splitlines() if f"job {job_id} " in line]

    # The watcher's first look may come after the end: the daemon was restarted just before (the
    # fail-open tests) and a loaded machine's squeue can take seconds; SLURM shows the job for
    # MinJobAge, so the watcher must still see it. Then two more looks (every 2 s), not one ERROR.
    wait_for_no_limit_word(cluster, daemon, job_id)
    time.sleep(5)
    assert not any("ERROR" in line for line in mentions()), mentions()
    assert sum("has no time limit: not recorded" in line for line in mentions()) == 1, mentions()
    ctld_log = (cluster.dir / "slurmctld.log").read_text(errors="replace")
    assert f"job {job_id}: daemon refused" not in ctld_log
    assert stored_job(daemon, job_id) is None


def array_tasks(cluster: SlurmCluster, array_id: int) -> dict[str, dict[str, str]]:
    """Each task of a job array as `scontrol show job -o` gives it, keyed by ArrayTaskId."""
    lines = cluster.run(["scontrol", "show", "job", str(array_id), "-o"]).stdout.splitlines()
    tasks = {}
    for line in lines:
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        tasks[fields.get("ArrayTaskId", "")] = fields
    return tasks


def test_every_task_of_a_job_array_gets_the_lowered_limit_and_is_learned(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """SLURM calls job_submit once for the whole array: every task inherits the lowered limit
    and the mark with the user's request; each task then runs, ends and is learned as a job."""
    array_id = cluster.sbatch("--time=30", "--array=0-2", script="sleep 1")

    def all_ended() -> dict[str, dict[str, str]] | None:
        tasks = array_tasks(cluster, array_id)
        done = len(tasks) == 3 and all(t["JobState"] in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED")
                                       for t in tasks.values())
        return tasks if done else None

    tasks = wait_for(all_ended, 60, "the array's tasks to end", cluster)
    assert sorted(tasks) == ["0", "1", "2"]
    for task in tasks.values():
        assert task["JobState"] == "COMPLETED", task
        assert task["AdminComment"].startswith("hpcpredict:request_s=1800,prediction_s="), task
        prediction_s = parse_tag(task["AdminComment"]).prediction_s
        lowered_min = max(1, min(30, -(-prediction_s // 60)))
        # A task running when the watcher looks is within the correction margin (90 s) of its
        # one-minute limit: the corrector may have raised it, and then recorded so. It records
        # after SLURM has the new limit, and a one-second task can end in between (seen once in
        # CI, under load): wait for the record, not for less.
        job_id = int(task["JobId"])

        def explained(limit_min: int = minutes(task["TimeLimit"]), job_id: int = job_id,
                      lowered_min: int = lowered_min) -> bool:
            raised = corrections(daemon, job_id)
            if raised:
                return limit_min == raised[-1][1] // 60
            if limit_min == lowered_min:
                return True
            # Raised, and not recorded: the task's END reached the store first (jobcomp.lua reports
            # it at once; the watcher records its change after scontrol returns), and the service
            # ignores a limit change of an ended job. Seen in a fresh clone's full run: scontrol set
            # 2 min in the same millisecond as the task completed.
            row = stored_job(daemon, job_id)
            return limit_min > lowered_min and row is not None and row.status == "ended"

        wait_for(explained, 30, f"the store to record what set task {job_id}'s limit", cluster)
        raised = corrections(daemon, job_id)
        assert not raised or raised[0][0] == 60 * lowered_min, raised
    job_ids = [int(task["JobId"]) for task in tasks.values()]
    assert len(set(job_ids)) == 3  # each task is a job of its own to the daemon
    rows = wait_for(lambda: [r for j in job_ids if (r := stored_job(daemon, j)) and r.status == "ended"]
                    if all((r := stored_job(daemon, j)) and r.status == "ended" for j in job_ids) else None,
                    30, "the tasks learned", cluster)
    assert all(row.requested_s == 1800 and row.learned for row in rows)


def test_each_component_of_a_heterogeneous_job_gets_its_own_prediction(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    done = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "--time=20", "-n", "1", ":",
                        "--time=40", "-n", "1", "--wrap", "sleep 1"])
    leader = int(done.stdout.strip().split(";")[0])
    lines = cluster.run(["scontrol", "show", "job", str(leader), "-o"]).stdout.splitlines()
    components = [dict(p.split("=", 1) for p in line.split() if "=" in p) for line in lines]
    assert len(components) == 2, lines
    requests = sorted(c["AdminComment"].split(",")[0] for c in components)
    assert requests == ["hpcpredict:request_s=1200", "hpcpredict:request_s=2400"], components
    # On this one-node cluster a heterogeneous job never gets its resources: do not leave it
    # pending for the tests after this one.
    cluster.run(["scancel", str(leader)])


def restart_on_an_empty_queue(cluster: SlurmCluster, daemon: ServeProcess, *options: str) -> None:
    """The guard's tests need the whole machine: wait for the earlier tests' jobs to end (squeue
    shown if they do not), then restart the daemon with `options`."""
    queue = lambda: cluster.run(["squeue", "-h", "-o", "%i %T %r %l %M %C"]).stdout.strip()  # noqa: E731
    try:
        wait_for(lambda: not queue(), 180, "the earlier tests' jobs to end", cluster, poll_s=2)
    except AssertionError as error:
        raise AssertionError(f"{error}\nsqueue:\n{queue()}") from None
    daemon.stop()
    daemon.start(*options)


def teach_one_minute_jobs(client: DaemonClient, time_limit_s: int, first_job_id: int) -> int:
    """Report HISTORY_JOBS recent jobs of uid 0 on one processor that asked for `time_limit_s` and
    ran a minute (through the socket, as jobcomp.lua would; recent: the daemon reads a model whose
    newest job is old as stale, docs/daemon.md); the prediction for such a job afterwards."""
    first_s = int(time.time()) - 100 * HISTORY_JOBS
    for k in range(HISTORY_JOBS):
        submit_s = first_s + 100 * k
        client.request("END", job=first_job_id + k, uid=0, procs=1, time_limit=time_limit_s,
                       submit=submit_s, start=submit_s, end=submit_s + 60, state="COMPLETED")
    return int(client.request("PREDICT", uid=0, procs=1, time_limit=time_limit_s)["prediction"])


def test_the_starvation_guard_gives_running_jobs_their_requests_and_holds_lowering(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """Guard at 60 s: a job waiting for the whole machine behind a job whose limit was lowered
    turns it on; the running job's limit goes back to its request, a job submitted meanwhile keeps
    its request, and is lowered once the starving job has started (the guard is off)."""
    restart_on_an_empty_queue(cluster, daemon, "--starvation-guard", "60")
    blocker = cluster.sbatch("--time=60", "-n", "16", script="sleep 600")
    wait_for(lambda: cluster.job_fields(blocker)["JobState"] == "RUNNING", 30, "the blocker to run", cluster)
    assert minutes(cluster.job_fields(blocker)["TimeLimit"]) < 60  # lowered (and maybe corrected)
    starving = cluster.sbatch("--time=10", "-n", "16", script="sleep 20")

    wait_for(lambda: minutes(cluster.job_fields(blocker)["TimeLimit"]) == 60, 120,
             "the guard to give the blocker its request", cluster, poll_s=2)
    assert cluster.job_fields(starving)["JobState"] == "PENDING"
    wait_for_recorded_limit(cluster, daemon, blocker, 3600)
    with DaemonClient(daemon.socket) as client:
        assert client.request("PING")["lower"] == "0"
        # The model has learned only the dozen jobs the earlier tests ran, and its prediction for a
        # 30-minute job has been seen anywhere from 87 s to the request itself from run to run.
        # Teach it (through the socket, as jobcomp.lua would report them) that this user's
        # 30-minute single-processor jobs run a minute, so the held job has a prediction below
        # its request: the lowering the guard holds back is then a real one.
        prediction_s = teach_one_minute_jobs(client, 1800, first_job_id=900_000)
    assert prediction_s < 1800, f"after {HISTORY_JOBS} one-minute jobs the model predicts {prediction_s} s"
    held_min = 30
    held = cluster.sbatch(f"--time={held_min}", "-n", "1", script="sleep 5")
    fields = cluster.job_fields(held)
    assert minutes(fields["TimeLimit"]) == held_min, fields  # not lowered while the guard is on
    tag = parse_tag(fields["AdminComment"])
    assert tag is not None and tag.mode == "lower" and tag.prediction_s < 60 * held_min

    cluster.run(["scancel", str(blocker)])
    wait_for(lambda: cluster.job_fields(starving)["JobState"] in ("RUNNING", "COMPLETED"), 60,
             "the starving job to start", cluster)
    # The guard is off once nothing has waited 60 s: the held job, still pending behind the
    # starving one, gets the limit the plugin would have set.
    lowered = max(1, -(-tag.prediction_s // 60))
    wait_for(lambda: any(new == 60 * lowered for _, new in corrections(daemon, held)), 30,
             "the held job to be lowered", cluster)
    log = (cluster.dir / "serve.log").read_text(errors="replace")
    assert f"starvation guard on: job {starving} has waited" in log
    with DaemonClient(daemon.socket) as client:
        assert client.request("PING")["lower"] == "1"
    wait_for(lambda: cluster.job_fields(held)["JobState"] == "COMPLETED", 60, "the held job to run", cluster)


def run_a_blocker(cluster: SlurmCluster, started: list[int], minutes: int = 60) -> int:
    """A job on the whole machine for 10 minutes of the `minutes` it asked for, running (listed
    in `started`, for the caller to cancel): what the guard's tests make others wait behind."""
    blocker = cluster.sbatch(f"--time={minutes}", "-n", "16", script="sleep 600")
    started.append(blocker)
    wait_for(lambda: cluster.job_fields(blocker)["JobState"] == "RUNNING", 30, "the blocker to run", cluster)
    return blocker


def test_the_starvation_guard_xfactor_rule_guards_a_short_request_long_before_the_cap(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """``--starvation-guard 24h --starvation-guard-xfactor 2`` (docs/method.md §7, "xfactor"): a
    job that asked for one minute, waiting for the whole machine behind a job whose hour was
    lowered, is due once it has waited its minute (its expansion factor by its request reaches
    2), so the guard gives the blocker its hour back within the test's minutes, which the 24 h
    cap alone would not do for a day."""
    restart_on_an_empty_queue(cluster, daemon, "--starvation-guard", "24h",
                              "--starvation-guard-xfactor", "2")
    started: list[int] = []
    try:
        blocker = run_a_blocker(cluster, started)
        assert minutes(cluster.job_fields(blocker)["TimeLimit"]) < 60  # lowered (and maybe corrected)
        starving = cluster.sbatch("--time=1", "-n", "16", script="sleep 5")
        started.append(starving)
        tag = parse_tag(cluster.job_fields(starving)["AdminComment"])
        assert tag is not None and tag.request_s == 60, tag

        wait_for(lambda: minutes(cluster.job_fields(blocker)["TimeLimit"]) == 60, 150,
                 "the xfactor rule to give the blocker its request", cluster, poll_s=2)
        assert cluster.job_fields(starving)["JobState"] == "PENDING"
        wait_for_recorded_limit(cluster, daemon, blocker, 3600)

        def log_once_the_guard_gave_the_hour() -> str | None:  # logged just after the record
            log = (cluster.dir / "serve.log").read_text(errors="replace")
            return log if any(f"job {blocker} (running): time limit " in line
                              and line.endswith("-> 3600 s (starvation guard on)")
                              for line in log.splitlines()) else None

        # the guard, not the corrector, gave the hour back, and by the xfactor rule's threshold
        log = wait_for(log_once_the_guard_gave_the_hour, 10, "the guard's log line on the blocker", cluster)
        assert f"starvation guard on: job {starving} has waited" in log
        assert "s (>= 60 s: an expansion factor of 2 by its request, or 24.0 h, whichever first)" in log
        assert lowering(daemon) == "0"
    finally:
        for job_id in started:
            cluster.run(["scancel", str(job_id)])
    # Nothing pends any more: the guard is off and new jobs are lowered again.
    wait_for(lambda: lowering(daemon) == "1", 30, "the guard to turn off", cluster)
    daemon.stop()
    daemon.start()


def test_the_starvation_guards_slack_stage_sets_requests_less_the_slack_live(
    cluster: SlurmCluster, daemon: ServeProcess
) -> None:
    """``--starvation-guard-slack 10m --starvation-guard-slack-after 1m`` (docs/admin-guide.md,
    "The slack stage"): once a job waiting for the whole machine has waited a minute, the blocker
    running on its lowered limit, below its slack estimate (240 - 10 min), gets its 4 h back; a
    job submitted then keeps its 30-minute request at submission (PREDICT holds lowering) and gets
    20 minutes (30 - 10) from the watcher; the starving job's own estimate is its lowered limit (10
    minutes less 10 is below it), so it is left there. Afterwards, the stage off, a job that reaches
    its lowered limit, within the slack of its 5-minute request, gets the whole request at once
    (`RequestWithinSlack`), where INCREMENTAL would add one minute."""
    restart_on_an_empty_queue(cluster, daemon, "--starvation-guard", "24h", "--starvation-guard-slack",
                              "10m", "--starvation-guard-slack-after", "1m")
    started: list[int] = []
    try:
        blocker = run_a_blocker(cluster, started, minutes=240)
        assert minutes(cluster.job_fields(blocker)["TimeLimit"]) < 230  # lowered (and maybe corrected)
        starving = cluster.sbatch("--time=10", "-n", "16", script="sleep 5")
        started.append(starving)
        starving_limit = cluster.job_fields(starving)["TimeLimit"]

        wait_for(lambda: minutes(cluster.job_fields(blocker)["TimeLimit"]) == 240, 150,
                 "the slack stage to give the blocker its request", cluster, poll_s=2)
        assert cluster.job_fields(starving)["JobState"] == "PENDING"
        assert lowering(daemon) == "0"
        newcomer = cluster.sbatch("--time=30", "-n", "1", script="sleep 5")
        started.append(newcomer)
        tag = parse_tag(cluster.job_fields(newcomer)["AdminComment"])
        assert tag is not None and tag.mode == "lower" and tag.prediction_s < 20 * 60, tag
        wait_for(lambda: minutes(cluster.job_fields(newcomer)["TimeLimit"]) == 20, 30,
                 "the watcher to give the newcomer its slack estimate", cluster, poll_s=1)
        wait_for_recorded_limit(cluster, daemon, newcomer, 1200)
        assert corrections(daemon, newcomer) == [(1800, 1200)]
        assert cluster.job_fields(starving)["TimeLimit"] == starving_limit
        log = (cluster.dir / "serve.log").read_text(errors="replace")
        assert f"starvation guard's slack stage on: job {starving} has waited" in log
        assert any(f"job {blocker} (running): time limit " in line
                   and line.endswith("-> 14400 s (starvation guard slack stage)") for line in log.splitlines())
        assert "starvation guard on:" not in log.split(f"slack stage on: job {starving}")[-1]
    finally:
        for job_id in started:
            cluster.run(["scancel", str(job_id)])
    wait_for(lambda: lowering(daemon) == "1", 30, "the slack stage to end", cluster)

    with DaemonClient(daemon.socket) as client:  # (a prediction below the request, to lower)
        assert teach_one_minute_jobs(client, 300, first_job_id=910_000) < 240
    short = cluster.sbatch("--time=5", "-n", "1", script="sleep 100")
    wait_for(lambda: len(corrections(daemon, short)) >= 1, 60, "the corrector to raise the short job", cluster)
    first = corrections(daemon, short)[0]
    assert first[0] < 300 and first[1] == 300, first
    wait_for(lambda: cluster.job_fields(short)["JobState"] == "COMPLETED", 150, "the short job to complete", cluster)
    daemon.stop()
    daemon.start()


def lowering(serve: ServeProcess) -> str:
    """PING's ``lower``: "0" while the starvation guard holds lowering."""
    with DaemonClient(serve.socket) as client:
        return client.request("PING")["lower"]


SURVIVAL_CONFIG = '[daemon]\ncorrection = "survival"\n\n[learner]\neta = 1e-9\n'


def test_the_survival_correction_raises_a_limit_to_the_users_runtime_median(cluster: SlurmCluster,
                                                                             daemon: ServeProcess) -> None:
    """docs/method.md §8 live, as `hpcpredict tune` chose it on the three archive logs
    (docs/results.md): `correction = "survival"` raises a lowered limit to the median of the
    user's recent runtimes beyond the limit reached, where INCREMENTAL adds its fixed step.

    A fresh daemon with a learning rate too small to move the model keeps predicting 1 s, so the
    job is lowered to 1 minute whatever it is taught; its user's last 10 jobs (reported as
    jobcomp.lua would) ran 150 s. The corrector, due at once (90 s margin over a 1-minute limit),
    asks for T given T > 60 s: 150 s, 3 minutes in SLURM's whole minutes. INCREMENTAL would have
    set 1 s + 60 s, 2 minutes."""
    daemon.stop()
    config = cluster.dir / "survival.toml"
    config.write_text(SURVIVAL_CONFIG)
    survival = ServeProcess(cluster, db_name="survival.db")
    survival.start("--config", str(config))
    try:
        with DaemonClient(survival.socket) as client:
            first_s = int(time.time()) - 3000
            for k in range(10):
                submit_s = first_s + 200 * k
                client.request("END", job=910_000 + k, uid=0, procs=1, time_limit=1800,
                               submit=submit_s, start=submit_s, end=submit_s + 150, state="COMPLETED")
            assert int(client.request("PREDICT", uid=0, procs=1, time_limit=1800)["prediction"]) <= 60
        job = cluster.sbatch("--time=30", "-n", "1", script="sleep 20")
        assert minutes(cluster.job_fields(job)["TimeLimit"]) == 1
        wait_for(lambda: corrections(survival, job), 60, "the survival correction", cluster)
        assert corrections(survival, job)[0] == (60, 180), survival.log()
        wait_for(lambda: cluster.job_fields(job)["JobState"] == "COMPLETED", 60, "the job to end", cluster)
        assert minutes(cluster.job_fields(job)["TimeLimit"]) == 3
    finally:
        survival.stop()


# ---------------------------------------------------------------------------- SLURM's backfill year
@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[SlurmCluster]:
    slurm = plugged_cluster(nodes=2, node_cpus=2, extra_config=["SchedulerParameters=bf_interval=1"])
    slurm.start_or_skip()
    yield slurm
    slurm.cleanup()


def test_a_job_without_a_limit_started_by_slurms_backfill_is_not_recorded(two_node_cluster: SlurmCluster) -> None:
    """SLURM's backfill scheduler gives a job submitted without --time (MaxTime=INFINITE) a year's
    limit when it starts it, where the main scheduler leaves it UNLIMITED (backfill.c; seen in
    CI on 26.05, where a job so started was learned as a one-year request and the watcher never
    said a word of it). The year is no request: the watcher says the job has none, jobcomp.lua's
    END carries no time_limit, and nothing is recorded.

    Only the backfill scheduler can start the job: node1 is busy, a job waiting for the whole of
    node1 stops the main scheduler's pass for the partition, and the job without a limit asks for
    node2. The waiting job excludes node2 rather than naming node1: the main scheduler passes over
    a job that names its nodes (`-w`) and only withholds those nodes from the jobs behind it
    (job_scheduler.c), so it could start the job on node2 itself, as it once did in CI on 24.11;
    a job that merely cannot run fails the partition, and none behind it is tried."""
    cluster = two_node_cluster
    daemon = ServeProcess(cluster)
    daemon.start()
    busy = blocked = None
    try:
        busy = cluster.sbatch("--time=10", "-w", "node1", "-n", "1", script="sleep 300")
        wait_for(lambda: cluster.job_fields(busy)["JobState"] == "RUNNING", 60, "node1 busy", cluster)
        blocked = cluster.sbatch("--time=10", "--exclude=node2", "-n", "2", script="sleep 1")
        job_id = cluster.sbatch("-w", "node2", "-n", "1", script="sleep 2")
        wait_for(lambda: cluster.job_fields(job_id)["JobState"] == "COMPLETED", 60, "the job's end", cluster)
        assert cluster.job_fields(job_id)["TimeLimit"] == "365-00:00:00", (
            "not started by SLURM's backfill: the case was not exercised", cluster.job_fields(job_id))
        wait_for_no_limit_word(cluster, daemon, job_id)
        time.sleep(3)  # jobcomp.lua's END has long been answered; one more look of the watcher
        assert stored_job(daemon, job_id) is None
        assert f"job {job_id}: daemon refused" not in (cluster.dir / "slurmctld.log").read_text(errors="replace")
    finally:
        for job in (blocked, busy):
            if job is not None:
                cluster.run(["scancel", str(job)], check=False)
        daemon.stop()
