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
* ``per-request`` — connect, send one PREDICT, half-close, read the answer, close, as the SLURM
  plugin does at every ``sbatch`` (``--no-half-close``: without the half-close, as the plugin
  did before; the daemon then serves the connection with a transport instead of at accept);
* ``per-request, loaded`` — the same, while an *event stream* (one client sending
  SUBMIT, START and END for new jobs as fast as they are acknowledged) and a *heavy admin read*
  (``GET /errors`` in a loop, over every live job the store holds) run against the same daemon.
  Before the benchmark the store is given `--preload-jobs` live jobs (their three events each,
  through `PredictionService`), so that ``/errors`` has thousands of jobs to judge.
* ``per-request, events at R/s + GET /errors`` (``--events-per-s R``, repeatable) — the same
  again, with the event stream *offered* at R events/s (each request sent at its time, or when
  the previous one is acknowledged if that is later) instead of closed loop. The closed-loop
  stream is a stress: it saturates whatever CPU it is given, and on 2 cores that CPU is
  PREDICT's. A cluster's events come at the rate jobs submit, start and end: 100,000 jobs a day
  is ~3.5 events/s on average, so 200 events/s is a burst far above a real site's sustained
  rate, and the production-relevant load. Both are reported; the closed-loop run always comes
  first, so that its figures compare with earlier runs.

    python benchmarks/bench_daemon.py --events-per-s 200

