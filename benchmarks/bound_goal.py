"""The bound's goal, per log and per bound, from campaigns' runs.csv (docs/results.md).

    python benchmarks/bound_goal.py sim/results/bound-head/runs.csv \
        --bound "learned, guard 24 h=EASY++ (guard 24 h)" \
        --bound "learned, guard 3 h, head only=EASY++ (guard 3 h, head only)" \
        --bound "learned, guard 6 h, head only"

For each log and each bound (a learned configuration, optionally `=` the AVE2 configuration
under the same bound), over the replicas both have: (1) mean longest wait <= 1.25x plain EASY's,
(2) mean p99 wait <= plain EASY's, (3) mean AVEbsld <= 1.10x the unbounded learner's, (4) AVEbsld
below AVE2's under the same bound, the paired 95% interval of the difference below zero
(hpcpredict.sim.replica_stats). Ratios are of means, as in docs/results.md.

Then leave-one-log-out on the goal itself: for each held-out log, among the bounds that meet (1)
and (2) on both other logs (if none does, those that meet (1)), the lowest summed AVEbsld on the
other logs; printed with its conditions on the held-out log. The campaign must have the labels
`EASY` and `learned, no guard`.

With `--versus LABEL` (e.g. "learned, guard 24 h"), each bound is then paired with that one,
replica by replica: AVEbsld, p99 and longest wait, relative difference and 95% interval.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections import defaultdict
from pathlib import Path

from hpcpredict.sim.replica_stats import paired_difference
from hpcpredict.experiments.tune import AVEBSLD_BOUND, MAX_WAIT_BOUND  # the bounds `tune` judges by

PLAIN = "EASY"
UNBOUNDED = "learned, no guard"


def read_runs(path: Path) -> dict[tuple[str, str], dict[int, dict[str, float]]]:
    """(log, label) -> replica -> {ave_bsld, p99 and max wait in hours}."""
    runs: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(dict)
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            runs[row["log"], row["label"]][int(row["replica"])] = {
                "ave_bsld": float(row["ave_bsld"]),
                "p99_h": float(row["m_p99_wait_s"]) / 3600,
                "max_h": float(row["m_max_wait_s"]) / 3600,
            }
    return runs


def mean(replicas: dict[int, dict[str, float]], metric: str) -> float:
    return statistics.fmean(values[metric] for values in replicas.values())


def conditions(runs, log: str, label: str, ave2: str | None) -> dict[str, object]:
    """The goal's four conditions for `label` on `log` (None where a run is missing)."""
    own, plain, free = runs[log, label], runs.get((log, PLAIN)), runs.get((log, UNBOUNDED))
    row: dict[str, object] = {"log": log, "bound": label, "replicas": len(own),
                              "ave_bsld": mean(own, "ave_bsld"), "p99_h": mean(own, "p99_h"),
                              "max_h": mean(own, "max_h")}
    row["max/EASY"] = row["max_h"] / mean(plain, "max_h") if plain else None
    row["p99/EASY"] = row["p99_h"] / mean(plain, "p99_h") if plain else None
    row["AVEbsld/unbounded"] = row["ave_bsld"] / mean(free, "ave_bsld") if free else None
    row["(1)"] = row["max/EASY"] is not None and row["max/EASY"] <= MAX_WAIT_BOUND
    row["(2)"] = row["p99/EASY"] is not None and row["p99/EASY"] <= 1.0
    row["(3)"] = row["AVEbsld/unbounded"] is not None and row["AVEbsld/unbounded"] <= AVEBSLD_BOUND
    row["vs AVE2"], row["(4)"] = "", None
    if ave2 and (log, ave2) in runs:
        common = sorted(set(own) & set(runs[log, ave2]))
        if len(common) >= 2:
            difference = paired_difference([own[r]["ave_bsld"] for r in common],
                                           [runs[log, ave2][r]["ave_bsld"] for r in common])
            row["vs AVE2"] = (f"{difference.relative:+.1%} ({difference.relative_ci_low:+.1%}, "
                              f"{difference.relative_ci_high:+.1%}), {difference.wins}/{difference.n}")
            row["(4)"] = difference.ci_high < 0
    return row


