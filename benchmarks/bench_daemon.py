"""Load on the daemon's Unix socket: PREDICT requests from concurrent client processes.

Run on demand (never from the test suite) and copy the printed table into docs/performance.md:

    python benchmarks/bench_daemon.py                  # 4 clients, trained on the sample log
    python benchmarks/bench_daemon.py --clients 8 --requests 5000

A real `hpcpredict serve` process is started on a fresh SQLite store bootstrapped with
`hpcpredict train` (so predictions go through a trained model and real user histories), then
client *processes* send PREDICT requests built from the log's jobs, in two modes. The log is
trained on with its dates moved so that it ends a day ago: a history older than 30 days makes the
daemon not ready (docs/daemon.md), and PREDICT would then answer the requests without asking
the model, which is not what is measured here.

* ``persistent`` — one connection per client, requests back to back (a tool, the corrector);
* ``per-request`` — connect, ask, close, as the SLURM plugin does at every ``sbatch``.

Latency is the client's round trip (connect included in per-request mode), measured in the
client, so it includes the client's own Python overhead: an upper bound on the daemon's share.
The goal (issue 6): p99 < 2 ms and >= 5,000 predictions/s on this machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hpcpredict.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOG = REPO / "swf" / "KTH-SP2-sample.swf"


def client(socket_path: str, lines: list[bytes], per_request: bool, start_at: float, out) -> None:
    while time.time() < start_at:  # all clients start together
        time.sleep(0.0005)
    latencies = np.empty(len(lines))
    connection = None
    reader = None
    for i, line in enumerate(lines):
        began = time.perf_counter()
        if connection is None:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(socket_path)
            reader = connection.makefile("rb")
        connection.sendall(line)
        answer = reader.readline()
        if per_request:
            reader.close()
            connection.close()
            connection = None
        latencies[i] = time.perf_counter() - began
        if not answer.startswith(b"OK prediction="):
            raise RuntimeError(f"unexpected answer {answer!r} to {line!r}")
    if connection is not None:
        reader.close()
        connection.close()
    out.send((latencies, time.perf_counter()))


def run_mode(socket_path: str, requests: list[bytes], clients: int, per_client: int, per_request: bool) -> dict:
    start_at = time.time() + 0.5
    pipes, processes = [], []
    for c in range(clients):
        lines = [requests[(c * per_client + i) % len(requests)] for i in range(per_client)]
        parent, child = multiprocessing.Pipe(duplex=False)
        process = multiprocessing.Process(target=client, args=(socket_path, lines, per_request, start_at, child))
        process.start()
        pipes.append(parent)
        processes.append(process)
    began = time.perf_counter() + (start_at - time.time())
    results = [pipe.recv() for pipe in pipes]
    for process in processes:
        process.join()
    latencies = np.concatenate([r[0] for r in results])
    elapsed = max(r[1] for r in results) - began
    return {
        "mode": "per-request" if per_request else "persistent",
        "clients": clients,
        "requests": len(latencies),
        "per_s": len(latencies) / elapsed,
        "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
        "p99_ms": 1e3 * float(np.percentile(latencies, 99)),
        "max_ms": 1e3 * float(latencies.max()),
    }


def ending_a_day_ago(log: Path, workload) -> str:  # workload: hpcpredict.workload.Workload
    """The log's text with its UnixStartTime moved so that its last job ended a day ago."""
    last_end_s = max(job.request.submit_s + max(job.wait_s, 0) + job.run_s for job in workload.jobs)
    start_s = int(time.time()) - 86_400 - last_end_s
    lines = [line for line in log.read_text().splitlines() if not line.startswith("; UnixStartTime:")]
    return f"; UnixStartTime: {start_s}\n" + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=DEFAULT_LOG)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=5000, help="per client")
    args = parser.parse_args()

    workload = load_workload(args.log)
    requests = [
        f"PREDICT uid={job.user_id} procs={job.procs} time_limit={job.requested_s}\n".encode()
        for job in workload.jobs
    ]
    directory = Path(tempfile.mkdtemp(prefix="hpbench"))
    db = f"sqlite:///{directory / 'state.db'}"
    socket_path = str(directory / "d.sock")
    try:
        recent = directory / "recent.swf"
        recent.write_text(ending_a_day_ago(args.log, workload))
        subprocess.run([sys.executable, "-m", "hpcpredict.cli", "train", str(recent), "--db", db], check=True)
        daemon = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", socket_path,
             "--http", "", "--spool", str(directory / "jobcomp.spool"), "--log-level", "warning"]
        )
        deadline = time.monotonic() + 30
        while not os.path.exists(socket_path):
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        time.sleep(0.3)
        with socket.socket(socket.AF_UNIX) as probe:
            probe.connect(socket_path)
            probe.sendall(b"PING\n")
            if b" ready=1" not in probe.recv(4096):
                raise SystemExit("the daemon is not ready: PREDICT would not go through the model")
        rows = [
            run_mode(socket_path, requests, args.clients, args.requests, per_request=False),
            run_mode(socket_path, requests, args.clients, args.requests, per_request=True),
        ]
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"model trained on {args.log.name} ({len(workload.jobs):,} jobs)")
    print("| mode | clients | requests | predictions/s | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['mode']} | {row['clients']} | {row['requests']:,} | {row['per_s']:,.0f} | "
              f"{row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['max_ms']:.2f} |")


if __name__ == "__main__":
    main()
