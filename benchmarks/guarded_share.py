"""How often the 24 h starvation guard is due as a log's load grows (docs/results.md, "Under a
heavier load"): one replay of the log under each load (`hpcpredict.sim.load_scaling`), the learned
default, and the share of its scheduling decisions taken under the guard (a reservation on the
running jobs' requests), beside plain EASY's and the default's AVEbsld.

    python benchmarks/guarded_share.py ../shared/swf/KTH-SP2-1996-2.swf.gz --loads 1,1.2,1.3
    python benchmarks/guarded_share.py ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz --procs 80640
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hpcpredict.sim.easy.simulation as simulation
from hpcpredict.sim.load_scaling import scaled_load
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload

DEFAULT = RunSpec.from_keys(starvation_guard_s=86_400)
EASY = RunSpec("easy", "requested", "requested")


@contextmanager
def counting_guarded_decisions() -> Iterator[list[int]]:
    """[scheduling decisions with a reservation, of which taken under the guard], counted while
    the block replays: in the Python loop (the same schedules as the compiled one, which the
    default guard runs in and which has no hook), its `Simulation._remember` wrapped; restored
    after."""
    remember = simulation.Simulation._remember
    why = simulation.Simulation.why_python_loop
    decisions = [0, 0]

    def counted(self: simulation.Simulation, reservation: object) -> None:
        if reservation is not None:
            decisions[0] += 1
            decisions[1] += bool(reservation.guarded)  # type: ignore[attr-defined]
        remember(self, reservation)  # type: ignore[arg-type]

    simulation.Simulation._remember = counted  # type: ignore[method-assign]
    simulation.Simulation.why_python_loop = lambda self: "measured"  # type: ignore[method-assign]
    try:
        yield decisions
    finally:
        simulation.Simulation._remember = remember  # type: ignore[method-assign]
        simulation.Simulation.why_python_loop = why  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None, help="machine size (default: the header's)")
    parser.add_argument("--loads", default="1,1.1,1.2,1.3", help="load factors, comma-separated")
    args = parser.parse_args()
    workload = load_workload(args.log, machine_procs=args.procs)
    print("| load | decisions guarded | EASY AVEbsld | default AVEbsld |\n|---|---|---|---|")
    for load in (float(value) for value in args.loads.split(",")):
        scaled = scaled_load(workload, load)
        with counting_guarded_decisions() as decisions:
            default = compute_metrics(run(scaled, DEFAULT)).ave_bsld
        easy = compute_metrics(run(scaled, EASY)).ave_bsld
        print(f"| x{load:g} | {100 * decisions[1] / decisions[0]:.1f}% of {decisions[0]:,} | "
              f"{easy:.1f} | {default:.1f} |", flush=True)


if __name__ == "__main__":
    main()
