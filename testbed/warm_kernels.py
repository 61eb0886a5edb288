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
    """Replay the bundled sample with the learned default (features, NAG, the replay loop), and
    ask the survival kernel once: the kernels every daemon and replay loads. Returns the seconds."""
    began = time.monotonic()
    from hpcpredict.corrections.survival import conditional_quantile_s
    from hpcpredict.sim.runner import RunSpec, run
    from hpcpredict.logs.workload import load_workload

    run(load_workload(REPO / "swf" / "KTH-SP2-sample.swf"), RunSpec("easy-sjbf", "learned", "incremental"))
    conditional_quantile_s([600, 1200], [900], 300, 0.5)
    return time.monotonic() - began


if __name__ == "__main__":
    print(f"hpcpredict's kernels compiled or loaded in {warm():.1f} s")
