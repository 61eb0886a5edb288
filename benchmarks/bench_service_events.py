"""Per-event cost of `PredictionService.submitted / started / ended` on a real database.

Run on demand (never from the test suite):

    python benchmarks/bench_service_events.py                       # SQLite file in a temp dir
    python benchmarks/bench_service_events.py --jobs 5000
    python benchmarks/bench_service_events.py --pragma synchronous=FULL   # compare a setting
    python benchmarks/bench_service_events.py --url postgresql+psycopg://postgres@127.0.0.1:5432/x

The jobs are the KTH-SP2 sample's, replayed in time order as a daemon would receive them (one
submit, one start, one end each), so the learner does its real work: predict at submission,
learn at the end, with real user histories. Each event is one committed transaction, as in
the daemon; the time per event is the learner's share plus the store's (a commit, and on
SQLite the file's sync).

``--pragma NAME=VALUE`` (SQLite only, repeatable) runs ``PRAGMA NAME=VALUE`` on every connection
after the store's own settings: to measure what a setting costs without editing store.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import event

from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.logs.swf import read_swf
from hpcpredict.logs.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOG = REPO / "swf" / "KTH-SP2-sample.swf"
SUBMIT, START, END = 1, 2, 0  # same-instant order: ends free processors before starts


def job_events(log: Path, n_jobs: int) -> list[tuple[int, int, str, JobRequest, int]]:
    """(time_s, order, kind, request, run_s) for the first `n_jobs` jobs, in time order."""
    workload = load_workload(log)
    waits_s = {record.job_id: record.wait_s for record in read_swf(log).records}
    unix_start_s = workload.header.unix_start_time or 0
    events = []
    for job in workload.jobs[:n_jobs]:
        request = dataclasses.replace(job.request, submit_s=unix_start_s + job.request.submit_s)
        start_s = request.submit_s + max(0, waits_s[request.job_id])
        events.append((request.submit_s, SUBMIT, "submitted", request, job.run_s))
        events.append((start_s, START, "started", request, job.run_s))
        events.append((start_s + job.run_s, END, "ended", request, job.run_s))
    events.sort(key=lambda item: (item[0], item[1], item[3].job_id))
    return events


def send(service: PredictionService, item: tuple[int, int, str, JobRequest, int]) -> None:
    time_s, _, kind, request, run_s = item
    if kind == "submitted":
        service.submitted(request, time_s)
    elif kind == "started":
        service.started(request.job_id, time_s)
    else:
        service.ended(request.job_id, run_s, time_s, "COMPLETED")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="database URL (default: a fresh SQLite file in a temp dir)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs replayed (3 events each)")
    parser.add_argument("--log", type=Path, default=SAMPLE_LOG)
    parser.add_argument("--pragma", action="append", default=[], help="SQLite NAME=VALUE")
    args = parser.parse_args()
    items = job_events(args.log, args.jobs)

    with tempfile.TemporaryDirectory(prefix="hpcpredict-bench-") as directory:
        url = args.url or f"sqlite:///{directory}/state.db"
        store = Store(url)
        if args.pragma:

            def extra_pragmas(dbapi_connection: Any, _record: Any) -> None:
                cursor = dbapi_connection.cursor()
                for pragma in args.pragma:
                    cursor.execute(f"PRAGMA {pragma}")
                cursor.close()

            event.listen(store.engine, "connect", extra_pragmas)
        service = PredictionService.open(store)
        spent: dict[str, list[float]] = defaultdict(list)
        began_all = time.perf_counter()
        for item in items:
            began = time.perf_counter()
            send(service, item)
            spent[item[2]].append(time.perf_counter() - began)
        wall_s = time.perf_counter() - began_all
        with store.engine.connect() as connection:
            settings = ""
            if store.engine.dialect.name == "sqlite":
                journal = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
                synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar()
                settings = f" journal_mode={journal} synchronous={synchronous}"
        store.close()

    print(f"{store.engine.dialect.name}{settings}: {len(items)} events in {wall_s:.2f} s")
    print(f"{'event':<10} {'mean µs':>9} {'median µs':>10} {'p99 µs':>9}")
    for kind in ("submitted", "started", "ended"):
        values = sorted(1e6 * v for v in spent[kind])
        p99 = values[min(len(values) - 1, int(0.99 * len(values)))]
        print(
            f"{kind:<10} {statistics.fmean(values):>9.0f} "
            f"{statistics.median(values):>10.0f} {p99:>9.0f}"
        )
    every = [v for values in spent.values() for v in values]
    print(f"{'all':<10} {1e6 * statistics.fmean(every):>9.0f}")


if __name__ == "__main__":
    main()
