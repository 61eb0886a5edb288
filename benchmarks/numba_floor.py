"""The floor under any `hpcpredict simulate` while its kernels are numba's: the CPU a
process spends, from the interpreter's start, to import numpy and numba and get one cached
kernel's first answer, before it reads a single job. Cumulative `time.process_time` (which
counts from the process's start) after each step.

    cd /tmp && PYTHONPATH=/work/main python /work/main/benchmarks/numba_floor.py   # twice: warm cache
"""

from __future__ import annotations

import time

laps = [("interpreter start", time.process_time())]

import numpy  # noqa: E402,F401

laps.append(("numpy", time.process_time()))

import numba  # noqa: E402,F401

laps.append(("numba", time.process_time()))

from hpcpredict.sim.engine.profile_kernel import insert, new_profile_table  # noqa: E402

laps.append(("a kernel module (decorated, cache found)", time.process_time()))
table = new_profile_table(8)
insert(table, 100, 0, 4)  # numba's CPU target initialised, the kernel loaded from its cache
laps.append(("first compiled call", time.process_time()))
insert(table, 200, 1, 2)
laps.append(("second call", time.process_time()))

if __name__ == "__main__":
    for name, seconds in laps:
        print(f"{seconds:6.3f} s CPU  after {name}")
