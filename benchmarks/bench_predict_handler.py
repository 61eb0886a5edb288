"""CPU per PREDICT in the daemon's handler, without the socket: parsing, readiness, the model, the
feature token, the answer line and the metrics, as `Handlers.handle_line` runs them.

    python benchmarks/bench_predict_handler.py
    cd /tmp/before && PYTHONPATH=. python /path/to/bench_predict_handler.py   # another checkout's code

A service on a SQLite file learns the KTH-SP2 sample's first `--jobs` jobs (bench_service_events'
stream), then answers `--requests` PREDICT lines built from the log's jobs at a time just after
the last event (so the model is ready and every answer goes through it). What remains per request
beside the learner's `peek` is the daemon's own overhead; the socket's share (accepting,
reading, writing a connection) is not in this figure (bench_daemon_cpu.py measures it whole).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import hpcpredict
from bench_service_events import SAMPLE_LOG, job_events, send  # this folder's
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.logs.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs learned first (3 events each)")
    parser.add_argument("--requests", type=int, default=20_000, help="PREDICTs per run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"# hpcpredict from {Path(hpcpredict.__file__).parent}", flush=True)
    events = job_events(SAMPLE_LOG, args.jobs)
    lines = [f"PREDICT uid={job.user_id} procs={job.procs} time_limit={job.requested_s}".encode()
             for job in load_workload(SAMPLE_LOG).jobs]
    with tempfile.TemporaryDirectory(prefix="hpbench-predict-") as directory:
        store = Store(f"sqlite:///{directory}/state.db")
        service = PredictionService.open(store, min_trained_jobs=0)
        for item in events:
            send(service, item)
        last_event_s = max(item[0] for item in events)
        handlers = Handlers(service, clock=lambda: last_event_s + 60)
        first = handlers.handle_line(lines[0])
        if b" ready=1" not in first:
            raise SystemExit(f"the model is not ready: {first!r}")
        per_request_us = []
        for _ in range(args.runs):
            began = time.process_time()
            for i in range(args.requests):
                handlers.handle_line(lines[i % len(lines)])
            per_request_us.append(1e6 * (time.process_time() - began) / args.requests)
        store.close()
    print(f"# load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"CPU µs per PREDICT: median {statistics.median(per_request_us):.1f} "
          f"(runs: {', '.join(f'{v:.1f}' for v in per_request_us)})")


if __name__ == "__main__":
    main()