``--busy N`` runs N processes burning CPU at nice 0 for the whole benchmark: a busy host (the
controller's other work), made the same way every time instead of by whatever else runs.
``--daemon-nice N`` starts the daemon at niceness N (negative needs the privilege systemd's
``Nice=`` has): what an operator can do about a busy host.

    python benchmarks/bench_daemon.py --events-per-s 200 --busy 1 --daemon-nice -5

Besides the client-side latency percentiles it reads the daemon's own PREDICT histogram
(``/metrics``, ``hpcpredict_request_seconds{verb="PREDICT"}``) before and after each mode: the
share it answered within 1 and 2 ms of reading the line, which tells its handling apart from
the clients' waits on a busy machine. It counts the PREDICTs over the plugin's 300 ms timeout (the
plugin fails open past it: the job keeps its request), and reports the event stream's rate and
the admin reads' duration.

Latency is the client's round trip (connect included in per-request mode), measured in the
client, so it includes the client's own Python overhead: an upper bound on the daemon's share.
The clients and the daemon share the machine's cores, so each row also gives the CPU time the
daemon's process (all its threads; in loaded runs its events and HTTP front too, not the read
worker's process) and the PREDICT clients spent per PREDICT: the daemon's figure is the steady
one on a shared machine, and the two say which side limits the throughput.
The goal (docs/performance.md): p99 < 2 ms and >= 5,000 predictions/s in connect-ask-close mode on
this machine, with events and admin reads flowing, and no PREDICT over 300 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench_daemon_cpu import cpu_s  # this folder's benchmarks
from hpcpredict.logs.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LOG = REPO / "swf" / "KTH-SP2-sample.swf"
PLUGIN_TIMEOUT_S = 0.300  # slurm-plugin/job_submit.lua fails open past it
PRELOADED_JOB_IDS = 1_000_000  # live jobs given to the store before the benchmark start here
STREAM_JOB_IDS = 2_000_000  # the event stream's jobs start here


def client(socket_path: str, lines: list[bytes], per_request: bool, start_at: float, out,
           half_close: bool = True) -> None:
    while time.time() < start_at:  # all clients start together
        time.sleep(0.0005)
    latencies = np.empty(len(lines))
    connection = None
    cpu_began = time.process_time()
    for i, line in enumerate(lines):
        began = time.perf_counter()
        if connection is None:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(socket_path)
        connection.sendall(line)
        if per_request and half_close:  # one request, then the half-close, as the plugin does
            connection.shutdown(socket.SHUT_WR)
        answer = connection.recv(4096)
        while not answer.endswith(b"\n"):
            answer += connection.recv(4096)
        if per_request:
            connection.close()
            connection = None
        latencies[i] = time.perf_counter() - began
        if not answer.startswith(b"OK prediction="):
            raise RuntimeError(f"unexpected answer {answer!r} to {line!r}")
    if connection is not None:
        connection.close()
    out.send((latencies, time.perf_counter(), time.process_time() - cpu_began))


def event_stream(socket_path: str, jobs: list[tuple[int, int, int, int]], stop, out,
                 events_per_s: float | None = None, first_job_id: int = STREAM_JOB_IDS) -> None:
    """SUBMIT, START, END for each of `jobs` (uid, procs, requested_s, run_s) as new jobs, until
    `stop` is set. Closed loop by default: each request is sent when the previous one is
    acknowledged, so the stream takes whatever the daemon gives it. With `events_per_s`, request
    k is sent at k / events_per_s seconds after the start (or at its acknowledgement of the one
    before, if that is later): a fixed offered rate, as a cluster's events arrive."""
    sent = 0
    acknowledged_at = []  # perf_counter (CLOCK_MONOTONIC: comparable across processes)
    began = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(socket_path)
        reader = connection.makefile("rb")
        for i, (uid, procs, requested_s, run_s) in enumerate(jobs):
            if stop.is_set():
                break
            job_id = first_job_id + i
            now_s = int(time.time())
            for line in (
                f"SUBMIT job={job_id} uid={uid} procs={procs} time_limit={requested_s} submit={now_s}\n",
                f"START job={job_id} start={now_s}\n",
                f"END job={job_id} run={run_s} end={now_s + run_s} state=COMPLETED\n",
            ):
                if events_per_s is not None:
                    wait_s = began + sent / events_per_s - time.perf_counter()
                    if wait_s > 0:
                        time.sleep(wait_s)
                connection.sendall(line.encode())
                answer = reader.readline()
                if not answer.startswith(b"OK "):
                    raise RuntimeError(f"unexpected answer {answer!r} to {line!r}")
                sent += 1
                acknowledged_at.append(time.perf_counter())
        reader.close()
    out.send((sent, time.perf_counter() - began, np.array(acknowledged_at)))


def admin_reads(url: str, token: str, stop, out) -> None:
    """GET `url` (with the admin API's bearer token) in a loop until `stop` is set; the duration
    of each read, or the error that stopped the loop (sent, so the benchmark does not wait)."""
    durations = []
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        while not stop.is_set():
            began = time.perf_counter()
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
            durations.append(time.perf_counter() - began)
    except Exception as error:  # noqa: BLE001 - reported by the benchmark
        out.send(error)
        return
    out.send(durations)


def predict_buckets(http_url: str, token: str) -> dict[str, float]:
    """The daemon's own PREDICT latency histogram from its /metrics (bucket bound -> cumulative
    count); empty from a daemon whose histogram has no verb label (before 2026-11-25)."""
    from prometheus_client.parser import text_string_to_metric_families

    request = urllib.request.Request(f"{http_url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        sample.labels["le"]: sample.value
        for family in text_string_to_metric_families(text) if family.name == "hpcpredict_request_seconds"
        for sample in family.samples
        if sample.name.endswith("_bucket") and sample.labels.get("verb") == "PREDICT"
    }


def daemon_share(before: dict[str, float], after: dict[str, float], bound: str) -> float:
    """Of the PREDICTs answered between two histograms, the share the daemon handled within
    `bound` seconds (from their line read to their answer: waits before the read not included)."""
    if "+Inf" not in after:
        return float("nan")
    total = after["+Inf"] - before.get("+Inf", 0.0)
    return (after[bound] - before.get(bound, 0.0)) / total if total else float("nan")


def run_mode(socket_path: str, requests: list[bytes], clients: int, per_client: int, per_request: bool,
             label: str | None = None, daemon_pid: int | None = None, half_close: bool = True,
             metrics: tuple[str, str] | None = None) -> dict:
    buckets_before = predict_buckets(*metrics) if metrics else {}
    start_at = time.time() + 0.5
    pipes, processes = [], []
    for c in range(clients):
        lines = [requests[(c * per_client + i) % len(requests)] for i in range(per_client)]
        parent, child = multiprocessing.Pipe(duplex=False)
        process = multiprocessing.Process(target=client, args=(socket_path, lines, per_request, start_at, child, half_close))
        process.start()
        pipes.append(parent)
        processes.append(process)
    began = time.perf_counter() + (start_at - time.time())
    daemon_cpu_began = cpu_s(daemon_pid) if daemon_pid else float("nan")
    results = [pipe.recv() for pipe in pipes]
    daemon_cpu_s = cpu_s(daemon_pid) - daemon_cpu_began if daemon_pid else float("nan")
    for process in processes:
        process.join()
    buckets_after = predict_buckets(*metrics) if metrics else {}
    latencies = np.concatenate([r[0] for r in results])
    elapsed = max(r[1] for r in results) - began
    return {
        "mode": label or ("per-request" if per_request else "persistent"),
        "clients": clients,
        "requests": len(latencies),
        "per_s": len(latencies) / elapsed,
        "p50_ms": 1e3 * float(np.percentile(latencies, 50)),
        "p99_ms": 1e3 * float(np.percentile(latencies, 99)),
        "max_ms": 1e3 * float(latencies.max()),
        "over_timeout": int((latencies > PLUGIN_TIMEOUT_S).sum()),
        "window": (began, began + elapsed),  # perf_counter: when the PREDICTs ran
        # where the two cores went: the daemon's whole process (loaded runs: events and the HTTP
        # front included; the read worker is another process) and the PREDICT clients
        "daemon_us": 1e6 * daemon_cpu_s / len(latencies),
        "clients_us": 1e6 * sum(r[2] for r in results) / len(latencies),
        # the daemon's own measure (its histogram): separates its handling from the clients' waits
        "daemon_le_1ms": daemon_share(buckets_before, buckets_after, "0.001"),
        "daemon_le_2ms": daemon_share(buckets_before, buckets_after, "0.002"),
    }


def run_loaded(socket_path: str, http_url: str, token: str, requests: list[bytes], jobs, clients: int,
               per_client: int, *, stream: bool = True, admin: bool = True,
               events_per_s: float | None = None, first_job_id: int = STREAM_JOB_IDS,
               daemon_pid: int | None = None, half_close: bool = True) -> tuple[dict, str]:
    """Connect-ask-close PREDICTs while the event stream and/or the admin reads run."""
    stop = multiprocessing.Event()
    stream_pipe, stream_child = multiprocessing.Pipe(duplex=False)
    reads_pipe, reads_child = multiprocessing.Pipe(duplex=False)
    helpers = []
    if stream:
        helpers.append(multiprocessing.Process(target=event_stream, args=(socket_path, jobs, stop, stream_child, events_per_s, first_job_id)))
    if admin:
        helpers.append(multiprocessing.Process(target=admin_reads, args=(f"{http_url}/errors", token, stop, reads_child)))
    for helper in helpers:
        helper.start()
    time.sleep(1.0)  # under way before the PREDICTs start
    events = "events" if events_per_s is None else f"events at {events_per_s:g}/s"
    label = "per-request, " + " + ".join([events] * stream + ["GET /errors"] * admin)
    row = run_mode(socket_path, requests, clients, per_client, per_request=True, label=label, daemon_pid=daemon_pid,
                   half_close=half_close, metrics=(http_url, token))
    stop.set()
    notes = []
    if stream:
        events, stream_s, acknowledged_at = stream_pipe.recv()
        # the stream starts a second before the PREDICTs: its rate while they ran is the one to read
        start, end = row["window"]
        during = int(((acknowledged_at >= start) & (acknowledged_at <= end)).sum())
        notes.append(f"event stream {events:,} events in {stream_s:.1f} s ({events / stream_s:,.0f}/s acknowledged; "
                     f"{during / (end - start):,.0f}/s while the PREDICTs ran)")
    if admin:
        durations = reads_pipe.recv()
        if isinstance(durations, Exception):
            raise SystemExit(f"GET /errors failed: {durations!r}")
        notes.append(f"GET /errors {len(durations)} reads, mean "
                     f"{1e3 * float(np.mean(durations)) if durations else float('nan'):,.0f} ms, "
                     f"max {1e3 * max(durations, default=float('nan')):,.0f} ms")
    for helper in helpers:
        helper.join()
    return row, f"during '{label}': " + "; ".join(notes)


def preload(db: str, workload, jobs: int) -> None:
    """Give the store `jobs` live jobs (SUBMIT, START, END each, through the service, as the
    daemon records them), so that GET /errors has their predictions to judge."""
    from hpcpredict.daemon.core.config import DaemonConfig
    from hpcpredict.daemon.core.service import PredictionService
    from hpcpredict.daemon.core.store import Store

    store = Store(db)
    try:
        service = PredictionService.open(store, DaemonConfig(db=db).predictor_factory)
        now_s = int(time.time()) - 86_400
        for i, job in enumerate(workload.jobs[:jobs]):
            job_id = PRELOADED_JOB_IDS + i
            submit_s = now_s - 2 * jobs + i
            live = dataclasses.replace(job.request, job_id=job_id, submit_s=submit_s)
            service.submitted(live, submit_s)
            service.started(job_id, submit_s + 1)
            service.ended(job_id, max(1, job.run_s), submit_s + 1 + max(1, job.run_s), "COMPLETED")
        service.close()
    finally:
        store.close()


def from_scratch(directory: Path) -> dict[str, object]:
    """`subprocess` options that run `python -m hpcpredict.cli ...` from the scratch `directory`
    with this process's PYTHONPATH made absolute. `python -m` puts its working directory first
    on sys.path, so from a checkout it would run that checkout's code whatever PYTHONPATH says;
    and a relative entry ("PYTHONPATH=.") would name another folder from the scratch one."""
    env = dict(os.environ)
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(entry) for entry in env["PYTHONPATH"].split(os.pathsep))
    return {"cwd": directory, "env": env}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ending_a_day_ago(log: Path, workload) -> str:  # workload: hpcpredict.logs.workload.Workload
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
    parser.add_argument("--preload-jobs", type=int, default=5000,
                        help="live jobs given to the store first, for GET /errors to judge")
    parser.add_argument("--no-loaded", action="store_true", help="skip the run with events and admin reads")
    parser.add_argument("--no-stream", action="store_true", help="the loaded run without the event stream")
    parser.add_argument("--no-admin", action="store_true", help="the loaded run without GET /errors")
    parser.add_argument("--events-per-s", type=float, action="append", default=[], metavar="RATE",
                        help="also a loaded run with the event stream offered at RATE events/s "
                             "(repeatable); the closed-loop loaded run is always made")
    parser.add_argument("--no-half-close", dest="half_close", action="store_false",
                        help="per-request clients do not half-close after their request (the plugin before 2026-11-25)")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="N processes burning CPU at nice 0 throughout: a busy host")
    parser.add_argument("--daemon-nice", type=int, default=0, metavar="N",
                        help="the daemon's niceness (negative: more CPU than the rest; needs privilege)")
    args = parser.parse_args()

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())  # the machine may be shared: say so
    workload = load_workload(args.log)
    requests = [
        f"PREDICT uid={job.user_id} procs={job.procs} time_limit={job.requested_s}\n".encode()
        for job in workload.jobs
    ]
    directory = Path(tempfile.mkdtemp(prefix="hpbench"))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    db = f"sqlite:///{directory / 'state.db'}"
    socket_path = str(directory / "d.sock")
    try:
        recent = directory / "recent.swf"
        recent.write_text(ending_a_day_ago(args.log, workload))
        code = subprocess.run([sys.executable, "-c", "import hpcpredict; print(hpcpredict.__file__)"],
                              check=True, capture_output=True, text=True, **from_scratch(directory)).stdout.strip()
        subprocess.run([sys.executable, "-m", "hpcpredict.cli", "train", str(recent), "--db", db], check=True,
                       **from_scratch(directory))
        if args.preload_jobs:
            began = time.perf_counter()
            preload(db, workload, args.preload_jobs)
            print(f"preloaded {args.preload_jobs:,} live jobs in {time.perf_counter() - began:.0f} s", file=sys.stderr)
        token = secrets.token_hex(32)  # the admin API serves /errors only with its bearer token
        token_file = directory / "http-token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        port = free_port()
        http_url = f"http://127.0.0.1:{port}"
        daemon = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", socket_path,
             "--http", f"127.0.0.1:{port}", "--http-token-file", str(token_file), "--spool", str(directory / "jobcomp.spool"), "--log-level", "warning"],
            **from_scratch(directory),
            preexec_fn=(lambda: os.nice(args.daemon_nice)) if args.daemon_nice else None,
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
            run_mode(socket_path, requests, args.clients, args.requests, per_request=False, daemon_pid=daemon.pid,
                     metrics=(http_url, token)),
            run_mode(socket_path, requests, args.clients, args.requests, per_request=True, daemon_pid=daemon.pid,
                     half_close=args.half_close, metrics=(http_url, token)),
        ]
        notes = []
        if not args.no_loaded:
            jobs = [(job.user_id, job.procs, job.requested_s, max(1, job.run_s)) for job in workload.jobs]
            for run, events_per_s in enumerate([None, *args.events_per_s]):
                # each run's stream reports new jobs (ids past the last run's), as the first did
                row, note = run_loaded(socket_path, http_url, token, requests, jobs, args.clients, args.requests,
                                       stream=not args.no_stream, admin=not args.no_admin,
                                       events_per_s=events_per_s, first_job_id=STREAM_JOB_IDS + run * len(jobs),
                                       daemon_pid=daemon.pid, half_close=args.half_close)
                rows.append(row)
                notes.append(note)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        shutil.rmtree(directory, ignore_errors=True)

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"model trained on {args.log.name} ({len(workload.jobs):,} jobs)")
    print(f"# daemon code: {Path(code).parent} (what `import hpcpredict` finds from a scratch directory; "
          "PYTHONPATH decides)")
    print(f"# load average before/after: {load_before} / {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.busy or args.daemon_nice:
        print(f"# {args.busy} CPU burner(s) at nice 0 throughout; daemon at nice {args.daemon_nice}")
    print("| mode | clients | requests | predictions/s | p50 ms | p99 ms | max ms | over 300 ms "
          "| daemon µs CPU / PREDICT | clients µs CPU / PREDICT | daemon-side <= 1 ms | <= 2 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['mode']} | {row['clients']} | {row['requests']:,} | {row['per_s']:,.0f} | "
              f"{row['p50_ms']:.3f} | {row['p99_ms']:.3f} | {row['max_ms']:.2f} | {row['over_timeout']} "
              f"| {row['daemon_us']:.0f} | {row['clients_us']:.0f} "
              f"| {100 * row['daemon_le_1ms']:.2f}% | {100 * row['daemon_le_2ms']:.2f}% |")
    print("(daemon-side: the share of PREDICTs the daemon itself answered within 1 and 2 ms of reading "
          "their line, from its /metrics histogram; the client columns add the connection, the wait "
          "before the daemon reads and the clients' own waits for a core)")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
