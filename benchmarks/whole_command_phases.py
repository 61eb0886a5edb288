"""Where a whole `hpcpredict simulate LOG --no-baseline` spends its CPU, phase by phase, in one
process: imports, read + clean, the objects the replay reads, the compiled kernels' loading, the
replay (default configuration: EASY-SJBF + learned + incremental + the 24 h guard), the metrics.

Runs the tree its PYTHONPATH names, so older trees can be measured the same way:

    cd /tmp && PYTHONPATH=/work/wt-speed2 python /work/wt-speed2/benchmarks/whole_command_phases.py \\
        ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640

CPU seconds (`time.process_time`); trees whose `load_log` builds the job objects count them
under "read + clean". Prints one line; the AVEbsld is there to show both trees replayed alike.
"""

from __future__ import annotations

import time

STARTED = time.process_time()

import argparse  # noqa: E402
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

from hpcpredict.cli.common import load_log  # noqa: E402
from hpcpredict.sim.runner import RunSpec, run  # noqa: E402

GUARD_S = 86_400  # the default for the learned predictor (older trees have no function for it)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    args = parser.parse_args()
    phases: dict[str, float] = {"imports": time.process_time() - STARTED}

    def lap(name: str, since: float) -> float:
        now = time.process_time()
        phases[name] = now - since
        return now

    at = time.process_time()
    workload = load_log(args.log, args.procs, False)
    at = lap("read + clean", at)
    jobs = workload.jobs  # what the tree's replay reads: the requests, or every Job object
    if importlib.util.find_spec("hpcpredict.sim.easy.compiled_replay") is None:  # (the compiled loop
        jobs.requests() if hasattr(jobs, "requests") else jobs[0]  # reads the columns alone)
    at = lap("objects", at)
    import hpcpredict.learn.nag_kernels  # noqa: F401  numba and the cached kernels' modules
    import hpcpredict.sim.easy.backfill_kernel  # noqa: F401
    at = lap("kernel modules", at)
    result = run(workload, RunSpec.from_keys(starvation_guard_s=GUARD_S))
    at = lap("replay", at)
    from hpcpredict.sim.metrics import compute_metrics

    metrics = compute_metrics(result)
    lap("metrics", at)
    print(", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())
          + f", total {time.process_time():.2f} s CPU; AVEbsld {metrics.ave_bsld:.4f}")


if __name__ == "__main__":
    main()
