"""A digest of every table the daemon's store holds after a fixed stream of events.

For changes to the event write path that must not change what is stored (same rows, same columns,
same sequence numbers): run it on the code before and after, compare the digests.

    python benchmarks/event_store_digest.py                     # a SQLite file in a temp dir
    python benchmarks/event_store_digest.py --postgres          # a throwaway cluster (testbed/pg_server.py)
    cd /tmp/before && PYTHONPATH=. python /path/to/event_store_digest.py   # the code of another checkout

The script is the same on both sides; `import hpcpredict` decides whose service writes the rows
(the first line printed says which). The stream is the first `--jobs` jobs of the KTH-SP2 sample,
in time order, with every path of the service taken on purpose: predictions served with a feature
token, given predictions and lowered limits, limit changes (one set back to a value it had), ends
killed at a lowered limit, TIMEOUTs, jobs cancelled before running, jobs first seen at their start
or at their end, and every event sent twice (a duplicate must store nothing). Checkpoints every 50
events put the checkpoint write inside event transactions too.

Wall-clock bookkeeping columns (``events.recorded_at_s``, ``checkpoints.created_at_s``) are left
out; a checkpoint's .npz bytes hold the zip's timestamps, so its arrays are digested instead.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tempfile
from pathlib import Path

import numpy as np
from sqlalchemy import MetaData, select

import hpcpredict
from bench_service_events import job_events  # this folder's: the KTH sample's events in time order
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store

REPO = Path(__file__).resolve().parents[1]
SAMPLE_LOG = REPO / "swf" / "KTH-SP2-sample.swf"
WALL_CLOCK_COLUMNS = {("events", "recorded_at_s"), ("checkpoints", "created_at_s")}
CHECKPOINT_EVERY = 50  # events: several checkpoints written inside event transactions


def feed(service: PredictionService, log: Path, n_jobs: int) -> None:
    """Send the fixed stream (module doc) to `service`, every event twice."""
    for time_s, _, kind, request, run_s in job_events(log, n_jobs):
        job_id = request.job_id
        variant = job_id % 10
        for _ in range(2):  # the second is a duplicate (or a repeated prediction)
            if kind == "submitted":
                if variant == 7:
                    continue  # first seen at its start
                if variant == 8:
                    continue  # first seen at its end
                if variant in (1, 2):
                    _, token = service.serve(request, time_s)
                    service.submitted(request, time_s, feature_token=token)
                elif variant == 3:
                    lowered_s = max(60, request.requested_s // 2)
                    service.submitted(request, time_s, given_prediction_s=lowered_s, limit_s=lowered_s)
                else:
                    service.submitted(request, time_s)
            elif kind == "started":
                if variant == 8:
                    continue
                service.started(job_id, time_s, request=request if variant == 7 else None)
                if variant == 4:  # the corrector raises the limit, the guard sets it back, again
                    service.limit_changed(job_id, request.requested_s + 600, time_s)
                    service.limit_changed(job_id, request.requested_s, time_s + 1)
                    service.limit_changed(job_id, request.requested_s + 600, time_s + 2)
            else:
                state = "TIMEOUT" if variant == 5 else "CANCELLED" if variant == 6 else "COMPLETED"
                service.ended(
                    job_id,
                    0 if variant == 6 else run_s,
                    time_s,
                    state,
                    killed_at_lowered_limit=variant == 3,
                    request=request if variant == 8 else None,
                )


def table_digests(store: Store) -> dict[str, tuple[int, str]]:
    """Table name -> (rows, sha256 of its rows in primary-key order, wall-clock columns left out)."""
    metadata = MetaData()
    metadata.reflect(store.engine)
    digests = {}
    with store.engine.connect() as connection:
        for name, table in sorted(metadata.tables.items()):
            columns = [column for column in table.columns if (name, column.name) not in WALL_CLOCK_COLUMNS]
            order = list(table.primary_key.columns) or columns
            digest = hashlib.sha256()
            rows = 0
            for row in connection.execute(select(*columns).order_by(*order)):
                values = dict(zip((column.name for column in columns), row))
                if "state_npz" in values:
                    values["state_npz"] = _arrays_digest(values["state_npz"])
                digest.update(repr(sorted(values.items())).encode())
                rows += 1
            digests[name] = (rows, digest.hexdigest()[:16])
    return digests


def _arrays_digest(blob: bytes) -> str:
    digest = hashlib.sha256()
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        for name in sorted(data.files):
            array = data[name]
            digest.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
            digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="an empty database's URL (default: a SQLite file in a temp dir)")
    where.add_argument("--postgres", action="store_true",
                       help="a throwaway PostgreSQL cluster (testbed/pg_server.py), deleted afterwards")
    parser.add_argument("--jobs", type=int, default=1500, help="jobs of the log fed (3 events each)")
    parser.add_argument("--log", type=Path, default=SAMPLE_LOG)
    args = parser.parse_args()
    print(f"# hpcpredict from {Path(hpcpredict.__file__).parent}", flush=True)

    server = None
    with tempfile.TemporaryDirectory(prefix="hpcpredict-digest-") as directory:
        url = args.url or f"sqlite:///{directory}/state.db"
        if args.postgres:
            sys.path.insert(0, str(REPO))  # testbed/
            from testbed.pg_server import PostgresServer

            server = PostgresServer.from_environment()
            url = server.create_database()
        try:
            store = Store(url)
            service = PredictionService.open(store, checkpoint_every=CHECKPOINT_EVERY)
            feed(service, args.log, args.jobs)
            service.close()
            digests = table_digests(store)
            store.close()
        finally:
            if server is not None:
                server.stop()

    print(f"# {store.engine.dialect.name}, {args.jobs:,} jobs of {args.log.name}")
    for name, (rows, digest) in digests.items():
        print(f"{name:<20} {rows:>7,} rows  {digest}")
    whole = hashlib.sha256(repr(sorted(digests.items())).encode()).hexdigest()[:16]
    print(f"{'all tables':<20} {'':>12}  {whole}")


if __name__ == "__main__":
    main()
