"""CPU seconds to make shaken replicas of a log and the objects their replays read:
what each replica of `simulate --replicas N` costs before its replay starts.

    cd /tmp && PYTHONPATH=TREE python /path/to/benchmarks/bench_replica_shaking.py \
        ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640

Runs the tree its PYTHONPATH names (older trees build every `Job` for the replay; newer ones
only the `JobRequest`s).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from hpcpredict.sim.shaking import replica
from hpcpredict.logs.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=3, help="replicas 1..N")
    args = parser.parse_args()
    workload = load_workload(args.log, machine_procs=args.procs)
    for index in range(1, args.replicas + 1):
        started = time.process_time()
        jobs = replica(workload, index).jobs
        jobs.requests() if hasattr(jobs, "requests") else [job.request for job in jobs]
        print(f"replica {index}: {time.process_time() - started:.2f} s CPU", flush=True)


if __name__ == "__main__":
    main()
