"""Issue 54's frontier: each candidate against AVE2 and the default under the same 24 h guard.

Reads `hpcpredict simulate --replicas 10 --format json` answers (and benchmarks/
predictor_families.py's, which have their shape), one folder per campaign of files named
``<log>-<candidate>.json``, with for each log ``<log>-default.json`` (the shipped default, with
plain EASY as its baseline: `simulate` without --no-baseline), ``<log>-ave2g.json`` (AVE2 under the
same guard) and ``<log>-unbounded.json`` (the learner without a guard). Prints, per log and
candidate, a Markdown table: AVEbsld, its paired relative difference against AVE2 and against the
default (mean, 95% t interval, replicas won: `hpcpredict.sim.replica_stats`), mean max and p99
wait over plain EASY's, AVEbsld over the unbounded learner's, and the predictions as a site reads
them (under-predicted, median over-prediction, corrections per job); then leave-one-log-out over
the candidates that every log has: for each held-out log, among those whose max wait is at most
1.25x plain EASY's on both other logs, the lowest summed AVEbsld there, and how it does on the
held-out log.

    python benchmarks/family_frontier.py /tmp/fam/out
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from hpcpredict.experiments.tune import MAX_WAIT_BOUND
from hpcpredict.sim.replica_stats import paired_difference

REFERENCES = ("default", "ave2g", "unbounded")
LOGS = ("KTH", "BLUE", "Curie")
LOG_NAMES = {"KTH": "KTH-SP2", "BLUE": "SDSC-BLUE", "Curie": "CEA-Curie"}
# file name -> how the table names it (hist-X: `--history-by user+X`)
CANDIDATE_NAMES = {
    "default": "**the default** (24 h guard, INCREMENTAL)", "ave2g": "AVE2, same guard",
    "unbounded": "learned, no guard", "survival": "survival correction (q = 0.5)",
    "gbm": "refitted GBM (median of log runtime)", "ensemble": "per-user ensemble (learned or AVE2)",
}


def shown(candidate: str) -> str:
    if candidate.startswith("hist-"):
        return f"`--history-by user+{candidate[5:]}`"
    return CANDIDATE_NAMES.get(candidate, candidate)


def read(path: Path) -> tuple[list[dict], list[dict] | None]:
    """(the run's replicas, the baseline's replicas when the answer has one)."""
    answer = json.loads(path.read_text())
    runs = answer["runs"]
    return runs[0]["replicas"], (runs[1]["replicas"] if len(runs) > 1 else None)


def mean(replicas: list[dict], key: str) -> float:
    return statistics.fmean(replica[key] for replica in replicas if key in replica) if any(
        key in replica for replica in replicas) else float("nan")


def paired(replicas: list[dict], against: list[dict]) -> str:
    n = min(len(replicas), len(against))
    if n < 2:
        return "-"
    diff = paired_difference([r["ave_bsld"] for r in replicas[:n]], [r["ave_bsld"] for r in against[:n]])
    return (f"{100 * diff.relative:+.1f}% ({100 * diff.relative_ci_low:+.1f}, {100 * diff.relative_ci_high:+.1f}), "
            f"{diff.wins}/{diff.n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    runs: dict[str, dict[str, list[dict]]] = defaultdict(dict)
    plain: dict[str, list[dict]] = {}
    for path in sorted(args.folder.glob("*.json")):
        log, _, candidate = path.stem.partition("-")
        try:
            replicas, baseline = read(path)
        except (ValueError, KeyError, IndexError):  # a run still being written, or not a simulate answer
            continue
        runs[log][candidate] = replicas
        if candidate == "default" and baseline is not None:
            plain[log] = baseline
    print("| log | candidate | replicas | AVEbsld | vs AVE2, same guard | vs the default | max wait / EASY | "
          "p99 wait / EASY | AVEbsld / unbounded | under-predicted | median over-prediction | corrections/job |")
    print("|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    summary: dict[tuple[str, str], tuple[float, float]] = {}
    for log in LOGS:
        if log not in runs or not {"default", "ave2g", "unbounded"} <= set(runs[log]) or log not in plain:
            continue
        easy, unbounded = plain[log], runs[log]["unbounded"]
        for candidate in sorted(runs[log], key=lambda name: (name not in REFERENCES, name)):
            replicas = runs[log][candidate]
            max_ratio = mean(replicas, "max_wait_s") / mean(easy, "max_wait_s")
            p99_ratio = mean(replicas, "p99_wait_s") / mean(easy, "p99_wait_s")
            summary[log, candidate] = (mean(replicas, "ave_bsld"), max_ratio)
            over = mean(replicas, "median_over_prediction_s")
            print(f"| {LOG_NAMES[log]} | {shown(candidate)} | {len(replicas)} | {mean(replicas, 'ave_bsld'):.2f} | "
                  f"{paired(replicas, runs[log]['ave2g']) if candidate != 'ave2g' else ''} | "
                  f"{paired(replicas, runs[log]['default']) if candidate != 'default' else ''} | "
                  f"{max_ratio:.2f} | {p99_ratio:.2f} | {mean(replicas, 'ave_bsld') / mean(unbounded, 'ave_bsld'):.2f} | "
                  f"{100 * mean(replicas, 'under_prediction_rate'):.1f}% | "
                  f"{'-' if over != over else f'{over / 60:,.0f} min'} | {mean(replicas, 'corrections_per_job'):.2f} |")
    everywhere = sorted(set.intersection(*(set(runs[log]) for log in LOGS if log in runs)) - {"ave2g", "unbounded"})
    print()
    print(f"Leave-one-log-out among {', '.join(map(shown, everywhere))} (max wait at most {MAX_WAIT_BOUND:g}x plain EASY's "
          f"on both other logs, then the lowest summed AVEbsld there):")
    for held_out in LOGS:
        others = [log for log in LOGS if log != held_out]
        if not all((log, candidate) in summary for log in LOGS for candidate in everywhere):
            continue
        bounded = [c for c in everywhere if all(summary[log, c][1] <= MAX_WAIT_BOUND for log in others)]
        pool = bounded or everywhere
        choice = min(pool, key=lambda c: sum(summary[log, c][0] for log in others))
        bsld, ratio = summary[held_out, choice]
        print(f"- {LOG_NAMES[held_out]} held out: {shown(choice)} (AVEbsld {bsld:.2f} there, max wait {ratio:.2f}x plain EASY's; "
              f"vs AVE2 {paired(runs[held_out][choice], runs[held_out]['ave2g'])})")


if __name__ == "__main__":
    main()
