"""Fault injection on a real SLURM (issue 50): under any single failure, no job ends before its
request because hpcpredict lowered its limit, and no limit is ever set above a request.

Each case runs on a cluster of its own (slurmctld + slurmd + job_submit.lua + jobcomp.lua,
testbed/slurm_cluster.py), with `hpcpredict serve --slurm` and `hpcpredict failsafe` as real
processes, and the same jobs, all submitted through the plugin and lowered to one minute (the
untrained model predicts 1 s):

* R1, R2 (running, 100 s, asked 4 min) and P (pending behind B, then running 100 s, asked 4 min):
  each outlives its lowered minute and SLURM's 30 s check, so each is killed unless someone raises
  its limit in time; they must all end COMPLETED;
* B (running 30 s, asked 4 min): ends within its lowered limit, and lets P start during the fault;
* O (running 200 s, asked 2 min): outlives its request, and must be killed at it (TIMEOUT after at
  least 120 s), as it would be without hpcpredict.

The fault comes as soon as the watcher has looked once with every job at its lowered minute (the
corrector's margin is 34 s here, so no limit has been raised yet). Shorter steps than the shipped
defaults keep CI's time in bounds: looks every 2 s, the failsafe's heartbeat bound 15 s and its
looks every 2 s (the budget `FailsafeConfig.check` enforces holds: 15 + 2 + 10 < 60). One case
runs the shipped defaults (looks every 10 s, margin 120 s, bound 40 s, the failsafe every 5 s):
there the watcher has raised the running jobs at its first look, and P, which starts at its
lowered minute just after the daemon is killed, is what the failsafe must reach in time. A control
case kills the daemon with no failsafe running: its lowered jobs must die, or the suite would
prove nothing. A monitor reads every job's limit once a second, from which the test measures the
time from the fault to the last limit restored, and checks that no limit was ever above its request.

The cases run at once (each on its own cluster: the suite's wall time is one case's, ~3 minutes),
and the measured times are printed (docs/admin-guide.md, "What can go wrong", records them).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from testbed.slurm_cluster import SlurmCluster, wait_for
from test_slurm_e2e import ServeProcess, plugged_cluster, submitted_through_the_plugin

from hpcpredict.slurm_time import slurm_duration_s

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STALE_AFTER_S = 15
FAILSAFE_INTERVAL_S = 2
MARGIN_S = 34  # the least the daemon accepts with 2 s looks: 2 x 2 + SLURM's 30 s check
FAILSAFE_TOML = """[failsafe]
heartbeat = "{dir}/watcher.heartbeat"
status = "{dir}/failsafe.status"
stale_after_s = {stale_after_s}
interval_s = {interval_s}
"""
# The shipped defaults (deploy/daemon.toml): looks every 10 s, margin 120 s, bound 40 s, looks of
# the failsafe every 5 s. The watcher raises a running job from its minute to the request (4 min)
# at its first look, so what is at risk is P, which starts at its lowered minute after the fault.
SHIPPED = {"slurm_interval_s": 10, "margin_s": 120, "stale_after_s": 40, "interval_s": 5}
TEST_STEPS = {"slurm_interval_s": 2, "margin_s": MARGIN_S, "stale_after_s": STALE_AFTER_S,
              "interval_s": FAILSAFE_INTERVAL_S}
ENDED = ("COMPLETED", "TIMEOUT", "FAILED", "CANCELLED", "NODE_FAIL")
REQUEST_S = {"R1": 240, "R2": 240, "B": 240, "P": 240, "O": 120}


class FailsafeProcess:
    def __init__(self, cluster: SlurmCluster, config: Path) -> None:
        self.cluster, self.config = cluster, config
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = (self.cluster.dir / "failsafe.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "failsafe", "--config", str(self.config)],
            env=self.cluster.env, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)
        self.process = None

    def log(self) -> str:
        return (self.cluster.dir / "failsafe.log").read_text(errors="replace")


@dataclass
class Monitor:
    """Every job's state, limit and time used, once a second, from squeue."""

    cluster: SlurmCluster
    samples: list[tuple[float, dict[str, tuple[str, int | None, int]]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            done = self.cluster.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%l|%M"], check=False)
            if done.returncode == 0:
                jobs = {}
                for line in done.stdout.split():
                    job_id, state, limit, used = line.split("|")
                    jobs[job_id] = (state, slurm_duration_s(limit), slurm_duration_s(used) or 0)
                self.samples.append((time.time(), jobs))
            self.stop.wait(1.0)

    def highest_limit_s(self, job_id: int) -> int:
        return max((jobs[str(job_id)][1] or 0) for _, jobs in self.samples if str(job_id) in jobs)

    def restored_at(self, job_ids: dict[str, int], since_s: float) -> float | None:
        """When the last of `job_ids` first had its request (REQUEST_S) as its limit (or had ended)
        from `since_s` on; None if one never did. (A watcher that comes back may lower a pending
        job again afterwards, and correct it as it runs: that is not the failsafe's time.)"""
        reached = []
        for name, job in job_ids.items():
            first = next((when for when, jobs in self.samples if when >= since_s and str(job) in jobs
                          and (jobs[str(job)][1] == REQUEST_S[name] or jobs[str(job)][0] in ENDED)), None)
            if first is None:
                return None
            reached.append(first)
        return max(reached)


@dataclass
class Case:
    """One fault: `inject(case)` runs at the fault's time, in the case's thread."""

    name: str
    inject: Callable[[Case], None]
    restores: bool = True  # the failsafe is expected to put the limits back
    b_sleep_s: int = 30  # B's run: P starts when B ends
    with_failsafe: bool = True  # False: the control, which shows the jobs at risk without it
    steps: dict[str, int] = field(default_factory=lambda: dict(TEST_STEPS))
    postgres: object | None = None  # a PostgresServer of the case's own (the store-unavailable case)

    def serve_options(self) -> list[str]:
        return ["--config", str(self.cluster.dir / "failsafe.toml"), "--correction-margin-s",
                str(self.steps["margin_s"]), "--slurm-interval-s", str(self.steps["slurm_interval_s"])]

    @property
    def reach_s(self) -> float:
        """The failsafe's budget: its bound, a look, 10 s for its own commands."""
        return self.steps["stale_after_s"] + self.steps["interval_s"] + 10
    cluster: SlurmCluster | None = None
    serve: ServeProcess | None = None
    failsafe: FailsafeProcess | None = None
    wrappers: Path | None = None
    jobs: dict[str, int] = field(default_factory=dict)
    fault_s: float = 0.0
    notes: dict[str, object] = field(default_factory=dict)
    monitor: Monitor | None = None
    final: dict[str, dict[str, str]] = field(default_factory=dict)


def stop_daemon(serve: ServeProcess, sig: int = signal.SIGTERM) -> None:
    """`serve` stopped with `sig`, waiting up to 90 s (a look in flight may wait out the adapter's
    30 s timeout first: within the unit's TimeoutStopSec=60, but past ServeProcess.stop's 30 s on a
    loaded machine, seen once inside the sid chroot), then killed."""
    if serve.process is not None and serve.process.poll() is None:
        serve.process.send_signal(sig)
        try:
            serve.process.wait(90)
        except subprocess.TimeoutExpired:
            serve.process.kill()
            serve.process.wait(30)
    serve.process = None


# ---------------------------------------------------------------------------- the faults
def _sigkill(case: Case) -> None:
    stop_daemon(case.serve, signal.SIGKILL)  # and kept down: every job ends before it comes back


def _crash_loop(case: Case) -> None:
    """Killed, then started five times by a supervisor (RestartSec=2) on a configuration that
    fails at start, as systemd's Restart=on-failure does until StartLimitBurst gives up."""
    stop_daemon(case.serve, signal.SIGKILL)
    failures = 0
    for _ in range(5):
        time.sleep(2)
        done = subprocess.run(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{case.cluster.dir}/no/such.db",
             "--socket", case.serve.socket, "--http", "", "--slurm", "--config", str(case.cluster.dir / "failsafe.toml")],
            env=case.cluster.env, capture_output=True, text=True, timeout=120)
        failures += done.returncode != 0
    case.notes["failed_starts"] = failures


def _planned_stop(case: Case) -> None:
    """`systemctl stop hpcpredict` (SIGTERM: the drain), 40 s down, then `systemctl start`: P is
    still pending at the restart, and the watcher lowers it again."""
    stop_daemon(case.serve)
    time.sleep(40)
    case.serve.start(*case.serve_options())
    case.notes["restarted_s"] = time.time()
    p = str(case.jobs["P"])
    wait_for(lambda: any(jobs.get(p, ("", 0, 0))[1] == 60 for when, jobs in case.monitor.samples
                         if when > case.notes["restarted_s"]), 60, "the watcher to lower P again", case.cluster)
    case.notes["pending_lowered_again"] = True


def _wrapper(case: Case, command: str, body: str) -> Path:
    """A `command` on the daemon's PATH that does `body` while the file FAULT exists, else the real one."""
    flag = case.wrappers / "FAULT"
    script = case.wrappers / command
    script.write_text(f"#!/bin/sh\nif [ -e {flag} ]; then {body}; fi\nexec /usr/bin/{command} \"$@\"\n")
    script.chmod(0o755)
    return flag


def _watcher_stuck(case: Case) -> None:
    """squeue hangs for the daemon (its watcher's look never returns before the adapter's 30 s
    timeout) while PREDICT answers: the plugin must not lower a job submitted meanwhile."""
    flag = case.wrappers / "FAULT"
    flag.touch()
    time.sleep(STALE_AFTER_S + 10)
    job = submitted_through_the_plugin(case.cluster, "--time=4", "-n", "1", script="sleep 1")
    case.notes["held_job"] = job
    case.notes["held_limit"] = case.cluster.job_fields(job)["TimeLimit"]
    time.sleep(30)
    flag.unlink()  # unstuck: the watcher vouches again, and lowering resumes


def _scontrol_failing(case: Case) -> None:
    """scontrol update fails for the daemon (its corrections refused) and SLURM answers squeue."""
    (case.wrappers / "FAULT").touch()


def _store_stopped(case: Case) -> None:
    """The daemon's PostgreSQL stopped (fast shutdown) and kept down: events fail, and the
    watcher's reports with them; its limit changes must not."""
    case.postgres._cluster._pg_ctl("stop", "-w", "-m", "fast")


def _slurmctld_restarted(case: Case) -> None:
    case.cluster.restart_controller()
    time.sleep(30)
    case.cluster.restart_controller()


def _host_rebooted(case: Case) -> None:
    """The controller host rebooted (its compute nodes not): at shutdown systemd stops slurmctld
    first (the daemon's unit is Before=slurmctld), then the daemon and the failsafe; 30 s later it
    starts the failsafe and the daemon, then slurmctld."""
    cluster = case.cluster
    cluster.controller.terminate()
    cluster.controller.wait(30)
    stop_daemon(case.serve)
    case.failsafe.stop()
    time.sleep(30)
    case.failsafe.start()
    case.serve.start(*case.serve_options())
    index = cluster.processes.index(cluster.controller)
    cluster.controller = cluster._spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
    cluster.processes[index] = cluster.controller
    cluster._wait_until_idle()
    case.notes["slurmctld_back_s"] = time.time()


CASES = [
    Case("sigkill_without_failsafe", _sigkill, restores=False, with_failsafe=False),
    Case("sigkill", _sigkill),
    Case("sigkill_shipped_defaults", _sigkill, steps=dict(SHIPPED)),
    Case("crash_loop", _crash_loop),
    # P still pending at the restart, with 40-70 s left to lower it again: B ends 110 s after it
    # started, the restart is 40 s after the stop (a loaded machine's daemon took 17 s to lower
    # the first limits and more than 12 s to come back, which B's earlier 70 s left it)
    Case("planned_stop", _planned_stop, b_sleep_s=110),
    Case("watcher_stuck", _watcher_stuck),
    Case("scontrol_failing", _scontrol_failing),
    Case("slurmctld_restarted", _slurmctld_restarted, restores=False),
    *([] if os.environ.get("HPCPREDICT_SLURM_SYSTEM_INSIDE") else  # (no PostgreSQL in the chroots)
      [Case("store_stopped", _store_stopped, restores=False)]),
    # (no restore time asserted: the failsafe and the watcher come back together, and the watcher
    # may lower the pending job again within the second the failsafe restored it, or correct the
    # running ones itself first; what is asserted is that no job dies)
    Case("host_rebooted", _host_rebooted, restores=False),
]


# ---------------------------------------------------------------------------- one case
def run_case(case: Case, delay_s: float) -> Case:
    time.sleep(delay_s)  # staggered: eight daemons warming up at once would miss the plugin's 300 ms
    cluster = plugged_cluster()
    # The plugin's budget raised from 300 ms to 5 s: what is tested here is the limits, not the
    # plugin's latency, and eleven daemons starting beside a loaded CI's other suites missed the
    # 300 ms three times in a row inside a chroot (no mark, no lowered job to protect).
    conf = cluster.extra_files["hpcpredict_slurm.conf"]
    cluster.extra_files["hpcpredict_slurm.conf"] = conf.replace("timeout_ms=300", "timeout_ms=5000")
    assert "timeout_ms=5000" in cluster.extra_files["hpcpredict_slurm.conf"]
    cluster.start()
    case.cluster = cluster
    toml = cluster.dir / "failsafe.toml"
    toml.write_text(FAILSAFE_TOML.format(dir=cluster.dir, **case.steps))
    case.wrappers = cluster.dir / "wrappers"
    case.wrappers.mkdir()
    _wrapper(case, "squeue", "exec sleep 600")
    _wrapper(case, "scontrol", '[ "$1" = update ] && { echo "slurm_update error: Unable to contact slurm controller" >&2; exit 1; }')
    case.serve = ServeProcess(cluster)
    case.serve.env = {**cluster.env, "PATH": f"{case.wrappers}:{os.environ['PATH']}"}
    if case.inject is _store_stopped:
        from testbed.pg_server import PostgresServer

        case.postgres = PostgresServer.from_environment()
        case.serve.db = case.postgres.create_database()
    case.serve.start(*case.serve_options())
    case.failsafe = FailsafeProcess(cluster, toml)
    if case.with_failsafe:
        case.failsafe.start()
    case.monitor = Monitor(cluster)
    threading.Thread(target=case.monitor.run, daemon=True).start()
    try:
        shapes = {"R1": ("5", "sleep 100"), "R2": ("5", "sleep 100"), "B": ("4", f"sleep {case.b_sleep_s}"),
                  "O": ("2", "sleep 200"), "P": ("4", "sleep 100")}
        for name, (cpus, script) in shapes.items():  # P pends: the other four fill the 16 CPUs
            minutes = REQUEST_S[name] // 60
            case.jobs[name] = submitted_through_the_plugin(cluster, f"--time={minutes}", "-n", cpus, script=script)
        for name, job in case.jobs.items():  # all lowered to a minute (the watcher may have raised some)
            fields = cluster.job_fields(job)
            assert "prediction_s=1,mode=lower" in fields["AdminComment"], (name, fields)
        assert cluster.job_fields(case.jobs["P"])["TimeLimit"] == "00:01:00"
        running = ("R1", "R2", "B", "O")
        wait_for(lambda: all(cluster.job_fields(case.jobs[n])["JobState"] == "RUNNING" for n in running),
                 30, "R1, R2, B and O to run", cluster)
        beat = cluster.dir / "watcher.heartbeat"
        seen = time.time()
        wait_for(lambda: beat.exists() and json.loads(beat.read_text())["time_s"] > seen, 30,
                 "a look of the watcher with the jobs running", cluster)
        assert cluster.job_fields(case.jobs["P"])["JobState"] == "PENDING"
        case.fault_s = time.time()
        case.inject(case)
        wait_for(lambda: all(cluster.job_fields(j)["JobState"] in ENDED for j in case.jobs.values()),
                 420, "every job to end", cluster, poll_s=2)
        case.final = {name: cluster.job_fields(job) for name, job in case.jobs.items()}
    finally:
        case.monitor.stop.set()
        case.failsafe.stop()
        stop_daemon(case.serve)
        if case.postgres is not None:
            with contextlib.suppress(Exception):  # stopped by the case already
                case.postgres.stop()
    return case


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    from testbed.slurm_cluster import ClusterUnavailable, ensure_packages

    try:
        ensure_packages()
    except ClusterUnavailable as error:
        if os.environ.get("HPCPREDICT_REQUIRE_SERVERS") == "1":
            pytest.fail(str(error))
        pytest.skip(str(error))
    with concurrent.futures.ThreadPoolExecutor(len(CASES)) as pool:
        futures = [pool.submit(run_case, case, 6 * index) for index, case in enumerate(CASES)]
        done = [future.result() for future in futures]
    yield done
    for case in done:
        if case.cluster is not None:
            case.cluster.cleanup()


def elapsed_s(fields: dict[str, str]) -> int:
    return slurm_duration_s(fields["RunTime"]) or 0


def test_without_the_failsafe_the_same_fault_kills_the_lowered_jobs(cases: list[Case]) -> None:
    """The control: the jobs of these cases are at risk for real. With the daemon killed and no
    failsafe, R1, R2 and P end TIMEOUT at their lowered minute (plus SLURM's 30 s check), long
    before the 4 minutes their users asked for; so does O, before its 2 minutes."""
    case = next(case for case in cases if case.name == "sigkill_without_failsafe")
    print("\nwithout the failsafe:", {job: (case.final[job]["JobState"], elapsed_s(case.final[job])) for job in case.jobs})
    for job in ("R1", "R2", "P", "O"):  # killed, and before the request its user asked for
        assert case.final[job]["JobState"] == "TIMEOUT", (job, case.final)
        assert elapsed_s(case.final[job]) < REQUEST_S[job], (job, case.final)


@pytest.mark.parametrize("name", [case.name for case in CASES if case.with_failsafe])
def test_no_job_ends_before_its_request_and_none_outlives_it(cases: list[Case], name: str) -> None:
    case = next(case for case in cases if case.name == name)
    context = f"{name}: {case.final}\nfailsafe.log:\n{case.failsafe.log()[-3000:]}\nserve.log:\n{case.serve.log()}"
    for job in ("R1", "R2", "B", "P"):
        assert case.final[job]["JobState"] == "COMPLETED", (job, context)
    # O outlived its request: killed at it (2 min, SLURM's check within 30 s more), not before
    assert case.final["O"]["JobState"] == "TIMEOUT", context
    assert 120 <= elapsed_s(case.final["O"]) <= 120 + 45, context
    for job_name, job in case.jobs.items():
        assert case.monitor.highest_limit_s(job) <= REQUEST_S[job_name], (job_name, context)
    restored = case.monitor.restored_at({n: case.jobs[n] for n in ("R1", "R2", "O", "P")}, case.fault_s)
    ends = {job: (case.final[job]["JobState"], elapsed_s(case.final[job])) for job in case.jobs}
    print(f"\n{name}: every limit at its request {restored - case.fault_s:.1f} s after the fault"
          if restored else f"\n{name}: not every limit restored (the watcher kept correcting)", ends, case.notes)
    if case.restores:
        # from the fault, or from slurmctld's return when it was down (no job is killed meanwhile)
        since_s = case.notes.get("slurmctld_back_s", case.fault_s)
        assert restored is not None and restored - since_s <= case.reach_s, context
        assert "putting every job hpcpredict lowered back at its request" in case.failsafe.log(), context


def test_a_stuck_watcher_stops_the_lowering_while_predict_answers(cases: list[Case]) -> None:
    case = next(case for case in cases if case.name == "watcher_stuck")
    assert case.notes["held_limit"] == "00:04:00", case.notes  # asked 4 min, kept 4 min
    log = (case.cluster.dir / "slurmctld.log").read_text(errors="replace")
    assert "(daemon: watcher_stale)" in log, log[-3000:]


def test_a_restarted_daemon_lowers_again_what_is_still_pending(cases: list[Case]) -> None:
    case = next(case for case in cases if case.name == "planned_stop")
    assert case.notes.get("pending_lowered_again"), case.notes
    assert case.final["P"]["JobState"] == "COMPLETED"


def test_a_store_that_stops_does_not_stop_the_corrections(cases: list[Case]) -> None:
    """PostgreSQL down: the daemon's events fail (its /health says unhealthy), and its watcher
    goes on raising limits, vouching for them: the failsafe has nothing to do."""
    case = next((case for case in cases if case.name == "store_stopped"), None)
    if case is None:
        pytest.skip("no PostgreSQL in the chroots: the host's run has this case")
    r1 = str(case.jobs["R1"])
    stepped = [when - case.fault_s for when, jobs in case.monitor.samples
               if when > case.fault_s and jobs.get(r1, ("", 0, 0))[1] == 120]
    assert stepped, "the watcher's first INCREMENTAL step (1 -> 2 min) never came after the store stopped"
    acted = "putting every job hpcpredict lowered back" in case.failsafe.log()
    print(f"\nstore_stopped: the watcher's step {stepped[0]:.1f} s after the fault; the failsafe "
          f"{'acted' if acted else 'had nothing to do'}")
    assert not acted, case.failsafe.log()[-2000:]


def test_a_crash_loop_never_vouches_for_the_limits(cases: list[Case]) -> None:
    case = next(case for case in cases if case.name == "crash_loop")
    assert case.notes["failed_starts"] == 5
    beat = json.loads((case.cluster.dir / "watcher.heartbeat").read_text())
    assert beat["time_s"] <= case.fault_s


@pytest.mark.parametrize("over_time_limit_min", [0, 10])
def test_slurms_backfill_plans_with_the_limit_whatever_the_over_time_limit(over_time_limit_min: int) -> None:
    """docs/admin-guide.md's reading of ``OverTimeLimit``: it changes when SLURM kills a job, not
    when its backfill expects it to end. A job pending behind a running one that asked 5 minutes is
    planned to start 5 minutes after it, with OverTimeLimit=0 and =10 alike."""
    from datetime import datetime

    cluster = SlurmCluster(over_time_limit_min=over_time_limit_min, extra_config=["SchedulerParameters=bf_interval=1"])
    cluster.start_or_skip()
    try:
        running = cluster.sbatch("-n", "16", "--time=5", script="sleep 300")
        wait_for(lambda: cluster.job_fields(running)["JobState"] == "RUNNING", 30, "the first job to run", cluster)
        pending = cluster.sbatch("-n", "16", "--time=5", script="sleep 1")
        planned = wait_for(lambda: (start := cluster.job_fields(pending)["StartTime"]) != "Unknown"
                           and start != "N/A" and start, 60, "the backfill's plan for the second job", cluster)
        started = datetime.fromisoformat(cluster.job_fields(running)["StartTime"])
        assert (datetime.fromisoformat(planned) - started).total_seconds() == 300, (planned, started)
        config = cluster.run(["scontrol", "show", "config"]).stdout
        assert f"OverTimeLimit           = {over_time_limit_min} min" in config
    finally:
        cluster.cleanup()


def test_restore_limits_puts_back_only_what_hpcpredict_lowered() -> None:
    """`hpcpredict restore-limits` on a real SLURM (no daemon, no failsafe): jobs marked in lower
    mode below their request get it back, an array task included, running and pending alike;
    a job in record mode, an unmarked job, and one at its request are left as they are;
    `--dry-run` changes nothing."""
    cluster = SlurmCluster()
    cluster.start_or_skip()
    try:
        def marked(mark: str | None, limit_min: int, *options: str) -> str:
            job = cluster.sbatch("--time=30", *options, script="sleep 300")
            update = [f"JobId={job}", f"TimeLimit={limit_min}"]
            if mark is not None:  # as job_submit.lua leaves it (root may set admin_comment)
                update.append(f"AdminComment={mark}")
            cluster.run(["scontrol", "update", *update])
            return str(job)

        lowered = "hpcpredict:request_s=1800,prediction_s=50,mode=lower,procs=1"
        jobs = {
            "running": marked(lowered, 1),
            "pending": marked(lowered, 2, "-n", "16"),  # waits for the node
            "record": marked("hpcpredict:request_s=1800,prediction_s=50,mode=record", 3),
            "unmarked": marked(None, 4),
            "at_request": marked(lowered, 30),
        }
        array = cluster.sbatch("--time=30", "--array=0-1", script="sleep 300")
        cluster.run(["scontrol", "update", f"JobId={array}_1", "TimeLimit=1", f"AdminComment={lowered}"])
        jobs["array_task"] = f"{array}_1"

        def limits() -> dict[str, str]:
            return {name: cluster.job_fields(job)["TimeLimit"] for name, job in jobs.items()}

        before = limits()
        command = [sys.executable, "-m", "hpcpredict.cli", "restore-limits"]
        dry = subprocess.run([*command, "--dry-run"], env=cluster.env, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0 and "would restore 3 limit(s)" in dry.stdout, dry.stdout + dry.stderr
        assert limits() == before
        done = subprocess.run([*command, "--format", "json"], env=cluster.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        restored = {job["update_id"] for job in json.loads(done.stdout)["jobs"] if job["restored"]}
        assert restored == {jobs["running"], jobs["pending"], jobs["array_task"]}, done.stdout
        after = limits()
        assert after == {**before, "running": "00:30:00", "pending": "00:30:00", "array_task": "00:30:00"}, after
        again = subprocess.run(command, env=cluster.env, capture_output=True, text=True, timeout=60)
        assert "restored 0 limit(s)" in again.stdout and limits() == after  # idempotent
    finally:
        cluster.cleanup()
