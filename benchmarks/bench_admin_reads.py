"""PREDICT latency on the socket while admins read the store over HTTP.

Run on demand (never from the test suite) and copy the printed table into docs/performance.md:

    python benchmarks/bench_admin_reads.py                 # 2 clients, /errors in a loop
    python benchmarks/bench_admin_reads.py --no-token      # a daemon without a token file
    python benchmarks/bench_admin_reads.py --read /report  # the sysadmin's page, fetched in a loop
    python benchmarks/bench_admin_reads.py --read '/report?since=0'  # ... drawn anew at every fetch

A real `hpcpredict serve` process (SQLite store bootstrapped by `hpcpredict train` on the sample
log, dates moved so that it ends a day ago, as in bench_daemon.py) with its admin API on
127.0.0.1, then `--live-jobs` of the log's jobs reported through the socket (SUBMIT, END). Client *processes* send PREDICTs connect-ask-close, as the plugin does, twice: with
the API idle, then while one HTTP client asks ``GET /errors`` (the exact statistics over every
judged job: the heaviest read) and ``GET /metrics`` back to back. The table gives PREDICT's
latency in both phases and how many reads were answered meanwhile: the reads must not show in
PREDICT's figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_daemon import DEFAULT_LOG, ending_a_day_ago, from_scratch, run_mode  # noqa: E402

from hpcpredict.logs.workload import load_workload  # noqa: E402


def wait_for_http(url: str, daemon: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if b'"ready": true' in answer.read():
                    return
                raise SystemExit("the daemon is not ready: PREDICT would not go through the model")
        except OSError:
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not start") from None
            time.sleep(0.1)


def report_jobs(socket_path: str, workload, count: int) -> None:
    """SUBMIT and END `count` jobs of the log through the socket, dated the last days, so that
    ``/errors`` has live judged jobs to go through (its cost grows with them)."""
    now_s = int(time.time())
    with socket.socket(socket.AF_UNIX) as connection, connection.makefile("rb") as answers:
        connection.connect(socket_path)
        for i, job in enumerate(workload.jobs[:count]):
            submit_s = now_s - 3 * 86_400 + i * 10
            run_s = max(1, min(job.run_s, job.requested_s))
            connection.sendall(
                f"SUBMIT job={900_000 + i} uid={job.user_id} procs={job.procs} time_limit={job.requested_s} "
                f"submit={submit_s}\nEND job={900_000 + i} run={run_s} end={submit_s + run_s}\n".encode())
            for _ in range(2):
                answer = answers.readline()
                if not answer.startswith(b"OK"):
                    raise SystemExit(f"unexpected answer {answer!r}")


def read_in_a_loop(url: str, token: str | None, stop: threading.Event, durations_s: list[float],
                   paths: list[str]) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while not stop.is_set():
        for path in paths:
            began = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers), timeout=120) as answer:
                answer.read()
            durations_s.append(time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=DEFAULT_LOG)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--requests", type=int, default=5000, help="per client and phase")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--live-jobs", type=int, default=3000, help="jobs reported through the socket "
                        "(SUBMIT, END) before measuring: /errors reads them all")
    parser.add_argument("--read", default="/errors,/metrics", help="the paths the HTTP client asks in turn, "
                        "comma-separated: /report is the sysadmin's page (drawn at most every 30 s), "
                        "'/report?since=0' the same page drawn at every fetch")
    parser.add_argument("--no-token", action="store_true", help="serve without --http-token-file "
                        "(the API on loopback; for comparing with a daemon that has no such option)")
    args = parser.parse_args()

    workload = load_workload(args.log)
    requests = [
        f"PREDICT uid={job.user_id} procs={job.procs} time_limit={job.requested_s}\n".encode()
        for job in workload.jobs
    ]
    directory = Path(tempfile.mkdtemp(prefix="hpbench"))
    db = f"sqlite:///{directory / 'state.db'}"
    socket_path = str(directory / "d.sock")
    url = f"http://127.0.0.1:{args.port}"
    token = None if args.no_token else secrets.token_hex(32)
    auth = []
    if token:
        token_file = directory / "http-token"
        token_file.write_text(token + "\n")
        os.chmod(token_file, 0o600)
        auth = ["--http-token-file", str(token_file)]
    rows = []
    daemon = None
    try:
        recent = directory / "recent.swf"
        recent.write_text(ending_a_day_ago(args.log, workload))
        subprocess.run([sys.executable, "-m", "hpcpredict.cli", "train", str(recent), "--db", db], check=True,
                       stdout=subprocess.DEVNULL, **from_scratch(directory))
        daemon = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", socket_path,
             "--http", f"127.0.0.1:{args.port}", *auth, "--spool", str(directory / "jobcomp.spool"),
             "--log-level", "warning"],
            **from_scratch(directory),
        )
        wait_for_http(url, daemon)
        report_jobs(socket_path, workload, args.live_jobs)
        rows.append(("API idle", run_mode(socket_path, requests, args.clients, args.requests, True), []))
        stop, durations_s = threading.Event(), []
        paths = args.read.split(",")
        reader = threading.Thread(target=read_in_a_loop, args=(url, token, stop, durations_s, paths), daemon=True)
        reader.start()
        while not durations_s:  # the first read done: the loop is warm
            if not reader.is_alive():
                raise SystemExit("the admin reads failed (see above)")
            time.sleep(0.05)
        rows.append((f"GET {' + '.join(paths)} in a loop",
                     run_mode(socket_path, requests, args.clients, args.requests, True), durations_s))
        stop.set()
        reader.join()
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        shutil.rmtree(directory, ignore_errors=True)

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"model trained on {args.log.name} ({len(workload.jobs):,} jobs), {args.live_jobs:,} live jobs, "
          "connect-ask-close")
    print("| admin API | clients | PREDICTs | predictions/s | p50 ms | p99 ms | max ms | reads answered | read mean s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, row, reads in rows:
        mean = f"{np.mean(reads):.3f}" if reads else "-"
        print(f"| {label} | {row['clients']} | {row['requests']:,} | {row['per_s']:,.0f} | {row['p50_ms']:.3f} | "
              f"{row['p99_ms']:.3f} | {row['max_ms']:.2f} | {len(reads)} | {mean} |")


if __name__ == "__main__":
    main()
