"""The CPU an event costs: in `PredictionService` alone, and in a running daemon.

Run on demand (never from the test suite) and copy the printed tables into docs/performance.md:

    python benchmarks/bench_daemon_events.py                      # SQLite and PostgreSQL, 3 runs
    python benchmarks/bench_daemon_events.py --backend sqlite --runs 5
    cd /tmp/before && PYTHONPATH=. python /path/to/bench_daemon_events.py   # another checkout's code

Two measurements per backend and run, each on a fresh store:

* ``service`` — the KTH-SP2 sample's first `--jobs` jobs replayed in time order through
  `PredictionService` (submitted, started, ended each, one transaction per event, as the daemon's
  store writer runs them), in this process: CPU µs per event (`time.process_time`, so the
  database's own work counts on SQLite, which runs in the process, and not on PostgreSQL, which
  runs in its server) and wall µs per event, by kind.
* ``daemon`` — a real ``hpcpredict serve`` on that backend, and one client sending SUBMIT, START
  and END for `--daemon-jobs` new jobs, each request when the previous one is acknowledged (the
  event stream of bench_daemon.py): events acknowledged per second, and the daemon process's CPU
  (user + system, /proc) per event, split into the event loop's thread and the others (the store
  writer). The model is untrained: PREDICT would answer the requests,
  but an event's learning step costs the same.

PostgreSQL is a throwaway cluster on loopback (testbed/pg_server.py; durability off, as in the test
suite), started once and given a new database per measurement. The machine may be shared: the
load average is printed, and with ``--runs`` the median and the range of each figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import hpcpredict
from bench_daemon import event_stream, from_scratch  # this folder's benchmarks: the same stream, the same clock
from bench_daemon_cpu import CLOCK_TICKS_S, cpu_s
from bench_service_events import job_events, send
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOG = REPO / "swf" / "KTH-SP2-sample.swf"
KINDS = ("submitted", "started", "ended")


def warm_up(job: JobRequest) -> None:
    """The learner's compiled kernels loaded before the clock starts (as `hpcpredict serve`
    does before it opens its socket): the first prediction of a process costs ~0.2 s."""
    scratch = LearnedPredictor()
    scratch.predict(job, job.submit_s)
    scratch.job_started(job, job.submit_s)
    scratch.job_ended(job, 60, job.submit_s + 60, killed_at_limit=False)


def measure_service(url: str, events: list[tuple[int, int, str, JobRequest, int]]) -> dict[str, float]:
    """CPU and wall µs per event, by kind and overall, through `PredictionService` in-process."""
    warm_up(events[0][3])
    store = Store(url)
    try:
        service = PredictionService.open(store)
        cpu_by_kind_s: dict[str, float] = defaultdict(float)
        wall_s: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for item in events:
            kind = item[2]
            began_cpu, began_wall = time.process_time(), time.perf_counter()
            send(service, item)
            cpu_by_kind_s[kind] += time.process_time() - began_cpu
            wall_s[kind] += time.perf_counter() - began_wall
            counts[kind] += 1
        service.close(checkpoint=False)
    finally:
        store.close()
    row = {f"{kind} cpu": 1e6 * cpu_by_kind_s[kind] / counts[kind] for kind in KINDS}
    row["all cpu"] = 1e6 * sum(cpu_by_kind_s.values()) / len(events)
    row["all wall"] = 1e6 * sum(wall_s.values()) / len(events)
    row["events/s"] = len(events) / sum(wall_s.values())
    return row


def measure_daemon(url: str, directory: Path, jobs: list[tuple[int, int, int, int]]) -> dict[str, float]:
    """Events/s acknowledged and the daemon's CPU µs per event, one client streaming events."""
    socket_path = directory / "d.sock"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", url, "--create-db",
         "--socket", str(socket_path), "--http", "", "--spool", str(directory / "jobcomp.spool"),
         "--log-level", "warning"],
        **from_scratch(directory),
    )
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        time.sleep(0.5)  # the spool's first pass, warm-up
        answers: list[tuple[int, float]] = []  # bench_daemon's event stream reports (sent, seconds, acknowledgement times) here
        before_s = cpu_s(daemon.pid)
        loop_before_s = thread_cpu_s(daemon.pid, daemon.pid)  # the main thread runs the event loop
        event_stream(str(socket_path), jobs, threading.Event(), SimpleNamespace(send=answers.append))
        used_s = cpu_s(daemon.pid) - before_s
        loop_s = thread_cpu_s(daemon.pid, daemon.pid) - loop_before_s
        sent, elapsed_s, _ = answers[0]
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return {"events/s": sent / elapsed_s, "daemon cpu": 1e6 * used_s / sent,
            "loop cpu": 1e6 * loop_s / sent, "other threads cpu": 1e6 * (used_s - loop_s) / sent}


def thread_cpu_s(pid: int, tid: int) -> float:
    """User + system seconds of thread `tid` of process `pid` (the daemon's event loop is its main
    thread; the rest is the store writer's, bar a few idle helpers)."""
    fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--runs", type=int, default=3, help="measurements per backend (fresh store each)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs replayed in-process (3 events each)")
    parser.add_argument("--daemon-jobs", type=int, default=1000, help="jobs streamed to the daemon")
    parser.add_argument("--no-daemon", action="store_true", help="only the in-process measurement")
    parser.add_argument("--log", type=Path, default=SAMPLE_LOG)
    args = parser.parse_args()
    print(f"# hpcpredict from {Path(hpcpredict.__file__).parent}", flush=True)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    events = job_events(args.log, args.jobs)
    workload = load_workload(args.log)
    stream = [(job.user_id, job.procs, job.requested_s, max(1, job.run_s))
              for job in workload.jobs[:args.daemon_jobs]]
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]

    server = None
    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    try:
        for run in range(args.runs):
            for backend in backends:
                with tempfile.TemporaryDirectory(prefix="hpbench-events-") as name:
                    directory = Path(name)
                    if backend == "postgresql" and server is None:
                        sys.path.insert(0, str(REPO))  # testbed/
                        from testbed.pg_server import PostgresServer

                        server = PostgresServer.from_environment()

                    def fresh_url(label: str) -> str:
                        if backend == "sqlite":
                            return f"sqlite:///{directory / label}.db"
                        return server.create_database()

                    row = measure_service(fresh_url("service"), events)
                    if not args.no_daemon:
                        row.update(measure_daemon(fresh_url("daemon"), directory, stream))
                results[backend].append(row)
                print(f"run {run + 1} {backend}: " + ", ".join(f"{k} {v:,.0f}" for k, v in row.items()),
                      flush=True)
    finally:
        if server is not None:
            server.stop()

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; {len(events):,} events in-process, "
          f"{3 * len(stream):,} to the daemon; {args.runs} runs, median (min-max)")
    print(f"# load average before/after: {load_before} / {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    columns = list(results[backends[0]][0])
    print("| backend | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for backend in backends:
        cells = []
        for column in columns:
            values = [row[column] for row in results[backend]]
            cells.append(f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})")
        print(f"| {backend} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
