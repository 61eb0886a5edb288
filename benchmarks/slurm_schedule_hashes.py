"""Schedule hashes of the SLURM model (`--scheduler slurm-backfill`) on the three archive logs,
to show a change to it leaves its schedules bit-identical (`schedule_hashes.py`'s hash,
`SimulationResult.schedule_digest`, which trees from before 2026-11-28 lack; that script covers
the EASY family). Run it with each tree's hpcpredict first on the path:

    PYTHONPATH=/tmp/speed-before python benchmarks/slurm_schedule_hashes.py KTH,BLUE
    PYTHONPATH=/tmp/speed-before python benchmarks/slurm_schedule_hashes.py CURIE "learned+incr+guard 24 h"
    python benchmarks/slurm_schedule_hashes.py KTH,BLUE,CURIE          # from this checkout

Prints the hpcpredict that ran, then per log and configuration: the hash, AVEbsld, CPU seconds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import hpcpredict
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

SWF = Path(__file__).resolve().parents[2] / "shared" / "swf"
LOGS = {"KTH": ("KTH-SP2-1996-2.swf.gz", None), "BLUE": ("SDSC-BLUE-2000-4.1-cln.swf.gz", None),
        "CURIE": ("CEA-Curie-2011-2.1-cln.swf.gz", 80_640)}
CONFIGURATIONS = {
    "requested": RunSpec("slurm-backfill", "requested", "requested"),
    "learned+incr+guard 24 h": RunSpec.from_keys("slurm-backfill", "learned", "incremental",
                                       starvation_guard_s=86_400),
    "learned+survival": RunSpec("slurm-backfill", "learned", "survival"),
    "ave2+incr+xfactor 5, multifactor, small window": RunSpec.from_keys(
        "slurm-backfill", "ave2", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
        guard_xfactor=5.0, slurm_params="PriorityWeightAge=1000,PriorityWeightJobSize=500,"
        "bf_interval=60,bf_resolution=300,bf_window=1440,bf_max_job_test=50"),
}


def main() -> None:
    logs = sys.argv[1].split(",") if len(sys.argv) > 1 else list(LOGS)
    names = sys.argv[2].split(";") if len(sys.argv) > 2 else list(CONFIGURATIONS)
    print("#", hpcpredict.__file__, flush=True)
    for log in logs:
        file_name, procs = LOGS[log]
        workload = load_workload(SWF / file_name, machine_procs=procs)
        for name in names:
            started = time.process_time()
            result = run(workload, CONFIGURATIONS[name])
            print(f"{log} | {name} | {result.schedule_digest()} | AVEbsld "
                  f"{compute_metrics(result).ave_bsld:.4f} | {time.process_time() - started:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()
