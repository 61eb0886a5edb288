"""A submission storm: sbatch as fast as slurmctld takes it, with job_submit.lua asking the daemon.

Run on demand, as root, with Debian's Slurm installed (testbed/slurm_cluster.py's packages), and
copy the table into docs/performance.md, which records it:

    python benchmarks/storm.py --duration-s 60              # 4 streams, 4 users, phases of 15 s
    python benchmarks/storm.py --duration-s 60 --json storm.json

Starts the test cluster of testbed/slurm_cluster.py (one slurmctld + slurmd on loopback,
``MaxJobCount=250000``) with slurm-plugin's job_submit.lua in ``mode=lower``, and a real
``hpcpredict serve`` trained first with ``hpcpredict train`` on the bundled KTH-SP2 sample, its
dates moved so that its last job ended a day ago: a history older than 30 days, or fewer than
``min_trained_jobs`` learned jobs, makes the daemon *not ready*, and PREDICT would answer the
request without the model's verdict counting; here it must be the model's path that is timed (the
script stops if PING does not say ``ready=1``, and counts the daemon's fallback answers). The daemon
runs without ``--slurm`` (no watcher polling squeue), as in bench_plugin_latency.py, so what loads
slurmctld is the storm alone.

`--streams` threads each submit back to back (``sbatch --parsable --hold --time=<5-120 min>
-n <1-4> -o /dev/null --wrap 'sleep 1'``; every `--array-every`-th submission of a stream is a
job array ``--array=1-<array-size>``), rotating over `--users` system users (hpstorm1..N, created
with ``useradd --system --no-create-home`` when missing). Every job is held, so nothing runs and
the node stays free. Each submission's process is started with its user's uid and gids set by
``subprocess`` itself (what ``runuser -u`` does, without runuser's PAM session in every timed
call: ``--launcher runuser`` uses it instead), and its wall time is the whole ``sbatch`` command,
fork and exec included, as a user sees it.

The storm's `--duration-s` is split into an even number of phases of about `--phase-s` seconds,
half with the plugin enabled (asking the daemon) and half with ``enabled=0`` (the Lua script runs
and returns at once: the baseline), ordered ABBA (baseline, enabled, enabled, baseline, ...) so
that a drift linear in time (slurmctld holds more jobs as the storm goes on) weighs on both alike.
The setting is switched between phases as bench_plugin_latency.py does (hpcpredict_slurm.conf
rewritten, job_submit.lua touched, one untimed sbatch to make slurmctld reload it, whose
AdminComment is checked: the mark when enabled, none when not).

At every phase boundary it reads slurmctld's CPU (utime + stime of its pid, /proc/PID/stat), the
daemon's, sdiag's REQUEST_SUBMIT_BATCH_JOB count and total time, and the daemon's /metrics
(its admin API on a free loopback port): the PREDICT histogram ``hpcpredict_request_seconds
{verb="PREDICT"}``, whose bucket deltas over the enabled phases give the daemon's own PREDICT
latency under the storm (from the line read to the answer, hpcpredict/daemon/views/metrics.py;
buckets at 0.1, 0.25, 0.5, 1, 2, 5, 10, 50, 250, 1000 ms, so a percentile is known only as the
bucket it falls in). The goal it is judged against: PREDICT p99 < 2 ms (a bucket bound, so "p99 in
a bucket up to 2 ms" decides it). The plugin's added time per submission is the difference of the
sbatch medians (and p95s), and of sdiag's mean time per submit RPC inside slurmctld; no goal.

Progress goes to stderr, the report (markdown) to stdout, the raw numbers to `--json FILE`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import pwd
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed/

from hpcpredict.daemon.fronts.client import DaemonClient
from testbed.slurm_cluster import SlurmCluster, slurm_release

SAMPLE_LOG = REPO / "swf" / "KTH-SP2-sample.swf"
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")
BASELINE, ENABLED = "plugin disabled (baseline)", "plugin asking the daemon"
SUBMIT_RPC = re.compile(
    r"^\s*REQUEST_SUBMIT_BATCH_JOB\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", re.MULTILINE)
JOBS_SUBMITTED = re.compile(r"^\s*Jobs submitted:\s*(\d+)", re.MULTILINE)
SDIAG_SHOWN = ("Jobs submitted", "Server thread count", "Agent queue size", "REQUEST_SUBMIT_BATCH_JOB", "hpstorm")


# ---------------------------------------------------------------------------- measurements
@dataclass
class Call:
    """One sbatch command: when it began (s after its phase's start), its wall time, its outcome."""

    at_s: float
    wall_s: float
    ok: bool
    tasks: int  # jobs it asked for: 1, or an array's task count
    user: str


@dataclass
class Snapshot:
    """What is read at a phase boundary; a phase's figures are the differences of two."""

    ctl_cpu_s: float
    daemon_cpu_s: float
    submit_rpcs: int | None  # sdiag's REQUEST_SUBMIT_BATCH_JOB count (None: sdiag gave nothing)
    submit_rpc_us: int | None  # ... and its total time, microseconds
    jobs_submitted: int | None
    predict_buckets: dict[str, float]  # le -> cumulative count (the daemon's PREDICT histogram)
    predict_sum_s: float
    fallbacks: float  # PREDICTs answered with the request: the model not ready
    predict_errors: float  # PREDICTs answered ERR


@dataclass
class Phase:
    setting: str
    planned_s: float
    wall_s: float = 0.0
    calls: list[Call] = field(default_factory=list)
    before: Snapshot | None = None
    after: Snapshot | None = None


def cpu_s(pid: int) -> float:
    """User + system seconds of process `pid`, all its threads (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def sdiag(cluster: SlurmCluster) -> str:
    """sdiag's report ("" when it fails: the storm is measured all the same)."""
    done = cluster.run(["sdiag"], check=False, timeout=30)
    return done.stdout if done.returncode == 0 else ""


def scrape(http_url: str) -> str:
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=30) as response:
        return response.read().decode()


