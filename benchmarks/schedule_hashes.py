"""One hash per (log, configuration) of every job's schedule, to show a change to the simulator
leaves the schedules bit-identical.

Run it on a checkout of the code before the change and on the code after it, and compare the
printed lines (the first line names the hpcpredict package that ran, so a comparison cannot
silently run the same code twice). From a checkout that is not the installed package, run it as
a module so that the checkout's own code is imported:

    cd /path/to/checkout && python -m benchmarks.schedule_hashes --swf-dir ../shared/swf
    python benchmarks/schedule_hashes.py --extra             # also the guard, SURVIVAL, ...

A job's schedule is (start, end, limit, corrections): the start time, the true end (start +
runtime), the last predicted runtime the plan used for it, and how many corrections it took;
the hash is SHA-256 over those of every job in log order (`SimulationResult.schedule_digest`,
which trees from before 2026-11-28 lack: hash those with their own copy of this script). AVEbsld
is printed beside it for the reader, the hash is the check.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import hpcpredict
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

SHARED_SWF = Path(__file__).resolve().parents[2] / "shared" / "swf"
# log file -> machine size override (docs/method.md §10: CEA-Curie as the reference ran it)
LOGS = {
    "KTH-SP2-1996-2.swf.gz": None,
    "SDSC-BLUE-2000-4.1-cln.swf.gz": None,
    "CEA-Curie-2011-2.1-cln.swf.gz": 80_640,
}
CONFIGURATIONS = {
    "easy (requested)": RunSpec("easy", "requested", "requested"),
    "easy-sjbf (requested)": RunSpec("easy-sjbf", "requested", "requested"),
    "easy++ (ave2+incr+sjbf)": RunSpec("easy-sjbf", "ave2", "incremental"),
    "learned eloss+incr+sjbf": RunSpec("easy-sjbf", "learned", "incremental"),
    "clairvoyant sjbf": RunSpec("easy-sjbf", "clairvoyant", "requested"),
}
# Paths of the replay the default set does not take: the starvation guard (pinned jobs), a
# correction with state (SURVIVAL), decisions on corrections, doubling, plain EASY + AVE2.
EXTRA_CONFIGURATIONS = {
    "learned eloss+incr+sjbf+guard 24h": RunSpec.from_keys(
        "easy-sjbf", "learned", "incremental", starvation_guard_s=86_400
    ),
    "learned eloss+survival+sjbf": RunSpec("easy-sjbf", "learned", "survival"),
    "learned eloss+incr+sjbf, decide on corrections": RunSpec(
        "easy-sjbf", "learned", "incremental", decide_on_correction=True
    ),
    "ave2+doubling+easy": RunSpec("easy", "ave2", "doubling"),
    "ave2+incr+easy+guard 1h": RunSpec.from_keys("easy", "ave2", "incremental", starvation_guard_s=3600),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--swf-dir", type=Path, default=SHARED_SWF,
                        help=f"where the logs are (default {SHARED_SWF})")
    parser.add_argument("--log", action="append", choices=sorted(LOGS), default=None,
                        help="only this log (repeatable); default: all three")
    parser.add_argument("--extra", action="store_true", help="also EXTRA_CONFIGURATIONS")
    parser.add_argument("--only-extra", action="store_true", help="only EXTRA_CONFIGURATIONS")
    args = parser.parse_args()
    configurations = {} if args.only_extra else dict(CONFIGURATIONS)
    if args.extra or args.only_extra:
        configurations.update(EXTRA_CONFIGURATIONS)
    print(f"# hpcpredict from {Path(hpcpredict.__file__).parent}", flush=True)
    for log_name in args.log or LOGS:
        workload = load_workload(args.swf_dir / log_name, machine_procs=LOGS[log_name])
        for name, spec in configurations.items():
            started = time.process_time()
            result = run(workload, spec)
            cpu_s = time.process_time() - started
            print(f"{log_name} | {name} | {result.schedule_digest()} | "
                  f"AVEbsld {compute_metrics(result).ave_bsld:.4f}", flush=True)
            print(f"  {cpu_s:.1f} s CPU", file=sys.stderr)


if __name__ == "__main__":
    main()
