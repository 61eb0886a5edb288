"""Replay speed on a full archive log: load time, then CPU time per simulation, one core.

Run on demand (never from the test suite) and copy the printed table into docs/performance.md:

    python benchmarks/bench_replay.py                        # CEA-Curie (the default log)
    python benchmarks/bench_replay.py ../shared/swf/SDSC-BLUE-2000-4.1-cln.swf.gz --repeat 3

Each configuration is replayed `--repeat` times in this process; the table gives the best and
median CPU time of the replay (`time.process_time`: the machine is shared, and CPU time is less
disturbed by other load than wall time, though not immune to it: caches and memory bandwidth are
shared too), microseconds per job, the 1-minute load average when the configuration finished,
and the resulting AVEbsld, so a speed-up that changes the schedule is caught at once.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

DEFAULT_LOG = Path(__file__).resolve().parents[2] / "shared" / "swf" / "CEA-Curie-2011-2.1-cln.swf.gz"
CONFIGURATIONS = {
    "easy": RunSpec("easy", "requested", "requested"),
    "easy-sjbf": RunSpec("easy-sjbf", "requested", "requested"),
    "easy++ (ave2+incr+sjbf)": RunSpec("easy-sjbf", "ave2", "incremental"),
    "learned eloss+incr+sjbf": RunSpec("easy-sjbf", "learned", "incremental"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=DEFAULT_LOG)
    parser.add_argument("--procs", type=int, default=None, help="machine size (Curie: 80640)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", action="append", choices=sorted(CONFIGURATIONS), default=None)
    args = parser.parse_args()
    procs = args.procs
    if procs is None and "Curie" in args.log.name:
        procs = 80_640  # docs/method.md §10
    print(f"python {platform.python_version()} on {platform.processor() or platform.machine()}")
    started = time.perf_counter()
    workload = load_workload(args.log, machine_procs=procs)
    load_s = time.perf_counter() - started
    count = len(workload.jobs)
    print(f"{args.log.name}: {count:,} jobs, {workload.machine_procs:,} procs, loaded in {load_s:.1f} s")
    print("| configuration | best CPU s | median CPU s | µs/job | load (1 min) | AVEbsld |")
    print("|---|---|---|---|---|---|")
    for name in args.only or CONFIGURATIONS:
        spec = CONFIGURATIONS[name]
        times, ave_bsld = [], 0.0
        for _ in range(args.repeat):
            started = time.process_time()
            result = run(workload, spec)
            times.append(time.process_time() - started)
            ave_bsld = compute_metrics(result).ave_bsld
        best, median = min(times), statistics.median(times)
        load_1min = os.getloadavg()[0]
        print(f"| {name} | {best:.2f} | {median:.2f} | {best / count * 1e6:.0f} | {load_1min:.1f} "
              f"| {ave_bsld:.2f} |", flush=True)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mb:.0f} MB (load + all runs)", file=sys.stderr)


if __name__ == "__main__":
    main()