def predict_metrics(text: str) -> tuple[dict[str, float], float, float, float]:
    """(PREDICT bucket bound -> cumulative count, its sum in s, fallback answers, ERR answers) from
    the daemon's exposition (metrics.py: ``hpcpredict_request_seconds`` labelled by verb)."""
    from prometheus_client.parser import text_string_to_metric_families

    buckets: dict[str, float] = {}
    sum_s = fallbacks = errors = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name == "hpcpredict_request_seconds" and sample.labels.get("verb") == "PREDICT":
                if sample.name.endswith("_bucket"):
                    buckets[sample.labels["le"]] = sample.value
                elif sample.name.endswith("_sum"):
                    sum_s = sample.value
            elif family.name == "hpcpredict_fallback_predictions" and sample.name.endswith("_total"):
                fallbacks += sample.value
            elif (family.name == "hpcpredict_requests" and sample.name.endswith("_total")
                  and sample.labels.get("verb") == "PREDICT" and sample.labels.get("outcome") != "ok"):
                errors += sample.value
    return buckets, sum_s, fallbacks, errors


def snapshot(cluster: SlurmCluster, daemon_pid: int, http_url: str) -> Snapshot:
    report = sdiag(cluster)
    rpc = SUBMIT_RPC.search(report)
    submitted = JOBS_SUBMITTED.search(report)
    buckets, sum_s, fallbacks, errors = predict_metrics(scrape(http_url))
    assert cluster.controller is not None
    return Snapshot(
        ctl_cpu_s=cpu_s(cluster.controller.pid), daemon_cpu_s=cpu_s(daemon_pid),
        submit_rpcs=int(rpc.group(1)) if rpc else (0 if report else None),
        submit_rpc_us=int(rpc.group(3)) if rpc else (0 if report else None),
        jobs_submitted=int(submitted.group(1)) if submitted else None,
        predict_buckets=buckets, predict_sum_s=sum_s, fallbacks=fallbacks, predict_errors=errors,
    )


