"""How often a job started in front of a protected head on an estimate outlives it, and by how much.

    python benchmarks/estimate_overruns.py ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640 --replicas 3

The guard's estimate stage (a multiple of the prediction, or the request less a slack) and its
evidence option (the user's last runtimes, docs/method.md §7) let jobs start in front of a protected head on less than their
request; each that outlives its estimate moves that head's start (it is planned to its request
from then on). Per configuration, over the campaigns' replicas (`sim.shaking.replica`): the jobs
started so, the share that outlived, their mean overrun, and AVEbsld, p99 and longest wait.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.shaking import replica
from hpcpredict.workload import load_workload

CONFIGURATIONS = {
    "guard 24 h, 4x prediction in front after 3 h": RunSpec(
        starvation_guard_s=86_400, guard_estimate_multiple=4.0, guard_estimate_after_s=10_800),
    "guard 24 h, tiny on evidence until 48 h": RunSpec(
        starvation_guard_s=86_400, guard_evidence_s=900, guard_evidence_cap_s=172_800),
    "guard xfactor 5 or 24 h, tiny on evidence until 24 h": RunSpec(
        starvation_guard_s=86_400, guard_rule="xfactor", guard_xfactor=5.0,
        guard_evidence_s=900, guard_evidence_cap_s=86_400),
    "guard 24 h, request - 2 h in front after 4 h": RunSpec(
        starvation_guard_s=86_400, guard_estimate_slack_s=7_200, guard_estimate_after_s=14_400),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    log = load_workload(args.log, machine_procs=args.procs)
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in CONFIGURATIONS}
    for index in range(args.replicas):
        workload = replica(log, index)
        for name, spec in CONFIGURATIONS.items():
            result = run(workload, spec)
            metrics = compute_metrics(result)
            outlived = result.estimates_outlived
            rows[name].append((
                result.estimated_starts, outlived / max(1, result.estimated_starts),
                result.estimate_overrun_s / max(1, outlived) / 3600, metrics.ave_bsld,
                metrics.p99_wait_s / 3600, metrics.max_wait_s / 3600,
            ))
    print(f"{log.name}: {len(log.jobs):,} jobs; {args.replicas} replicas, means over them")
    print("| configuration | started on an estimate | outlived it | mean overrun h | AVEbsld "
          "| p99 wait h | max wait h |")
    print("|---|---|---|---|---|---|---|")
    for name, values in rows.items():
        started, share, overrun, ave_bsld, p99, longest = (statistics.fmean(column) for column in zip(*values))
        print(f"| {name} | {started:,.0f} | {share:.1%} | {overrun:.2f} | {ave_bsld:.2f} | "
              f"{p99:.1f} | {longest:.1f} |")


if __name__ == "__main__":
    main()
