"""Where a guard's cost on a log comes from: the fortnights and users that carry AVEbsld
(docs/results.md, "The goal for a bound, and where it stands").

    python benchmarks/guard_bursts.py ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640 \
        --without-users 270,575 --replicas 1,2,3

Two parts. First, on the log as it is (replica 0), each configuration's mean bounded slowdown
per fortnight of submissions; for the fortnights where some configuration's mean is above
`--above`, the jobs with the top tenth of the bsld there: their main users, median runtime,
request, wait and width. Then, on each replica of `--replicas`, AVEbsld over all jobs and
without the jobs of `--without-users` (a site's bursts of tiny jobs with day-long requests):
whether a bound's ranking on the log is that of a few users' bursts.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from hpcpredict.sim.metrics import job_arrays
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.shaking import replica
from hpcpredict.logs.workload import load_workload

FORTNIGHT_S = 14 * 86_400
CONFIGURATIONS = {
    "EASY": RunSpec(scheduler="easy", predictor="requested", correction="requested"),
    "learned, no guard": RunSpec(),
    "guard 12 h": RunSpec.from_keys(starvation_guard_s=43_200),
    "guard 24 h": RunSpec.from_keys(starvation_guard_s=86_400),
    "guard 48 h": RunSpec.from_keys(starvation_guard_s=172_800),
    "guard xfactor 5 or 24 h": RunSpec.from_keys(starvation_guard_s=86_400, guard_rule="xfactor",
                                       guard_xfactor=5.0),
}


def columns(path: str, procs: int | None, number: int, label: str) -> dict[str, np.ndarray]:
    workload = replica(load_workload(path, machine_procs=procs), number)
    return job_arrays(run(workload, CONFIGURATIONS[label]))


def replay(task: tuple[str, int | None, int, str]) -> tuple[str, int, dict[str, np.ndarray]]:
    path, procs, number, label = task
    return label, number, columns(path, procs, number, label)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("swf")
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--without-users", default="", help="user ids, comma-separated")
    parser.add_argument("--replicas", default="1,2,3", help="replica numbers, comma-separated")
    parser.add_argument("--above", type=float, default=100.0,
                        help="a fortnight is examined when some configuration's mean bsld there is above this")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    users = [int(user) for user in args.without_users.split(",") if user]
    numbers = [int(number) for number in args.replicas.split(",") if number]
    tasks = [(args.swf, args.procs, number, label)
             for number in [0, *numbers] for label in CONFIGURATIONS]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = {(label, number): table for label, number, table in pool.map(replay, tasks)}

    print("Mean bsld per fortnight of submissions, the log as it is (replica 0):")
    fortnight = {label: (table["submit_s"] - table["submit_s"].min()) // FORTNIGHT_S
                 for (label, number), table in results.items() if number == 0}
    labels = list(CONFIGURATIONS)
    print("| fortnight | jobs | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    count = int(fortnight[labels[0]].max()) + 1
    means = {label: [results[label, 0]["bsld"][fortnight[label] == k].mean() for k in range(count)]
             for label in labels}
    for k in range(count):
        jobs = int(np.sum(fortnight[labels[0]] == k))
        print(f"| {k} | {jobs} | " + " | ".join(f"{means[label][k]:.1f}" for label in labels) + " |")
    print()
    print("Where some configuration's mean is above", args.above, "- the top tenth of the bsld there:")
    for k in range(count):
        if max(means[label][k] for label in labels) <= args.above:
            continue
        for label in labels:
            table = results[label, 0]
            inside = np.flatnonzero(fortnight[label] == k)
            bsld = table["bsld"][inside]
            top = inside[np.argsort(bsld)[::-1][: max(1, len(inside) // 10)]]
            user, jobs = np.unique(table["user_id"][top], return_counts=True)
            main_users = ", ".join(f"{u} ({n})" for u, n in sorted(zip(user.tolist(), jobs.tolist()),
                                                                   key=lambda pair: -pair[1])[:3])
            print(f"  fortnight {k}, {label}: mean bsld {bsld.mean():.1f}, top tenth carries "
                  f"{table['bsld'][top].sum() / bsld.sum():.0%} of it; users (jobs) {main_users}; "
                  f"median runtime {np.median(table['run_s'][top]):.0f} s, request "
                  f"{np.median(table['requested_s'][top]) / 3600:.1f} h, wait "
                  f"{np.median(table['wait_s'][top]) / 3600:.1f} h, procs {np.median(table['procs'][top]):.0f}")
    if users:
        print()
        print(f"AVEbsld on each replica, all jobs / without users {args.without_users}:")
        print("| configuration | " + " | ".join(f"replica {n}" for n in numbers) + " |")
        print("|---|" + "---|" * len(numbers))
        for label in labels:
            cells = []
            for number in numbers:
                table = results[label, number]
                kept = ~np.isin(table["user_id"], users)
                cells.append(f"{table['bsld'].mean():.1f} / {table['bsld'][kept].mean():.1f}")
            print(f"| {label} | " + " | ".join(cells) + " |")
        excluded = int(np.sum(np.isin(results[labels[0], 0]["user_id"], users)))
        print(f"(their jobs: {excluded} of {len(results[labels[0], 0]['user_id'])})")
        print()
        print("Their jobs as the learned model saw them at submission (guard 24 h, the log as it is):")
        table = results["guard 24 h", 0]
        for user in users:
            mine = table["user_id"] == user
            low, median, high = np.percentile(table["initial_prediction_s"][mine], [10, 50, 90])
            print(f"  user {user}: {int(mine.sum())} jobs, runtime median {np.median(table['run_s'][mine]):.0f} s, "
                  f"request median {np.median(table['requested_s'][mine]) / 3600:.1f} h, first prediction "
                  f"p10 / median / p90 {low:.0f} / {median:.0f} / {high:.0f} s, first job in fortnight "
                  f"{int((table['submit_s'][mine].min() - table['submit_s'].min()) // FORTNIGHT_S)}")


if __name__ == "__main__":
    main()
