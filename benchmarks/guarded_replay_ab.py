"""CPU time of the default guarded replay (learned + incremental + EASY-SJBF + 24 h guard) in
one source tree: a warm-up replay, then five timed ones (`time.process_time`), min and median.
Run it for two trees in turn, several rounds, to compare them (docs/performance.md).

    git archive 9eab7e5 | tar -x -C /tmp/h-before
    for r in 1 2 3; do for tree in /tmp/h-before .; do
        python benchmarks/guarded_replay_ab.py $tree ../shared/swf/SDSC-BLUE-2000-4.1-cln.swf.gz; done; done
"""

from __future__ import annotations

import sys
import time

sys.path.insert(0, sys.argv[1])

from hpcpredict.sim.runner import RunSpec, run  # noqa: E402  (from the tree given)
from hpcpredict.logs.workload import load_workload  # noqa: E402

ROUNDS = 5


def main() -> None:
    workload = load_workload(sys.argv[2])
    spec = RunSpec.from_keys(starvation_guard_s=86_400)
    run(workload, spec)  # warm-up: numba's cache, the first compiled calls
    seconds = []
    for _ in range(ROUNDS):
        start = time.process_time()
        run(workload, spec)
        seconds.append(time.process_time() - start)
    seconds.sort()
    print(f"{sys.argv[1]}: replay CPU s min {seconds[0]:.3f}, median {seconds[ROUNDS // 2]:.3f}")


if __name__ == "__main__":
    main()
