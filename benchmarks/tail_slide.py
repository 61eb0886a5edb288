"""Who waits in the p99 tail, and how much of their wait is the slide of their reservation
(issue 30): per replica and configuration, the jobs whose wait is at or above the 99th
percentile, their processors and requests, the share that had a reservation, and how far they
started after the start first promised to them as head of the queue ("slide"; negative: earlier,
when jobs ended before their requests or predictions).

    python benchmarks/tail_slide.py ../shared/swf/KTH-SP2-1996-2.swf.gz --replicas 10

Replicas are those of the campaigns (`sim.shaking.replica`, default shake and seed).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.shaking import replica
from hpcpredict.workload import load_workload

CONFIGURATIONS = {
    "EASY": RunSpec("easy", "requested", "requested"),
    "clairvoyant EASY-SJBF": RunSpec("easy-sjbf", "clairvoyant", "requested"),
    "learned, no guard": RunSpec("easy-sjbf", "learned", "incremental"),
    "learned, guard 24 h": RunSpec("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=10)
    args = parser.parse_args()
    log = load_workload(args.log, machine_procs=args.procs)
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in CONFIGURATIONS}
    for index in range(args.replicas):
        workload = replica(log, index)
        columns = workload.jobs.columns
        submit_s, procs, requested_s = columns["submit_s"], columns["procs"], columns["requested_s"]
        for name, spec in CONFIGURATIONS.items():
            result = run(workload, spec)
            start_s = np.array(result.start_s)
            promised_s = np.array(result.first_reserved_start_s)
            wait_s = start_s - submit_s
            tail = wait_s >= np.percentile(wait_s, 99)
            reserved = promised_s >= 0
            slide_s = np.where(reserved, start_s - promised_s, 0)
            rows[name].append((
                float(np.percentile(wait_s, 99)) / 3600, float(np.median(procs[tail])),
                float(np.median(requested_s[tail])) / 3600, float(reserved[tail].mean()),
                float(slide_s[tail].mean()) / 3600, float(wait_s[tail].mean()) / 3600,
            ))
    print(f"{log.name}: {len(log.jobs):,} jobs, {log.machine_procs:,} processors, "
          f"median job {float(np.median(log.jobs.columns['procs'])):.0f} processors; "
          f"{args.replicas} replicas, means over them (min-max)")
    print("| configuration | p99 wait h | tail: median processors | median request h "
          "| reserved | mean slide h | mean wait h |")
    print("|---|---|---|---|---|---|---|")
    for name, values in rows.items():
        cells = []
        for column in zip(*values):
            cells.append(f"{statistics.fmean(column):.2f} ({min(column):.2f}-{max(column):.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
