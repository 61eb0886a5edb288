"""Who waits in the p99 tail, and how much of their wait is the slide of their reservation
(docs/results.md): per replica and configuration, the jobs whose wait is at or above the 99th
percentile, their processors and requests, the share that had a reservation, and how far they
started after the start first promised to them as head of the queue ("slide"; negative: earlier,
when jobs ended before their requests or predictions).

    python benchmarks/tail_slide.py ../shared/swf/KTH-SP2-1996-2.swf.gz --replicas 10

A second table splits the tail's mean wait into three parts that add up (`wait_parts`): until
the job is the head of the queue (every job submitted before it has started); from then until the
jobs already running at that moment have freed the processors it needs (their real ends: its
earliest start had no job been started after it became the head); and the rest, the delay the
jobs started in front of it while it was the head (the backfilled ones) caused.

Replicas are those of the campaigns (`sim.shaking.replica`, default shake and seed).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.shaking import replica
from hpcpredict.logs.workload import load_workload

CONFIGURATIONS = {
    "EASY": RunSpec("easy", "requested", "requested"),
    "clairvoyant EASY-SJBF": RunSpec("easy-sjbf", "clairvoyant", "requested"),
    "learned, no guard": RunSpec("easy-sjbf", "learned", "incremental"),
    "learned, guard 24 h": RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=10)
    args = parser.parse_args()
    log = load_workload(args.log, machine_procs=args.procs)
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in CONFIGURATIONS}
    parts: dict[str, list[tuple[float, ...]]] = {name: [] for name in CONFIGURATIONS}
    for index in range(args.replicas):
        workload = replica(log, index)
        columns = workload.jobs.columns
        submit_s, procs, requested_s = columns["submit_s"], columns["procs"], columns["requested_s"]
        order = np.argsort(submit_s, kind="stable")  # FCFS order: the head is the first waiting
        rank = np.empty_like(order)  # each job's place in it
        rank[order] = np.arange(len(order))
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
            parts[name].append(wait_parts(submit_s, procs, columns["run_s"], start_s,
                                          log.machine_procs, order, rank, np.flatnonzero(tail & reserved)))
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
    print()
    print("| configuration | tail jobs with a promise: until head h | running jobs' hold h "
          "| backfilled jobs' delay h | mean wait h |")
    print("|---|---|---|---|---|")
    for name, values in parts.items():
        cells = [f"{statistics.fmean(column):.2f} ({min(column):.2f}-{max(column):.2f})" for column in zip(*values)]
        print(f"| {name} | " + " | ".join(cells) + " |")


def wait_parts(submit_s: np.ndarray, procs: np.ndarray, run_s: np.ndarray, start_s: np.ndarray,
               machine_procs: int, order: np.ndarray, rank: np.ndarray,
               jobs: np.ndarray) -> tuple[float, ...]:
    """Mean hours, over `jobs`, of: submission to head, head to the moment the jobs running then
    have freed the job's processors, the rest of its wait (the backfilled jobs' delay), the whole
    wait."""
    end_s = start_s + np.maximum(run_s, 0)
    started_before = np.maximum.accumulate(start_s[order])  # max start among the first k+1 in FCFS order
    sums = np.zeros(4)
    for job in jobs:
        k = rank[job]
        head_s = max(int(submit_s[job]), int(started_before[k - 1]) if k else int(submit_s[job]))
        running = (start_s <= head_s) & (end_s > head_s)
        running[job] = False
        by_end = np.argsort(end_s[running], kind="stable")
        ends, held = end_s[running][by_end], procs[running][by_end]
        free_after = machine_procs - held.sum() + np.cumsum(held)  # free processors after each end
        if machine_procs - held.sum() >= procs[job]:
            freed_s = head_s
        else:
            freed_s = int(ends[np.searchsorted(free_after, procs[job])])
        sums += (head_s - submit_s[job], freed_s - head_s, start_s[job] - freed_s, start_s[job] - submit_s[job])
    return tuple(float(value) / 3600 / max(len(jobs), 1) for value in sums)


if __name__ == "__main__":
    main()
