"""Does the slurm-backfill model predict what lowering limits does to a real SLURM? Paired slices.

    python benchmarks/slurm_lower_validation.py DIR

DIR holds benchmarks/slurm_replay.py's output for several slices, each replayed twice at once (record
and lower mode): NAME-record.{csv,compare.json} and NAME-lower.{csv,compare.json}. For every slice:

* the real lower - record AVEbsld difference (SLURM's, from the replays' start times), with a 95%
  Student-t interval over its jobs' paired bounded-slowdown differences (the same log job in both
  runs; tau = 10 s). The jobs of one slice share a queue, so their differences are not independent
  and this interval is indicative only; the pooled interval below, over slices, is the one to read;
* the model's difference on the same jobs: slurm-backfill planning with the requests (record) and
  with the limits the plugin set, corrected 45 s ahead as the corrector did (lower);
* per-job agreement of the model with SLURM in lower mode (mean / median |start difference|, the
  share within 60 s, Spearman of the start order).

Pooled: the mean of the per-slice differences with its 95% t interval over slices (real and
model; `hpcpredict.sim.replica_stats.paired_difference`), the per-slice real-vs-model correlation,
and how often the model got the sign of the real difference.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcpredict.sim.replica_stats import mean_ci, paired_difference  # noqa: E402

TAU_S = 10


def bounded_slowdowns(path: Path) -> dict[int, float]:
    """Per log job: max(1, (wait + run) / max(run, tau)) from replay-slurm's CSV."""
    slowdowns = {}
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            submit_s, start_s, end_s = int(row["submit_s"]), int(row["start_s"]), int(row["end_s"])
            run_s = end_s - start_s
            slowdowns[int(row["log_job_id"])] = max(1.0, (start_s - submit_s + run_s) / max(run_s, TAU_S))
    return slowdowns


def users(path: Path) -> int:
    """How many accounts the slice's jobs ran as (replay-slurm --users log: one per log user)."""
    with path.open(newline="") as stream:
        return len({row.get("slurm_uid") for row in csv.DictReader(stream)})


def lowered_count(path: Path) -> tuple[int, int, int]:
    """(jobs whose limit the plugin lowered, of them raised again by the corrector, jobs killed)."""
    lowered = raised = killed = 0
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            request_min = int(row["request_min"])
            prediction = row["prediction_s"]
            plugin_min = request_min if not prediction else max(1, min(request_min, math.ceil(int(prediction) / 60)))
            if plugin_min < request_min:
                lowered += 1
                raised += int(row["final_limit_min"]) > plugin_min
            killed += row["state"] == "TIMEOUT"
    return lowered, raised, killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    slices = []
    def natural(path: Path) -> list[object]:  # slice 7380 before 10080
        return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]

    for record in sorted(args.folder.glob("*-record.compare.json"), key=natural):
        name = record.name.removesuffix("-record.compare.json")
        lower = record.with_name(f"{name}-lower.compare.json")
        if not lower.exists():
            continue
        rec, low = json.loads(record.read_text()), json.loads(lower.read_text())
        rec_bsld = bounded_slowdowns(args.folder / f"{name}-record.csv")
        low_bsld = bounded_slowdowns(args.folder / f"{name}-lower.csv")
        if set(rec_bsld) != set(low_bsld):
            raise SystemExit(f"{name}: the two runs are not of the same jobs")
        per_job = np.array([low_bsld[job] - rec_bsld[job] for job in sorted(rec_bsld)])
        slices.append({
            "name": name, "jobs": len(per_job), "record": rec, "lower": low, "per_job": mean_ci(per_job),
            "real": low["slurm"]["ave_bsld"] - rec["slurm"]["ave_bsld"],
            "model": low["simulated"]["ave_bsld"] - rec["simulated"]["ave_bsld"],
            "lowered": lowered_count(args.folder / f"{name}-lower.csv"),
            "users": users(args.folder / f"{name}-lower.csv"),
        })
    if not slices:
        raise SystemExit(f"{args.folder}: no pair of *-record/-lower compare.json")
    print("| slice (jobs, users) | lowered / raised again / killed | SLURM AVEbsld record -> lower | real difference "
          "(95% CI over jobs) | model AVEbsld record -> lower | model difference | lower mode: mean / median "
          "\\|start diff\\| s, within 60 s, Spearman |")
    print("|---|---|---|---|---|---|---|")
    for item in slices:
        rec, low, ci = item["record"], item["lower"], item["per_job"]
        match = low["agreement"]
        print(f"| {item['name']} ({item['jobs']}, {item['users']}) | {item['lowered'][0]} / {item['lowered'][1]} / {item['lowered'][2]} | "
              f"{rec['slurm']['ave_bsld']:.2f} -> {low['slurm']['ave_bsld']:.2f} | {item['real']:+.2f} "
              f"({ci.ci_low:+.2f}, {ci.ci_high:+.2f}) | {rec['simulated']['ave_bsld']:.2f} -> "
              f"{low['simulated']['ave_bsld']:.2f} | {item['model']:+.2f} | {match['mean_abs_start_diff_s']:.1f} / "
              f"{match['median_abs_start_diff_s']:.1f}, {match['same_start_share']:.0%}, "
              f"{match['spearman_start_order']:.3f} |")
    real = [item["real"] for item in slices]
    model = [item["model"] for item in slices]
    zeros = [0.0] * len(slices)
    print()
    for label, values in (("real (SLURM)", real), ("model", model)):
        difference = paired_difference(values, zeros)
        print(f"pooled lower - record AVEbsld, {label}: {difference.mean:+.2f} (95% CI {difference.ci_low:+.2f}, "
              f"{difference.ci_high:+.2f}) over {len(slices)} slices; lower better on {difference.wins}, worse on "
              f"{difference.losses}")
    for key in ("mean_wait_s", "p99_wait_s", "max_wait_s"):  # the worst case beside the average
        difference = paired_difference([item["lower"]["slurm"][key] for item in slices],
                                       [item["record"]["slurm"][key] for item in slices])
        print(f"pooled lower - record {key}, real (SLURM): {difference.mean:+.0f} (95% CI {difference.ci_low:+.0f}, "
              f"{difference.ci_high:+.0f}); record's mean {np.mean([i['record']['slurm'][key] for i in slices]):.0f}")
    gap = paired_difference(model, real)
    print(f"model - real difference: {gap.mean:+.2f} (95% CI {gap.ci_low:+.2f}, {gap.ci_high:+.2f})")
    if len(slices) > 2 and np.ptp(real) > 0 and np.ptp(model) > 0:
        print(f"correlation of the per-slice differences, real vs model: {np.corrcoef(real, model)[0, 1]:.2f}")
    signs = sum((r > 0) == (m > 0) for r, m in zip(real, model) if r != 0 and m != 0)
    print(f"same sign: {signs} of {sum(1 for r, m in zip(real, model) if r != 0 and m != 0)} slices where both moved")
    for mode in ("record", "lower"):
        shares = [item[mode]["agreement"]["same_start_share"] for item in slices]
        means = [item[mode]["agreement"]["mean_abs_start_diff_s"] for item in slices]
        print(f"{mode} mode, per-job start agreement over all slices: within 60 s {np.mean(shares):.0%}, "
              f"mean |start diff| {np.mean(means):.1f} s (slice means {min(means):.1f}-{max(means):.1f})")


if __name__ == "__main__":
    main()
