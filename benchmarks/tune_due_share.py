"""How often a guard `hpcpredict tune` chose was due in the later part of a log
(docs/journal/results-2026-11.md, "`hpcpredict tune` with guards scaled to the site's own
waits"): the figure `tune` prints as "The chosen guard was due N% of the later period", for a
setting given here instead of chosen, so that the choices recorded there can be checked without
running `tune`'s whole grid again. One replay of the log as it is, the learned predictor on
EASY-SJBF, the split at the same share of the jobs as `tune`'s default.

    python benchmarks/tune_due_share.py ../shared/swf/KTH-SP2-1996-2.swf.gz --guard 6h --correction survival
    python benchmarks/tune_due_share.py ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640 --guard 24h
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hpcpredict.corrections.starvation import parse_starvation_guard
from hpcpredict.sim.guard_due import replayed_due_share
from hpcpredict.sim.runner import RunSpec
from hpcpredict.experiments.tune import split_s
from hpcpredict.logs.workload import load_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None, help="machine size (default: the header's)")
    parser.add_argument("--guard", default="24h", help="the starvation guard, as --starvation-guard")
    parser.add_argument("--correction", default=RunSpec.correction, help="incremental or survival")
    parser.add_argument("--split", type=float, default=2 / 3, help="share of the jobs in the earlier part")
    args = parser.parse_args()
    workload = load_workload(args.log, machine_procs=args.procs)
    spec = RunSpec.from_keys("easy-sjbf", "learned", args.correction,
                   starvation_guard_s=parse_starvation_guard(args.guard))
    share = replayed_due_share(workload, spec, split_s(workload, args.split))
    print(f"{workload.name}: guard {args.guard} + {args.correction}: due "
          + ("never (no guard)" if share is None else f"{share:.1%}") + " of the later period")


if __name__ == "__main__":
    main()
