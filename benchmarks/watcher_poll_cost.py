"""What the daemon's SLURM watcher costs at a large site: N held jobs in a real slurmctld (1,000 to
100,000), each backend of the SLURM adapter, the watcher polling on its 10 s interval for a window.
docs/admin-guide.md records the table this prints.

    python benchmarks/watcher_poll_cost.py --sizes 1000,5000 --window-s 30
    python benchmarks/watcher_poll_cost.py --json watcher-cost.json      # 1k, 5k, 20k, 50k, 100k jobs

As root, with Slurm installed (a `testbed.slurm_cluster.SlurmCluster` on loopback, started once:
the jobs are submitted incrementally to reach each size in turn). The pyslurm matching the
installed Slurm is built from ../shared/pyslurm by `testbed.pyslurm_wheel` (cached under
/var/cache/hpcpredict-wheels; ~8 min the first time) and installed into a temporary folder.

Per size and backend (``cli-json``: ``CliBackend(listing="json")``, ``cli-lean``:
``CliBackend(listing="lean")``, ``pyslurm``: ``PyslurmBackend``), a new `SlurmWatcher` with a store
that answers what a store would (after the first poll, every job "submitted") makes a first poll,
which reports every job to the store once and is reported apart, then polls at each 10 s tick for
the window. Reported:

* poll wall time: the first poll, and the median and max of the window's polls;
* the daemon side's CPU over the window (sleeping included) as % of one core: this process's
  (`time.process_time`) and its children's, squeue's (``RUSAGE_CHILDREN``), and their sum;
* RSS (VmRSS) before the watcher was made, the max after each poll, and the increase;
* the bytes each poll read from SLURM (the commands' stdout, counted by a wrapped `runner`;
  "-" for pyslurm, which reads through libslurm's RPCs);
* slurmctld's CPU over the window as % of one core (utime + stime in /proc/<pid>/stat).

Each measurement runs in a fresh process of this script (``--measure``): RSS that one backend's
listing of 100,000 jobs raised is not returned to the system when it is freed, and would hide
the next backend's increase; and the daemon polls from a process of its own too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testbed/ and hpcpredict/, from any folder

from hpcpredict.job_events import JobEvent, Started, Submitted  # noqa: E402
from hpcpredict.slurm.adapter import DEFAULT_TIMEOUT_S, CliBackend, SlurmJob, run_command  # noqa: E402

DEFAULT_SIZES = "1000,5000,20000,50000,100000"
DEFAULT_BACKENDS = "cli-json,cli-lean,pyslurm"
# slurmctld's default MaxJobCount is 10,000; a held job is one record (an array would be one
# record while pending, so none is used), and MaxArraySize is raised with it as a site would.
SLURM_LIMITS = ["MaxJobCount=250000", "MaxArraySize=100001"]
SUBMIT_STREAMS = 4  # parallel sbatch loops: one sbatch at a time leaves slurmctld idle between them
SUBMIT_COMMAND = "sbatch --parsable --hold --time=10 -o /dev/null --wrap 'sleep 1'"
PROGRESS_EVERY_S = 15.0
SETTLE_S = 10.0  # after submitting: slurmctld saves its state and runs its scheduler once
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024


# ---------------------------------------------------------------------------- what is measured
def rss_bytes() -> int:
    """This process's resident set (VmRSS of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def process_cpu_s(pid: int) -> float:
    """utime + stime of process `pid`, every thread (fields 14 and 15 of /proc/<pid>/stat, after
    the command name, which may hold spaces, in parentheses)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children_cpu_s() -> float:
    """CPU of the children this process has waited for (squeue's, once it has exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Snapshot:
    """The clocks a span's costs are the differences of."""

    wall_s: float
    self_cpu_s: float
    children_cpu_s: float
    slurmctld_cpu_s: float

    @classmethod
    def take(cls, slurmctld_pid: int) -> Snapshot:
        return cls(time.monotonic(), time.process_time(), children_cpu_s(), process_cpu_s(slurmctld_pid))


@dataclass
class Span:
    """Costs between two snapshots: wall seconds, CPU seconds, and CPU as % of one core."""

    wall_s: float
    self_cpu_s: float
    children_cpu_s: float
    slurmctld_cpu_s: float

    @classmethod
    def between(cls, start: Snapshot, end: Snapshot) -> Span:
        return cls(end.wall_s - start.wall_s, end.self_cpu_s - start.self_cpu_s,
                   end.children_cpu_s - start.children_cpu_s, end.slurmctld_cpu_s - start.slurmctld_cpu_s)

    def percent(self, cpu_s: float) -> float:
        return 100 * cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def byte_count(text: str | bytes | None) -> int:
    """Bytes of a command's stdout; `run_command` decodes it, and an ASCII str (squeue's JSON)
    is counted without encoding a copy of it."""
    if text is None:
        return 0
    if isinstance(text, bytes):
        return len(text)
    return len(text) if text.isascii() else len(text.encode())


class CountingRunner:
    """`run_command`, counting each command's stdout bytes: what the watcher reads from SLURM."""

    def __init__(self) -> None:
        self.bytes = 0
        self.commands = 0

    def __call__(self, command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
        done = run_command(command, timeout_s)
        self.bytes += byte_count(done.stdout)
        self.commands += 1
        return done

    def take(self) -> tuple[int, int]:
        """(bytes, commands) since the last take."""
        counts = (self.bytes, self.commands)
        self.bytes = self.commands = 0
        return counts


class CountingJobs:
    """The backend as the watcher sees it, keeping how many jobs the last read listed (a check that
    every poll saw all the held jobs)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.listed = 0

    def jobs(self) -> list[SlurmJob]:
        self.listed = 0  # a read that fails lists none
        jobs = self.backend.jobs()
        self.listed = len(jobs)
        return jobs

    def job(self, job_id: int) -> SlurmJob | None:
        return self.backend.job(job_id)  # a near look's read of one job (the watcher's doc)

    def set_time_limit(self, job_id: int | str, minutes: int) -> None:
        self.backend.set_time_limit(job_id, minutes)


class Store:
    """What the daemon's store would say of each job: after a Submitted event, "submitted" (held
    jobs never start), so the first poll reports every job and the later ones none."""

    def __init__(self) -> None:
        self.status: dict[int, str] = {}

    def record(self, event: JobEvent) -> None:
        if isinstance(event, Submitted):
            self.status[event.request.job_id] = "submitted"
        elif isinstance(event, Started):
            self.status[event.job_id] = "running"
        else:  # Ended, LimitChanged: neither comes from held jobs
            self.status[event.job_id] = "ended"

    def job_status(self, job_id: int) -> str | None:
        return self.status.get(job_id)


@dataclass
class Poll:
    wall_s: float
    rss_bytes: int
    bytes_read: int | None  # None: pyslurm (no command's stdout)
    commands: int
    listed: int


@dataclass
class Measurement:
    """One size and backend: the raw numbers the table and --json give."""

    jobs: int
    backend: str
    interval_s: float
    rss_before_bytes: int
    first: Poll
    first_span: Span
    polls: list[Poll] = field(default_factory=list)
    window: Span | None = None
    read_failures: int = 0
    errors: int = 0
    last_error: str = ""
    reported: int = 0
    full_looks: int = 0  # of the window's polls, those that listed the queue (the rest: near looks)
    near_looks: int = 0


# ---------------------------------------------------------------------------- backends
def has_listing() -> bool:
    """The adapter's CliBackend takes ``listing=`` (being added: "json" or "lean")."""
    try:
        CliBackend(listing="json")  # type: ignore[call-arg]
    except TypeError:
        return False
    return True


def cli_backend(listing: str, runner: CountingRunner, timeout_s: float) -> CliBackend | None:
    """``CliBackend(listing=...)``; where the adapter has no `listing` yet, the plain
    ``CliBackend()`` for "json" (what it lists) and None for "lean"."""
    if has_listing():
        return CliBackend(listing=listing, runner=runner, timeout_s=timeout_s)  # type: ignore[call-arg]
    return CliBackend(runner=runner, timeout_s=timeout_s) if listing == "json" else None


def make_backend(name: str, runner: CountingRunner, timeout_s: float) -> Any:
    if name == "pyslurm":
        import pyslurm  # from the folder `measure_main` put on sys.path

        from hpcpredict.slurm.adapter import PyslurmBackend

        return PyslurmBackend(pyslurm, runner=runner, timeout_s=timeout_s)
    backend = cli_backend(name.removeprefix("cli-"), runner, timeout_s)
    if backend is None:
        raise SystemExit(f"{name}: CliBackend has no listing= here")
    return backend


def usable_backends(names: list[str]) -> list[str]:
    """The backends asked for that this adapter has, with a note for each it lacks."""
    usable = []
    for name in names:
        if name not in ("cli-json", "cli-lean", "pyslurm"):
            raise SystemExit(f"unknown backend {name!r} (cli-json, cli-lean, pyslurm)")
        if name == "cli-lean" and not has_listing():
            print("note: CliBackend has no listing= keyword yet: cli-lean skipped")
            continue
        if name == "cli-json" and not has_listing():
            print("note: CliBackend has no listing= keyword yet: cli-json is CliBackend()")
        usable.append(name)
    return usable


# ---------------------------------------------------------------------------- one measurement
def timed_poll(watcher: Any, slurm: CountingJobs, runner: CountingRunner, pyslurm: bool,
               slurmctld_pid: int) -> tuple[Poll, Span]:
    runner.take()
    before = Snapshot.take(slurmctld_pid)
    watcher.poll()
    span = Span.between(before, Snapshot.take(slurmctld_pid))
    bytes_read, commands = runner.take()
    return Poll(span.wall_s, rss_bytes(), None if pyslurm else bytes_read, commands, slurm.listed), span


def sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def measure(backend_name: str, jobs: int, interval_s: float, window_s: float, timeout_s: float,
            slurmctld_pid: int) -> Measurement:
    """A new watcher on `backend_name`: its first poll, then a poll at each `interval_s` tick of the
    `window_s` after it (a poll longer than the interval skips the ticks it overran, as the
    daemon's loop waits the interval after each poll; here the ticks stay on the grid)."""
    from hpcpredict.slurm.watcher import SlurmWatcher

    runner = CountingRunner()
    slurm = CountingJobs(make_backend(backend_name, runner, timeout_s))
    store = Store()
    pyslurm = backend_name == "pyslurm"
    rss_before = rss_bytes()
    watcher = SlurmWatcher(slurm, store.record, store.job_status, interval_s=interval_s, heartbeat=None)
    began = time.monotonic()
    first, first_span = timed_poll(watcher, slurm, runner, pyslurm, slurmctld_pid)
    result = Measurement(jobs, backend_name, interval_s, rss_before, first, first_span)
    print(f"  {backend_name}: first poll {first.wall_s:.2f} s, {first.listed} jobs listed, "
          f"{watcher.report.reported} reported", flush=True)
    window_start = next_tick(began, interval_s, time.monotonic())
    window_end = window_start + window_s
    sleep_until(window_start)
    start = Snapshot.take(slurmctld_pid)
    tick = window_start
    while tick < window_end:
        sleep_until(tick)
        poll, _ = timed_poll(watcher, slurm, runner, pyslurm, slurmctld_pid)
        result.polls.append(poll)
        print(f"  {backend_name}: poll {len(result.polls)} {poll.wall_s:.2f} s, {poll.listed} jobs, "
              f"RSS {poll.rss_bytes / MB:.0f} MB", flush=True)
        tick = next_tick(began, interval_s, time.monotonic())
    sleep_until(window_end)
    result.window = Span.between(start, Snapshot.take(slurmctld_pid))
    report = watcher.report
    result.read_failures, result.errors = report.read_failures, report.errors
    result.full_looks = getattr(report, "full_looks", len(result.polls) + 1) - 1
    result.near_looks = getattr(report, "near_looks", 0)
    result.last_error, result.reported = report.last_error, report.reported
    return result


def next_tick(origin: float, interval_s: float, now: float) -> float:
    """The first tick of the grid `origin + k * interval_s` after `now`."""
    return origin + (int((now - origin) // interval_s) + 1) * interval_s


def measure_main(args: argparse.Namespace) -> None:
    """``--measure BACKEND``: one measurement in this fresh process, written to ``--result``."""
    if args.pyslurm_path:
        sys.path.insert(0, args.pyslurm_path)
    if args.measure == "pyslurm":
        import pyslurm  # noqa: F401 - loaded (libslurm, slurm.conf) before RSS is first read
    import hpcpredict.slurm.watcher  # noqa: F401 - the same: imports are not the watcher's cost

    result = measure(args.measure, args.jobs, args.interval_s, args.window_s, args.timeout_s,
                     args.slurmctld_pid)
    Path(args.result).write_text(json.dumps(asdict(result)))


def run_measurement(backend: str, jobs: int, args: argparse.Namespace, slurmctld_pid: int,
                    pyslurm_path: Path | None, folder: Path) -> dict[str, Any]:
    """`measure_main` in a fresh process of this script; its numbers as a dict."""
    result = folder / f"{backend}-{jobs}.json"
    command = [sys.executable, __file__, "--measure", backend, "--jobs", str(jobs),
               "--interval-s", str(args.interval_s), "--window-s", str(args.window_s),
               "--timeout-s", str(args.timeout_s), "--slurmctld-pid", str(slurmctld_pid),
               "--result", str(result)]
    if pyslurm_path is not None:
        command += ["--pyslurm-path", str(pyslurm_path)]
    subprocess.run(command, check=True)
    return json.loads(result.read_text())


# ---------------------------------------------------------------------------- the cluster's jobs
def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def submit_held_jobs(cluster: Any, have: int, target: int, folder: Path) -> None:
    """Held jobs from `have` to `target`, by SUBMIT_STREAMS parallel sbatch loops (one job record
    each), with a progress line every PROGRESS_EVERY_S."""
    count = target - have
    if count <= 0:
        return
    shares = [count // SUBMIT_STREAMS + (k < count % SUBMIT_STREAMS) for k in range(SUBMIT_STREAMS)]
    streams = []
    for k, share in enumerate(share for share in shares if share):
        ids, errors = folder / f"ids-{target}-{k}", folder / f"errors-{target}-{k}"
        script = f"for i in $(seq {share}); do {SUBMIT_COMMAND} || exit 1; done"
        with ids.open("wb") as out, errors.open("wb") as err:
            streams.append((subprocess.Popen(["bash", "-c", script], env=cluster.env, stdout=out, stderr=err),
                            ids, errors))
    pid = cluster.controller.pid
    began, slurmctld_began = time.monotonic(), process_cpu_s(pid)
    said = began
    while any(process.poll() is None for process, _, _ in streams):
        time.sleep(0.5)
        if time.monotonic() - said >= PROGRESS_EVERY_S:
            said = time.monotonic()
            done = sum(line_count(ids) for _, ids, _ in streams)
            elapsed = said - began
            print(f"  submitting: {have + done:,}/{target:,} held jobs, {done / elapsed:.0f}/s, slurmctld "
                  f"CPU {100 * (process_cpu_s(pid) - slurmctld_began) / elapsed:.0f}%", flush=True)
    failed = [(process, errors) for process, _, errors in streams if process.returncode != 0]
    if failed:
        stderr = failed[0][1].read_text(errors="replace")[-2000:]
        raise RuntimeError(f"sbatch failed (exit {failed[0][0].returncode}): {stderr}\n"
                           f"slurmctld.log:\n{cluster.log_tail()}")
    elapsed = time.monotonic() - began
    print(f"submitted {count:,} held jobs in {elapsed:.0f} s ({count / elapsed:.0f}/s, {len(streams)} "
          f"streams, slurmctld CPU {100 * (process_cpu_s(pid) - slurmctld_began) / elapsed:.0f}%); "
          f"{queued_jobs(cluster):,} in the queue", flush=True)


def mark_lowered(cluster: Any, count: int) -> None:
    """The first `count` held jobs as the plugin leaves a job it lowered: a 1-minute limit and its
    mark (a 10-minute request). Pending below what PREDICT lowers to on a large queue, they are
    what each near look reads one by one (hpcpredict/slurm/watcher.py)."""
    from hpcpredict.slurm.tag import PredictionTag

    listed = cluster.run(["squeue", "-h", "-t", "PENDING", "-o", "%A"]).stdout.split()
    ids = sorted(int(word) for word in listed)[:count]
    mark = PredictionTag(600, 60, "lower").format()
    for start in range(0, len(ids), 100):
        chunk = ",".join(str(job_id) for job_id in ids[start:start + 100])
        cluster.run(["scontrol", "update", f"JobId={chunk}", "TimeLimit=1", f"AdminComment={mark}"])
    print(f"marked {len(ids)} held jobs as lowered to 1 min", flush=True)


def queued_jobs(cluster: Any) -> int:
    return len(cluster.run(["squeue", "-h", "-t", "all", "-o", "%i"], timeout=300).stdout.split())


def install_pyslurm(folder: Path) -> Path:
    """The cached (or now built) pyslurm wheel, installed into `folder` for this run only."""
    from testbed.pyslurm_wheel import wheel

    target = folder / "pyslurm"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", str(target), str(wheel())], check=True)
    return target


# ---------------------------------------------------------------------------- the report
def machine(when: str) -> None:
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"{when}: load average {load}, nproc {len(os.sched_getaffinity(0))}", flush=True)


def row(result: dict[str, Any]) -> dict[str, str]:
    """One table row of a measurement's raw numbers."""
    polls, window, first = result["polls"], result["window"], result["first"]
    walls = [poll["wall_s"] for poll in polls]
    rss_max = max(poll["rss_bytes"] for poll in [first, *polls])
    seconds = window["wall_s"]
    self_pct = 100 * window["self_cpu_s"] / seconds
    child_pct = 100 * window["children_cpu_s"] / seconds
    read = [poll["bytes_read"] for poll in polls if poll["bytes_read"] is not None]
    return {
        "jobs": f"{result['jobs']:,}",
        "backend": result["backend"],
        "first poll s": f"{first['wall_s']:.2f}",
        "poll median s": f"{statistics.median(walls):.2f}" if walls else "-",
        "poll max s": f"{max(walls):.2f}" if walls else "-",
        "polls (full)": f"{len(polls)} ({result.get('full_looks', len(polls))})",
        "failed": str(result["read_failures"]),
        "CPU self %": f"{self_pct:.1f}",
        "CPU squeue %": f"{child_pct:.1f}",
        "CPU sum %": f"{self_pct + child_pct:.1f}",
        "RSS before MB": f"{result['rss_before_bytes'] / MB:.1f}",
        "RSS max MB": f"{rss_max / MB:.1f}",
        "RSS increase MB": f"{(rss_max - result['rss_before_bytes']) / MB:.1f}",
        "read per poll MB": f"{statistics.median(read) / MB:.2f}" if read else "-",
        "slurmctld CPU %": f"{100 * window['slurmctld_cpu_s'] / seconds:.1f}",
    }


def markdown_table(rows: list[dict[str, str]]) -> str:
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(line[key] for key in header) + " |" for line in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the run
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"held jobs, in turn (default {DEFAULT_SIZES})")
    parser.add_argument("--backends", default=DEFAULT_BACKENDS, help=f"default {DEFAULT_BACKENDS}")
    parser.add_argument("--window-s", type=float, default=60.0, help="polling window after the first poll")
    parser.add_argument("--interval-s", type=float, default=10.0, help="the watcher's interval")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"the commands' timeout (default {DEFAULT_TIMEOUT_S:g} s, the daemon's)")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--near", type=int, default=0,
                        help="mark this many held jobs as lowered to 1 min (a request of 10 min): the "
                             "jobs a near look reads one by one on a large queue (default 0)")
    # one measurement in a fresh process (run_measurement)
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slurmctld-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pyslurm-path", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.measure:
        measure_main(args)
        return
    sizes = sorted(int(size) for size in args.sizes.split(","))
    machine("start")
    backends = usable_backends(args.backends.split(","))
    folder = Path(tempfile.mkdtemp(prefix="watcher-cost-"))
    pyslurm_path = install_pyslurm(folder) if "pyslurm" in backends else None

    from testbed.slurm_cluster import SlurmCluster

    cluster = SlurmCluster(extra_config=SLURM_LIMITS)
    results: list[dict[str, Any]] = []
    finished = False
    try:
        cluster.start()
        os.environ["SLURM_CONF"] = str(cluster.conf)  # the commands, pyslurm and the measurements
        print(f"slurmctld pid {cluster.controller.pid}, {cluster.dir}; {', '.join(SLURM_LIMITS)}", flush=True)
        have = 0
        for size in sizes:
            submit_held_jobs(cluster, have, size, folder)
            if have == 0 and args.near:
                mark_lowered(cluster, args.near)
            have = max(have, size)
            time.sleep(SETTLE_S)  # not measured: the state save and scheduling the submissions caused
            for backend in backends:
                print(f"measuring {backend} at {size:,} jobs ({args.window_s:g} s window)", flush=True)
                results.append(run_measurement(backend, size, args, cluster.controller.pid, pyslurm_path, folder))
                line = row(results[-1])
                print(f"  {backend} at {size:,}: " + ", ".join(f"{key} {value}" for key, value in line.items()
                                                            if key not in ("jobs", "backend")), flush=True)
        finished = True
    finally:
        if not finished:
            print(f"slurmctld.log:\n{cluster.log_tail()}")
        cluster.stop()
        if finished:
            shutil.rmtree(cluster.dir, ignore_errors=True)
        else:
            print(f"the cluster's logs are kept in {cluster.dir}")
        shutil.rmtree(folder, ignore_errors=True)
    machine("end")
    if results:
        print(markdown_table([row(result) for result in results]))
    if args.json:
        args.json.write_text(json.dumps({"sizes": sizes, "backends": backends, "window_s": args.window_s,
                                         "interval_s": args.interval_s, "timeout_s": args.timeout_s,
                                         "results": results}, indent=1))
        print(f"raw numbers in {args.json}")


if __name__ == "__main__":
    main()
