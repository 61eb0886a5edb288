"""Where the "recent" guard rule puts its threshold over a whole log (docs/results.md,
"Following the site's recent waits"): one replay of the log as it is per multiple, every daily
threshold recorded, their 10th / 50th / 90th percentiles and how often the cap wins, and the
share of scheduling decisions taken under the guard (against today's 24 h guard).

    python benchmarks/recent_guard_thresholds.py ../shared/swf/KTH-SP2-1996-2.swf.gz
    python benchmarks/recent_guard_thresholds.py ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz 80640
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

import hpcpredict.sim.simulation as simulation
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.workload import load_workload

CAP_S = 172_800


@contextmanager
def counting_guarded_decisions() -> Iterator[list[int]]:
    """[scheduling decisions with a reservation, of which taken under the guard], counted while
    the block replays: in the Python loop (the same schedules as the compiled one, which the
    default guard runs in and which has no hook), its `Simulation._remember` wrapped; restored
    after."""
    remember = simulation.Simulation._remember
    covers = simulation.Simulation.compiled_loop_covers
    decisions = [0, 0]

    def counted(self: simulation.Simulation, reservation: object) -> None:
        if reservation is not None:
            decisions[0] += 1
            decisions[1] += bool(reservation.guarded)  # type: ignore[attr-defined]
        remember(self, reservation)  # type: ignore[arg-type]

    simulation.Simulation._remember = counted  # type: ignore[method-assign]
    simulation.Simulation.compiled_loop_covers = lambda self: False  # type: ignore[method-assign]
    try:
        yield decisions
    finally:
        simulation.Simulation._remember = remember  # type: ignore[method-assign]
        simulation.Simulation.compiled_loop_covers = covers  # type: ignore[method-assign]


def main() -> None:
    procs = int(sys.argv[2]) if len(sys.argv) > 2 else None
    workload = load_workload(sys.argv[1], machine_procs=procs)
    threshold_s = simulation.recent_guard_wait_s
    with counting_guarded_decisions() as decisions:
        run(workload, RunSpec(starvation_guard_s=86_400))
    print(f"guard 24 h: {100 * decisions[1] / decisions[0]:.1f}% of {decisions[0]} decisions guarded")
    for multiple in (0.5, 1.0):
        seen: list[int] = []

        def recorded(*args: object, **options: object) -> int:
            value = threshold_s(*args, **options)  # type: ignore[arg-type]
            seen.append(value)
            return value

        simulation.recent_guard_wait_s = recorded  # type: ignore[assignment]
        try:
            with counting_guarded_decisions() as decisions:
                run(workload, RunSpec(starvation_guard_s=CAP_S, guard_rule="recent",
                                      guard_recent_multiple=multiple))
        finally:
            simulation.recent_guard_wait_s = threshold_s
        hours = np.asarray(seen) / 3600
        p10, p50, p90 = np.percentile(hours, [10, 50, 90])
        print(f"{multiple:g}x recent p99 or {CAP_S / 3600:g} h: threshold p10 {p10:.1f} h, "
              f"median {p50:.1f} h, p90 {p90:.1f} h, at the cap {100 * np.mean(seen == np.int64(CAP_S)):.0f}% "
              f"of {len(seen)} daily updates; "
              f"{100 * decisions[1] / decisions[0]:.1f}% of {decisions[0]} decisions guarded")


if __name__ == "__main__":
    main()
