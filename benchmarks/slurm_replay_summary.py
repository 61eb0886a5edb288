"""Record against lower mode on a real SLURM, slice by slice, from benchmarks/slurm_replay.py's output.

    python benchmarks/slurm_replay_summary.py DIR

Reads DIR/*-record.compare.json and DIR/*-lower.compare.json (same slice: same name before the
mode) and prints, per slice, AVEbsld, mean and max wait as SLURM did them and as the slurm-backfill
model did them on the same jobs, then the paired difference lower - record over the slices with its
95% Student-t interval (hpcpredict.sim.replica_stats, docs/evaluation.md), for SLURM and for the
model, and the model's agreement with SLURM (Spearman of the start order, mean |start difference|).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcpredict.sim.replica_stats import paired_difference  # noqa: E402

METRICS = (("ave_bsld", "AVEbsld", "{:.2f}"), ("mean_wait_s", "mean wait s", "{:.0f}"),
           ("max_wait_s", "max wait s", "{:.0f}"))


def main() -> None:
    folder = Path(sys.argv[1])
    pairs = []
    for record in sorted(folder.glob("*-record.compare.json")):
        lower = record.with_name(record.name.replace("-record.", "-lower."))
        if lower.exists():
            pairs.append((record.name.removesuffix("-record.compare.json"),
                          json.loads(record.read_text()), json.loads(lower.read_text())))
    print("| slice | source | " + " | ".join(f"{title} record | {title} lower" for _, title, _ in METRICS) + " |")
    print("|---|---|" + "---|---|" * len(METRICS))
    for name, record, lower in pairs:
        for source in ("slurm", "simulated"):
            cells = []
            for key, _, fmt in METRICS:
                cells += [fmt.format(record[source][key]), fmt.format(lower[source][key])]
            print(f"| {name} | {'SLURM' if source == 'slurm' else 'model'} | " + " | ".join(cells) + " |")
    if len(pairs) > 1:
        print()
        for source in ("slurm", "simulated"):
            for key, title, _ in METRICS:
                difference = paired_difference([lower[source][key] for _, _, lower in pairs],
                                               [record[source][key] for _, record, _ in pairs])
                print(f"{'SLURM' if source == 'slurm' else 'model'} {title}: lower - record "
                      f"{difference.to_dict()}")
    print()
    for name, record, lower in pairs:
        for mode, data in (("record", record), ("lower", lower)):
            match = data["agreement"]
            print(f"{name} {mode}: Spearman {match['spearman_start_order']:.3f}, mean |start diff| "
                  f"{match['mean_abs_start_diff_s']:.1f} s, median {match['median_abs_start_diff_s']:.1f} s")


if __name__ == "__main__":
    main()
