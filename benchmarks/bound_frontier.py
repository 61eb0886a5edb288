"""Every starvation bound measured, per log, against the goal's box (docs/results.md).

    python benchmarks/bound_frontier.py sim/results/guard/runs.csv sim/results/bound*/runs.csv

The campaigns' runs.csv (same 10 shaken replicas and seed: the script refuses two files that give
the same run different results) are read together. For each log, every learned configuration
under a bound is placed by the goal's three ratios of means (`bound_goal.conditions`): longest
wait / plain EASY's (condition (1), <= 1.25), p99 wait / plain EASY's ((2), <= 1) and AVEbsld /
the unbounded learner's ((3), <= 1.10). Among those keeping (1), a bound is on the frontier when
no other one is at least as good on both (2) and (3) and better on one; the goal's box is (2)
and (3) together. "miss" is how far a bound is from the box: the larger of its two ratios, each
divided by its limit (1.00: on the box's edge or inside). The question it answers: is there a
measured bound, or a gap between two, where the box could be reached by tuning a threshold?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bound_goal import PLAIN, UNBOUNDED, conditions, read_runs  # noqa: E402

from hpcpredict.experiments.tune import AVEBSLD_BOUND  # noqa: E402


def read_all(paths: list[Path]):
    """The runs of every file together; a run two files give differently is an error."""
    runs: dict = {}
    for path in paths:
        for key, replicas in read_runs(path).items():
            known = runs.setdefault(key, {})
            for replica, values in replicas.items():
                if replica in known and known[replica] != values:
                    raise SystemExit(f"{path}: {key[1]!r} on {key[0]}, replica {replica}, differs "
                                     f"from an earlier file's: not the same replicas")
                known[replica] = values
    return runs


def is_bound(label: str) -> bool:
    return label.startswith("learned") and "guard" in label and "no guard" not in label


def distinct_bounds(runs, log: str) -> list[str]:
    """The bounds measured on `log` on 10 replicas or more; of labels that name the same runs
    (an earlier campaign's long label, a later one's short one), the shortest."""
    by_runs: dict[str, str] = {}
    for each_log, label in runs:
        if each_log == log and is_bound(label) and len(runs[log, label]) >= 10:
            same = repr(sorted(runs[log, label].items()))
            if same not in by_runs or len(label) < len(by_runs[same]):
                by_runs[same] = label
    return list(by_runs.values())


def short_label(label: str) -> str:
    """sim/guard.toml's labels spell the learner out ("learned over=square,... + guard 12 h"):
    the same learner as every other campaign's "learned, guard 12 h"."""
    if label.startswith("learned over=") and " + guard " in label:
        return "learned, guard " + label.rsplit(" + guard ", 1)[1]
    return label


def frontier_rows(runs, log: str) -> list[dict[str, object]]:
    rows = [conditions(runs, log, label, None) for label in distinct_bounds(runs, log)]
    for row in rows:
        row["miss"] = max(row["p99/EASY"], row["AVEbsld/unbounded"] / AVEBSLD_BOUND)
    kept = [row for row in rows if row["(1)"]]
    for row in rows:
        row["frontier"] = row["(1)"] and not any(
            other is not row
            and other["p99/EASY"] <= row["p99/EASY"]
            and other["AVEbsld/unbounded"] <= row["AVEbsld/unbounded"]
            and (other["p99/EASY"] < row["p99/EASY"]
                 or other["AVEbsld/unbounded"] < row["AVEbsld/unbounded"])
            for other in kept)
    return sorted(rows, key=lambda row: row["AVEbsld/unbounded"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_csv", nargs="+", type=Path)
    args = parser.parse_args()
    runs = read_all(args.runs_csv)
    logs = sorted({log for log, label in runs if label == PLAIN and (log, UNBOUNDED) in runs})
    print("| log | bound | AVEbsld | AVEbsld / unbounded | p99 / EASY | max / EASY | (1) | "
          "frontier | miss |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for log in logs:
        rows = frontier_rows(runs, log)
        for row in rows:
            print(f"| {log} | {short_label(row['bound'])} | {row['ave_bsld']:.2f} | {row['AVEbsld/unbounded']:.2f}"
                  f" | {row['p99/EASY']:.2f} | {row['max/EASY']:.2f} | "
                  f"{'yes' if row['(1)'] else 'NO'} | {'*' if row['frontier'] else ''} | "
                  f"{row['miss']:.3f} |")
        kept = [row for row in rows if row["(1)"]]
        if kept:
            nearest = min(kept, key=lambda row: row["miss"])
            inside = [short_label(row["bound"]) for row in kept if row["miss"] <= 1.0]
            summary.append(f"{log}: {len(rows)} bounds, {len(kept)} keep (1); in the box: "
                           f"{', '.join(inside) if inside else 'none'}; nearest: {short_label(nearest['bound'])} "
                           f"(miss {nearest['miss']:.3f})")
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
