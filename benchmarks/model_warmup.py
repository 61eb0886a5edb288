"""How far is a fresh model from its later self? The measurement behind `min_trained_jobs`.

Run on demand (never from the test suite); docs/daemon.md ("Readiness") quotes its table:

    python benchmarks/model_warmup.py                      # the three archive logs in ../shared/swf
    python benchmarks/model_warmup.py swf/KTH-SP2-sample.swf

Each log's first jobs are replayed as they happened (`hpcpredict.learn.history`) through the
daemon's learner with its default constants. The weights are saved after k learned jobs; the
features of the jobs submitted while the model had learned between `--reference` and
`--reference` + `--probe` jobs are kept as they were at submission. Each of those jobs is then
predicted with the weights after k jobs and with the weights after `--reference` jobs (clipped to
whole seconds in [1, request], as the daemon answers), and the table gives the share of jobs
whose two predictions are within a factor 2 of each other.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.instants import Instant
from hpcpredict.learn.history import history_events
from hpcpredict.logs.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "swf"
DEFAULT_LOGS = [SHARED / name for name in ("KTH-SP2-1996-2.swf.gz", "SDSC-BLUE-2000-4.1-cln.swf.gz",
                                           "CEA-Curie-2011-2.1-cln.swf.gz")]
LEARNED = (1, 10, 25, 50, 100, 200, 231, 300, 500, 1000)


def within_factor_2(log: Path, reference: int, probe: int) -> dict[int, float]:
    jobs = load_workload(log).jobs[: reference + probe + 200]
    events, _ = history_events(jobs)
    learner = DaemonConfig().predictor_factory()
    weights: dict[int, np.ndarray] = {}
    probes: list[tuple[np.ndarray, int]] = []
    for event in events:
        learned = learner.nag.state.t
        if (learned in LEARNED or learned == reference) and learned not in weights:
            weights[learned] = learner.nag.state.w.copy()
        if event.kind is Instant.SUBMISSION:
            learner.predict(event.request, event.time_s)
            if reference <= learned < reference + probe:
                phi = learner._pending_phi[event.request.job_id].copy()  # noqa: SLF001 - measuring
                probes.append((phi, event.request.requested_s))
        elif event.kind is Instant.START:
            learner.job_started(event.request, event.time_s)
        else:
            learner.job_ended(event.request, event.run_s, event.time_s)

    def seconds(w: np.ndarray) -> np.ndarray:
        return np.array([learner._to_seconds(float(w.dot(phi)), request) for phi, request in probes],  # noqa: SLF001
                        dtype=float)

    later = seconds(weights[reference])
    return {
        k: float(np.mean(np.abs(np.log2(seconds(weights[k]) / later)) <= 1.0))
        for k in LEARNED if k in weights and k < reference
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="*", type=Path, default=DEFAULT_LOGS)
    parser.add_argument("--reference", type=int, default=2000, help="learned jobs of the later self")
    parser.add_argument("--probe", type=int, default=400, help="jobs predicted both ways")
    args = parser.parse_args()
    results = {log.name.split("-")[0] + "-" + log.name.split("-")[1]: within_factor_2(log, args.reference, args.probe)
               for log in args.logs}
    print(f"share of {args.probe} jobs predicted within a factor 2 of the model after {args.reference:,} "
          "learned jobs")
    print("| learned jobs | " + " | ".join(results) + " |")
    print("|---:|" + "---:|" * len(results))
    for k in LEARNED:
        if all(k in shares for shares in results.values()):
            print(f"| {k:,} | " + " | ".join(f"{100 * shares[k]:.0f}%" for shares in results.values()) + " |")


if __name__ == "__main__":
    main()