def sdiag_lines(cluster: SlurmCluster) -> list[str]:
    """sdiag's lines this benchmark is about, to print as they were at the start and at the end."""
    return [line.rstrip() for line in sdiag(cluster).splitlines() if any(key in line for key in SDIAG_SHOWN)]


# ---------------------------------------------------------------------------- set-up
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def storm_users(count: int) -> list[pwd.struct_passwd]:
    """hpstorm1..count, created as system users without a home when missing: several owners, as a
    cluster's submissions have (the plugin predicts for each job's uid)."""
    users = []
    for k in range(1, count + 1):
        name = f"hpstorm{k}"
        try:
            users.append(pwd.getpwnam(name))
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                           check=True)
            users.append(pwd.getpwnam(name))
    return users


def ending_a_day_ago(log: Path) -> str:
    """The log's text with its UnixStartTime moved so that its last job ended a day ago (a history
    older than 30 days makes the daemon not ready: docs/daemon.md, "Readiness")."""
    from hpcpredict.logs.workload import load_workload

    workload = load_workload(log)
    last_end_s = max(job.request.submit_s + max(job.wait_s, 0) + job.run_s for job in workload.jobs)
    start_s = int(time.time()) - 86_400 - last_end_s
    lines = [line for line in log.read_text().splitlines() if not line.startswith("; UnixStartTime:")]
    return f"; UnixStartTime: {start_s}\n" + "\n".join(lines) + "\n"


def start_daemon(cluster: SlurmCluster, socket_path: str, http_port: int) -> subprocess.Popen:
    """`hpcpredict serve` on a store `hpcpredict train` warmed, its admin API on `http_port`; once
    PING answers ``ready=1`` (else SystemExit: PREDICT would not be the model's)."""
    db = f"sqlite:///{cluster.dir / 'daemon.db'}"
    recent = cluster.dir / "recent.swf"
    recent.write_text(ending_a_day_ago(SAMPLE_LOG))
    subprocess.run([sys.executable, "-m", "hpcpredict.cli", "train", str(recent), "--db", db],
                   env=cluster.env, check=True, capture_output=True)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", socket_path,
         "--http", f"127.0.0.1:{http_port}", "--spool", str(cluster.dir / "jobcomp.spool"), "--log-level", "warning"],
        env=cluster.env,
    )
    deadline = time.monotonic() + 60
    while not os.path.exists(socket_path):
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the daemon did not start")
        time.sleep(0.05)
    with DaemonClient(socket_path) as client:
        ping = client.request("PING")
    if ping.get("ready") != "1":
        raise SystemExit(f"the daemon is not ready, PREDICT would answer the requests: {ping}")
    while True:  # the admin API may bind a little after the socket
        try:
            scrape(f"http://127.0.0.1:{http_port}")
            return daemon
        except OSError:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the daemon's admin API did not answer") from None
            time.sleep(0.1)


def settings(cluster: SlurmCluster, socket_path: str, enabled: bool) -> None:
    """Switch the plugin (as bench_plugin_latency.py does), then check on one untimed submission
    that slurmctld reloaded it: an enabled plugin marks the job, a disabled one does not."""
    values = {"socket": socket_path, "mode": "lower", "enabled": int(enabled)}
    (cluster.dir / "hpcpredict_slurm.conf").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    script = cluster.dir / "job_submit.lua"
    os.utime(script, (time.time(), time.time() + 1))  # slurmctld reloads a script whose file changed
    job_id = cluster.sbatch("--hold", "--time=60", script="true")
    comment = cluster.job_fields(job_id).get("AdminComment", "")
    if ("mode=lower" in comment) != enabled:
        raise SystemExit(f"the plugin did not switch to enabled={int(enabled)}: job {job_id}'s "
                         f"AdminComment is {comment!r}\n{cluster.log_tail()}")


