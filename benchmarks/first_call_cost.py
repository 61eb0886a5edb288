"""What a command's first compiled call costs (docs/journal/performance-2026-11.md,
"The whole command after round 3"): two default replays of one log in one process, and the time
numba spends in each kernel's first dispatch (loading it from the cache; the first one also
initialises numba's CPU target).

    cd /tmp && PYTHONPATH=/work/main python /work/main/benchmarks/first_call_cost.py \\
        ../shared/swf/KTH-SP2-1996-2.swf.gz
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numba.core.dispatcher as dispatcher

from hpcpredict.cli.common import load_log
from hpcpredict.sim.runner import RunSpec, run

GUARD_S = 86_400  # the default for the learned predictor

first_calls: list[tuple[float, str]] = []
_compile_for_args = dispatcher.Dispatcher._compile_for_args


def _timed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = _compile_for_args(self, *args, **kwargs)
    first_calls.append((time.perf_counter() - started, self.py_func.__qualname__))
    return result


def main() -> None:
    dispatcher.Dispatcher._compile_for_args = _timed
    workload = load_log(Path(sys.argv[1]), None, False)
    workload.jobs.requests()
    laps = []
    for _ in range(2):
        started = time.process_time()
        run(workload, RunSpec.from_keys(starvation_guard_s=GUARD_S))
        laps.append(time.process_time() - started)
    print(f"replay CPU s: first {laps[0]:.2f}, second {laps[1]:.2f}")
    print(f"first dispatches: {len(first_calls)}, {sum(t for t, _ in first_calls):.2f} s in all")
    for seconds, name in sorted(first_calls, reverse=True):
        print(f"  {seconds * 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
