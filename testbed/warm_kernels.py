"""Compile hpcpredict's numba kernels into the checkout's cache for this interpreter, once.

A fresh checkout (a CI clone) has no compiled kernels: the first daemon, `simulate` or `train` to
run compiles them (20-60 s on a loaded 2-core machine). Inside the Slurm chroots, a dozen test
processes start at once, each with daemons whose warm-up would compile the same kernels at the
same time, and a daemon then outlasted its start deadline (tests/test_slurm_versions.py). Run
first, alone, this makes every later start a load from the cache:

    python -m testbed.warm_kernels        # or, inside a chroot: slurm_chroot exec sid -m ...
"""

from __future__ import annotations

import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def warm() -> float:
    """Replay the bundled sample with the learned default (features, NAG, the replay loop), the
    first jobs again through the learner's own methods (the kernels a daemon calls one by one:
    PREDICT's peek, a submission, a start, an end; the compiled loop inlines them, so its cache
    does not hold theirs), and ask the survival kernel once. Returns the seconds."""
    began = time.monotonic()
    from hpcpredict.corrections import make_correction
    from hpcpredict.corrections.survival import conditional_quantile_s
    from hpcpredict.learn.predictor import LearnedPredictor
    from hpcpredict.logs.workload import load_workload
    from hpcpredict.sim import SCHEDULERS
    from hpcpredict.sim.easy.simulation import Simulation
    from hpcpredict.sim.runner import RunSpec, run

    workload = load_workload(REPO / "swf" / "KTH-SP2-sample.swf")
    run(workload, RunSpec("easy-sjbf", "learned", "incremental"))
    jobs = list(workload.jobs[:300])
    learner = LearnedPredictor()
    Simulation(jobs, workload.machine_procs, SCHEDULERS["easy-sjbf"], learner,
               make_correction("incremental"), compiled=False).run()
    learner.peek_features(jobs[-1].request, jobs[-1].submit_s + 1)
    learner.peek(jobs[-1].request, jobs[-1].submit_s + 1)
    conditional_quantile_s([600, 1200], [900], 300, 0.5)
    return time.monotonic() - began


if __name__ == "__main__":
    print(f"hpcpredict's kernels compiled or loaded in {warm():.1f} s")