# ---------------------------------------------------------------------------- the storm
class Stream(threading.Thread):
    """One submitter: sbatch after sbatch until the deadline, rotating over the users; a refused
    or failed submission is counted, never raised."""

    def __init__(self, index: int, args: argparse.Namespace, cluster: SlurmCluster, users: list[pwd.struct_passwd],
                 deadline: float, began: float, calls: list[Call], errors: list[str], seed: int) -> None:
        super().__init__(daemon=True)
        self.index, self.args, self.cluster, self.users = index, args, cluster, users
        self.deadline, self.began, self.calls, self.errors = deadline, began, calls, errors
        self.random = random.Random(seed)
        self.sbatch = shutil.which("sbatch") or "sbatch"

    def run(self) -> None:
        k = 0
        while time.monotonic() < self.deadline:
            user = self.users[(self.index + k) % len(self.users)]
            array = self.args.array_every > 0 and k % self.args.array_every == self.args.array_every - 1
            self.calls.append(self.submit(user, array))
            k += 1

    def command(self, user: pwd.struct_passwd, array: bool) -> list[str]:
        command = [self.sbatch, "--parsable", "--hold", f"--time={self.random.randint(5, 120)}",
                   "-n", str(self.random.randint(1, 4)), "-o", "/dev/null",
                   *([f"--array=1-{self.args.array_size}"] if array else []), "--wrap", "sleep 1"]
        return ["runuser", "-u", user.pw_name, "--", *command] if self.args.launcher == "runuser" else command

    def submit(self, user: pwd.struct_passwd, array: bool) -> Call:
        env = {**self.cluster.env, "USER": user.pw_name, "LOGNAME": user.pw_name, "HOME": "/"}
        as_user = {} if self.args.launcher == "runuser" else {"user": user.pw_uid, "group": user.pw_gid,
                                                               "extra_groups": []}
        at = time.monotonic()
        began = time.perf_counter()
        try:
            done = subprocess.run(self.command(user, array), check=False, env=env, cwd=self.cluster.dir, capture_output=True,
                                  text=True, timeout=120, **as_user)
            ok = done.returncode == 0 and done.stdout.strip() != ""
            if not ok:
                self.errors.append(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
        except (subprocess.TimeoutExpired, OSError) as error:
            ok = False
            self.errors.append(f"{type(error).__name__}: {error}")
        wall = time.perf_counter() - began
        return Call(at - self.began, wall, ok, self.args.array_size if array else 1, user.pw_name)


def run_phase(number: int, total: int, phase: Phase, args: argparse.Namespace, cluster: SlurmCluster,
              users: list[pwd.struct_passwd], errors: list[str]) -> None:
    """`args.streams` streams for `phase.planned_s`; progress lines every `args.progress_s`."""
    print(f"phase {number}/{total}: {phase.setting}, {phase.planned_s:.1f} s, {args.streams} stream(s)", file=sys.stderr,
          flush=True)
    began = time.monotonic()
    deadline = began + phase.planned_s
    per_stream: list[list[Call]] = [[] for _ in range(args.streams)]
    streams = [Stream(s, args, cluster, users, deadline, began, per_stream[s], errors,
                      seed=args.seed * 1000 + number * 100 + s) for s in range(args.streams)]
    for stream in streams:
        stream.start()
    next_progress = began + args.progress_s
    while alive := [stream for stream in streams if stream.is_alive()]:
        alive[0].join(timeout=max(0.05, next_progress - time.monotonic()))
        if time.monotonic() >= next_progress:
            next_progress += args.progress_s
            elapsed = time.monotonic() - began
            calls = [call for calls in per_stream for call in calls]
            failed = sum(not call.ok for call in calls)
            print(f"  {elapsed:5.1f} s: {len(calls):,} sbatch ({len(calls) / max(elapsed, 1e-9):.0f}/s), "
                  f"{failed} failed; load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    phase.wall_s = time.monotonic() - began
    phase.calls = sorted((call for calls in per_stream for call in calls), key=lambda call: call.at_s)


def phase_plan(duration_s: float, phase_s: float) -> list[Phase]:
    """An even number of phases of ~phase_s filling duration_s, ABBA-ordered from the baseline."""
    count = max(2, 2 * round(duration_s / (2 * phase_s)))
    order = [(BASELINE, ENABLED) if pair % 2 == 0 else (ENABLED, BASELINE) for pair in range(count // 2)]
    return [Phase(setting, duration_s / count) for pair in order for setting in pair]


# ---------------------------------------------------------------------------- summaries
def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the nearest ranks (numpy's default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def setting_summary(phases: list[Phase]) -> dict[str, object]:
    """One setting's figures over its phases."""
    calls = [call for phase in phases for call in phase.calls]
    walls = [call.wall_s for call in calls if call.ok]
    wall_s = sum(phase.wall_s for phase in phases)
    pairs = [(phase.before, phase.after) for phase in phases if phase.before and phase.after]
    rpcs = [delta(a.submit_rpcs, b.submit_rpcs) for b, a in pairs]
    rpc_us = [delta(a.submit_rpc_us, b.submit_rpc_us) for b, a in pairs]
    rpc_count = None if any(x is None for x in rpcs) else sum(rpcs)  # type: ignore[arg-type]
    rpc_total = None if any(x is None for x in rpc_us) else sum(rpc_us)  # type: ignore[arg-type]
    ctl_cpu = sum(a.ctl_cpu_s - b.ctl_cpu_s for b, a in pairs)
    submitted = [delta(a.jobs_submitted, b.jobs_submitted) for b, a in pairs]
    return {
        "phases": len(phases), "wall_s": wall_s, "calls": len(calls), "failed": sum(not c.ok for c in calls),
        "jobs": sum(c.tasks for c in calls if c.ok),
        "calls_per_s": len(calls) / wall_s if wall_s else math.nan,
        "jobs_per_s": sum(c.tasks for c in calls if c.ok) / wall_s if wall_s else math.nan,
        "median_s": percentile(walls, 0.5), "p95_s": percentile(walls, 0.95), "p99_s": percentile(walls, 0.99),
        "max_s": max(walls) if walls else math.nan,
        "ctl_cpu_s": ctl_cpu, "ctl_cpu_per_call_ms": 1e3 * ctl_cpu / len(calls) if calls else math.nan,
        "ctl_cpu_share": ctl_cpu / wall_s if wall_s else math.nan,
        "daemon_cpu_s": sum(a.daemon_cpu_s - b.daemon_cpu_s for b, a in pairs),
        "sdiag_submit_rpcs": rpc_count, "sdiag_submit_rpc_total_us": rpc_total,
        "sdiag_submit_rpc_mean_us": rpc_total / rpc_count if rpc_count else None,
        "sdiag_jobs_submitted": None if any(x is None for x in submitted) else sum(submitted),  # type: ignore[arg-type]
        "predicts": sum(a.predict_buckets.get("+Inf", 0) - b.predict_buckets.get("+Inf", 0) for b, a in pairs),
        "fallbacks": sum(a.fallbacks - b.fallbacks for b, a in pairs),
        "predict_errors": sum(a.predict_errors - b.predict_errors for b, a in pairs),
    }


def bucket_deltas(phases: list[Phase]) -> tuple[list[tuple[float, float]], float]:
    """The PREDICT histogram answered over `phases`: [(upper bound s, count in that bucket)] in
    order (the last bound inf), and the seconds they summed to."""
    cumulative: dict[str, float] = {}
    sum_s = 0.0
    for phase in phases:
        if phase.before and phase.after:
            for le, value in phase.after.predict_buckets.items():
                cumulative[le] = cumulative.get(le, 0.0) + value - phase.before.predict_buckets.get(le, 0.0)
            sum_s += phase.after.predict_sum_s - phase.before.predict_sum_s
    bounds = sorted(cumulative, key=float)
    counts, previous = [], 0.0
    for le in bounds:
        counts.append((float(le), cumulative[le] - previous))
        previous = cumulative[le]
    return counts, sum_s


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> tuple[float, float] | None:
    """The bucket (lower, upper] bound in seconds where the q-quantile lies; None when empty."""
    total = sum(count for _, count in buckets)
    if not total:
        return None
    running, lower = 0.0, 0.0
    for upper, count in buckets:
        running += count
        if running >= q * total:
            return lower, upper
        lower = upper
    return lower, math.inf


def histogram_max(buckets: list[tuple[float, float]]) -> tuple[float, float] | None:
    lower, found = 0.0, None
    for upper, count in buckets:
        if count:
            found = (lower, upper)
        lower = upper
    return found


def ms(seconds: float | None, digits: int = 2) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "—"
    return f"{1e3 * seconds:.{digits}f}"


def bucket_text(bucket: tuple[float, float] | None) -> str:
    if bucket is None:
        return "—"
    lower, upper = bucket
    return f"> {1e3 * lower:g} ms" if math.isinf(upper) else f"{1e3 * lower:g}-{1e3 * upper:g} ms"


def report(args: argparse.Namespace, summaries: dict[str, dict[str, object]], buckets: list[tuple[float, float]],
           predict_sum_s: float, environment: dict[str, object], sdiag_at: dict[str, list[str]]) -> dict[str, object]:
    """Print the markdown report; return the PREDICT figures it computed (for the JSON)."""
    base, on = summaries[BASELINE], summaries[ENABLED]
    print(f"# Submission storm: {args.duration_s:g} s in {base['phases'] + on['phases']} ABBA phases "
          f"({args.duration_s / (base['phases'] + on['phases']):.1f} s each), {args.streams} stream(s), "
          f"{args.users} users, every {args.array_every}th submission an array of {args.array_size}, all held")
    print(f"# Slurm {environment['slurm']}, nproc {environment['nproc']}, Python {platform.python_version()}; "
          f"load average at start {environment['load_start']}, at end {environment['load_end']}")
    print()
    print(f"| | {BASELINE} | {ENABLED} | added by the plugin |")
    print("|---|---:|---:|---:|")

    def row(label: str, a: str, b: str, diff: str = "") -> None:
        print(f"| {label} | {a} | {b} | {diff} |")

    row("storm time, s", f"{base['wall_s']:.1f}", f"{on['wall_s']:.1f}")
    row("sbatch calls (failed)", f"{base['calls']:,} ({base['failed']})", f"{on['calls']:,} ({on['failed']})")
    row("sbatch calls / s", f"{base['calls_per_s']:.1f}", f"{on['calls_per_s']:.1f}",
        f"{on['calls_per_s'] - base['calls_per_s']:+.1f}")
    row("jobs / s (array tasks counted)", f"{base['jobs_per_s']:.1f}", f"{on['jobs_per_s']:.1f}",
        f"{on['jobs_per_s'] - base['jobs_per_s']:+.1f}")
    for key, label in (("median_s", "sbatch wall median, ms"), ("p95_s", "sbatch wall p95, ms"),
                       ("p99_s", "sbatch wall p99, ms"), ("max_s", "sbatch wall max, ms")):
        row(label, ms(base[key]), ms(on[key]), f"{1e3 * (on[key] - base[key]):+.2f}")  # type: ignore[operator]
    row("slurmctld CPU, s (share of wall)", f"{base['ctl_cpu_s']:.2f} ({100 * base['ctl_cpu_share']:.0f}%)",
        f"{on['ctl_cpu_s']:.2f} ({100 * on['ctl_cpu_share']:.0f}%)")
    row("slurmctld CPU per sbatch, ms", f"{base['ctl_cpu_per_call_ms']:.2f}", f"{on['ctl_cpu_per_call_ms']:.2f}",
        f"{on['ctl_cpu_per_call_ms'] - base['ctl_cpu_per_call_ms']:+.2f}")  # type: ignore[operator]
    if base["sdiag_submit_rpc_mean_us"] is not None and on["sdiag_submit_rpc_mean_us"] is not None:
        row("sdiag REQUEST_SUBMIT_BATCH_JOB count", f"{base['sdiag_submit_rpcs']:,}", f"{on['sdiag_submit_rpcs']:,}")
        row("sdiag REQUEST_SUBMIT_BATCH_JOB mean, ms", ms(base["sdiag_submit_rpc_mean_us"] / 1e6),
            ms(on["sdiag_submit_rpc_mean_us"] / 1e6),
            f"{(on['sdiag_submit_rpc_mean_us'] - base['sdiag_submit_rpc_mean_us']) / 1e3:+.2f}")
    else:
        row("sdiag REQUEST_SUBMIT_BATCH_JOB", "not reported", "not reported")
    if base["sdiag_jobs_submitted"] is not None and on["sdiag_jobs_submitted"] is not None:
        row("sdiag Jobs submitted", f"{base['sdiag_jobs_submitted']:,}", f"{on['sdiag_jobs_submitted']:,}")
    row("daemon CPU, s", f"{base['daemon_cpu_s']:.2f}", f"{on['daemon_cpu_s']:.2f}")
    if on["predicts"]:
        row("daemon CPU per PREDICT, ms", "", f"{1e3 * on['daemon_cpu_s'] / on['predicts']:.3f}")  # type: ignore[operator]
    row("PREDICTs answered (fallbacks, errors)", f"{base['predicts']:,.0f} ({base['fallbacks']:.0f}, "
        f"{base['predict_errors']:.0f})", f"{on['predicts']:,.0f} ({on['fallbacks']:.0f}, {on['predict_errors']:.0f})")

    total = sum(count for _, count in buckets)
    p50, p99, top = histogram_quantile(buckets, 0.5), histogram_quantile(buckets, 0.99), histogram_max(buckets)
    within_2ms = sum(count for upper, count in buckets if upper <= 0.002) / total if total else math.nan
    met = p99 is not None and p99[1] <= 0.002
    print()
    print("| daemon's PREDICT latency under the storm (its histogram, enabled phases) | |")
    print("|---|---:|")
    print(f"| PREDICTs | {total:,.0f} |")
    print(f"| p50 | {bucket_text(p50)} |")
    print(f"| p99 | {bucket_text(p99)} |")
    print(f"| max | {bucket_text(top)} |")
    print(f"| mean | {ms(predict_sum_s / total if total else None, 3)} ms |")
    print(f"| answered within 2 ms | {100 * within_2ms:.2f}% |")
    print(f"| goal p99 < 2 ms | {'met' if met else 'NOT met'} |")
    print()
    print("Bucket bounds (ms): " + ", ".join(f"{1e3 * upper:g}" for upper, _ in buckets if not math.isinf(upper))
          + "; a percentile is known as the bucket it falls in. Daemon latency is from its reading the "
          "line to its answer (hpcpredict/daemon/views/metrics.py); sbatch wall is the whole command "
          "(fork, exec, munge, RPC, plugin) as its user.")
    for when, lines in sdiag_at.items():
        print()
        print(f"sdiag {when}:")
        print("```")
        print("\n".join(lines) if lines else "(sdiag gave nothing)")
        print("```")
    return {"buckets": [[upper, count] for upper, count in buckets], "sum_s": predict_sum_s, "count": total,
            "p50_bucket_s": p50, "p99_bucket_s": p99, "max_bucket_s": top, "within_2ms": within_2ms,
            "goal_p99_under_2ms_met": met}


# ---------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=60, help="storm time, both settings together")
    parser.add_argument("--phase-s", type=float, default=15, help="about this long each phase (ABBA)")
    parser.add_argument("--streams", type=int, default=4, help="parallel submitters")
    parser.add_argument("--users", type=int, default=4, help="distinct Unix users (hpstorm1..N)")
    parser.add_argument("--array-every", type=int, default=10, help="every Nth submission of a stream an array (0: none)")
    parser.add_argument("--array-size", type=int, default=10, help="tasks per array (--array=1-N)")
    parser.add_argument("--launcher", choices=("setuid", "runuser"), default="setuid",
                        help="how sbatch runs as its user: subprocess's own setuid, or runuser -u (adds PAM)")
    parser.add_argument("--progress-s", type=float, default=5, help="seconds between progress lines")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the raw numbers here")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: it starts slurmctld, creates users and submits as them")
    if args.streams < 1 or args.users < 1 or args.duration_s <= 0:
        raise SystemExit("--streams, --users and --duration-s must be positive")

    environment: dict[str, object] = {
        "nproc": os.cpu_count(), "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "slurm": "{}.{:02d}".format(*slurm_release()), "host": platform.node(),
    }
    print(f"nproc {environment['nproc']}, load average {environment['load_start']}", file=sys.stderr, flush=True)
    users = storm_users(args.users)
    phases = phase_plan(args.duration_s, args.phase_s)
    errors: list[str] = []
    sdiag_at: dict[str, list[str]] = {}
    cluster = SlurmCluster(job_submit_lua=REPO / "slurm-plugin" / "job_submit.lua",
                           extra_config=["MaxJobCount=250000"])
    daemon: subprocess.Popen | None = None
    try:
        cluster.start()
        socket_path = str(cluster.dir / "hpcpredict.sock")
        http_url = f"http://127.0.0.1:{(port := free_port())}"
        print(f"cluster up in {cluster.dir}; training the daemon on {SAMPLE_LOG.name}", file=sys.stderr, flush=True)
        daemon = start_daemon(cluster, socket_path, port)
        sdiag_at["at the start"] = sdiag_lines(cluster)
        current: str | None = None
        for number, phase in enumerate(phases, 1):
            if phase.setting != current:
                settings(cluster, socket_path, enabled=phase.setting == ENABLED)
                current = phase.setting
            phase.before = snapshot(cluster, daemon.pid, http_url)
            run_phase(number, len(phases), phase, args, cluster, users, errors)
            phase.after = snapshot(cluster, daemon.pid, http_url)
        sdiag_at["at the end"] = sdiag_lines(cluster)
    finally:
        if daemon is not None:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(5)
        print("stopping the cluster (cancelling the held jobs)", file=sys.stderr, flush=True)
        cluster.cleanup()
    environment["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    summaries = {setting: setting_summary([p for p in phases if p.setting == setting]) for setting in (BASELINE, ENABLED)}
    buckets, predict_sum_s = bucket_deltas([p for p in phases if p.setting == ENABLED])
    predict = report(args, summaries, buckets, predict_sum_s, environment, sdiag_at)
    if errors:
        distinct = sorted(set(errors))
        print(f"\n{len(errors)} failed submissions; {len(distinct)} distinct messages, e.g.:\n  "
              + "\n  ".join(distinct[:5]))
    if args.json:
        args.json.write_text(json.dumps({
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "environment": environment, "summaries": summaries, "predict": predict, "sdiag": sdiag_at,
            "errors": errors[:1000],
            "phases": [{"setting": p.setting, "planned_s": p.planned_s, "wall_s": p.wall_s,
                        "before": asdict(p.before) if p.before else None,
                        "after": asdict(p.after) if p.after else None,
                        "calls": [asdict(call) for call in p.calls]} for p in phases],
        }, indent=1, default=str))
        print(f"\nraw numbers in {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