def verdict(value: object) -> str:
    return "n/a" if value is None else ("yes" if value else "NO")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_csv", type=Path, nargs="+",
                        help="campaign reports' runs.csv, read together (same replicas and seed)")
    parser.add_argument("--bound", action="append", required=True,
                        help='"LEARNED LABEL" or "LEARNED LABEL=AVE2 LABEL" (repeatable)')
    parser.add_argument("--versus", metavar="LABEL",
                        help="also pair every bound with this one (AVEbsld, p99 and longest wait)")
    args = parser.parse_args()
    runs: dict[tuple[str, str], dict[int, dict[str, float]]] = defaultdict(dict)
    for path in args.runs_csv:
        for log_label, replicas in read_runs(path).items():
            runs[log_label].update(replicas)
    labels_run = {label for _, label in runs}
    # "LEARNED=AVE2", split at the last "=" unless the whole text is a label ("survival q=0.5")
    bounds = [(text, None) if text in labels_run or "=" not in text else tuple(text.rsplit("=", 1))
              for text in args.bound]
    logs = list(dict.fromkeys(log for log, _ in runs))
    table = {(log, label): conditions(runs, log, label, ave2)
             for log in logs for label, ave2 in bounds if (log, label) in runs}
    print("| log | bound | replicas | AVEbsld | p99 wait h | max wait h | max / EASY | p99 / EASY "
          "| AVEbsld / unbounded | vs AVE2, same bound (95% CI), wins | goal (1) (2) (3) (4) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in table.values():
        print(f"| {row['log']} | {row['bound']} | {row['replicas']} | {row['ave_bsld']:.2f} | "
              f"{row['p99_h']:.1f} | {row['max_h']:.1f} | {row['max/EASY']:.2f} | "
              f"{row['p99/EASY']:.2f} | {row['AVEbsld/unbounded']:.2f} | {row['vs AVE2']} | "
              f"{' '.join(verdict(row[c]) for c in ('(1)', '(2)', '(3)', '(4)'))} |")
    print()
    print("| held out | chosen on the other logs | rule | summed AVEbsld on the others | on the held-out log: AVEbsld, max / EASY, p99 / EASY, goal (1) (2) (3) (4) |")
    print("|---|---|---|---|---|")
    labels = [label for label, _ in bounds]
    complete = [label for label in labels if all((log, label) in table for log in logs)]
    for held_out in logs:
        others = [log for log in logs if log != held_out]
        rule = "(1) and (2) on both"
        eligible = [label for label in complete
                    if all(table[log, label]["(1)"] and table[log, label]["(2)"] for log in others)]
        if not eligible:
            rule = "(1) on both (none kept (2))"
            eligible = [label for label in complete if all(table[log, label]["(1)"] for log in others)]
        if not eligible:
            print(f"| {held_out} | none | no bound keeps (1) on the other logs | | |")
            continue
        chosen = min(eligible, key=lambda label: sum(table[log, label]["ave_bsld"] for log in others))
        row = table[held_out, chosen]
        print(f"| {held_out} | {chosen} | {rule} | "
              f"{sum(table[log, chosen]['ave_bsld'] for log in others):.2f} | {row['ave_bsld']:.2f}, "
              f"{row['max/EASY']:.2f}, {row['p99/EASY']:.2f}, "
              f"{' '.join(verdict(row[c]) for c in ('(1)', '(2)', '(3)', '(4)'))} |")
    if args.versus:
        print_versus(runs, logs, [label for label in labels if label != args.versus], args.versus)


def print_versus(runs, logs: list[str], labels: list[str], reference: str) -> None:
    """Each bound against `reference` on the replicas both have, per log."""
    print()
    print(f"| log | bound | AVEbsld vs {reference} (95% CI) | p99 wait vs it | longest wait vs it |")
    print("|---|---|---|---|---|")
    for log in logs:
        for label in labels:
            if (log, label) not in runs or (log, reference) not in runs:
                continue
            own, base = runs[log, label], runs[log, reference]
            common = sorted(set(own) & set(base))
            if len(common) < 2:
                continue
            cells = []
            for metric in ("ave_bsld", "p99_h", "max_h"):
                difference = paired_difference([own[r][metric] for r in common],
                                               [base[r][metric] for r in common])
                cells.append(f"{difference.relative:+.1%} ({difference.relative_ci_low:+.1%}, "
                             f"{difference.relative_ci_high:+.1%})")
            print(f"| {log} | {label} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
