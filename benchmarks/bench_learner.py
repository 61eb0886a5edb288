"""The learner's cost per job, alone: what docs/performance.md quotes for the learned replays.

Run on demand (never from the test suite):

    python benchmarks/bench_learner.py                       # KTH-SP2 from ../shared/swf
    python benchmarks/bench_learner.py ../shared/swf/SDSC-BLUE-2000-4.1-cln.swf.gz

Replays the log's jobs through a `LearnedPredictor` in submission order (each job starts at its
submission, ends are reported in time order), timing `predict`, `job_started` and `job_ended`
per job (best of --repeat passes), then times the parts of a prediction and of a learning step
on the trained model: feature computation, the degree-2 expansion, the dot product, the NAG step,
and a peek (the daemon's PREDICT). Another tree's code: ``PYTHONPATH=TREE python THIS_FILE``.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import timeit
from pathlib import Path

import numpy as np

from hpcpredict.learn.features import N_FEATURES
from hpcpredict.learn.nag import Nag, NagState
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload

DEFAULT_LOG = Path(__file__).resolve().parents[2] / "shared" / "swf" / "KTH-SP2-1996-2.swf.gz"


def replay(jobs: list, clock=timeit.default_timer) -> tuple[LearnedPredictor, dict[str, float]]:
    predictor = LearnedPredictor()
    spent = {"predict": 0.0, "job_started": 0.0, "job_ended": 0.0}
    ends: list[tuple[int, int]] = []
    for index, job in enumerate(jobs):
        request = job.request
        while ends and ends[0][0] <= request.submit_s:
            end_s, ended = heapq.heappop(ends)
            started = clock()
            predictor.job_ended(jobs[ended].request, jobs[ended].run_s, end_s)
            spent["job_ended"] += clock() - started
        started = clock()
        predictor.predict(request, request.submit_s)
        spent["predict"] += clock() - started
        started = clock()
        predictor.job_started(request, request.submit_s)
        spent["job_started"] += clock() - started
        heapq.heappush(ends, (request.submit_s + job.run_s, index))
    return predictor, spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=DEFAULT_LOG)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    jobs = load_workload(args.log).jobs
    best: dict[str, float] = {}
    for _ in range(args.repeat):  # the first pass also loads the compiled kernels
        predictor, spent = replay(jobs)
        best = {name: min(value, best.get(name, value)) for name, value in spent.items()}
    count = len(jobs)
    print(f"{args.log.name}: {count:,} jobs, best of {args.repeat}")
    print("| per job | us |")
    print("|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds / count * 1e6:.2f} |")
    print(f"| all | {sum(best.values()) / count * 1e6:.2f} |  ({sum(best.values()):.2f} s for the log)")

    request = jobs[len(jobs) // 2].request
    x = np.empty(N_FEATURES)
    phi = predictor._expansion.expand(predictor.features.compute(request, request.submit_s, x))
    phi_out = np.empty_like(phi)
    gradient = predictor._loss.gradient
    # The step on a copy of the trained model (the steps move it a little: the cost does not).
    state = predictor.nag.state
    nag = Nag(predictor.nag.n_coords, predictor.nag.config,
              NagState(state.w.copy(), state.s.copy(), state.g_sum.copy(), state.n_sum, state.t))
    unnumbered = dataclasses.replace(request, job_id=-1)
    parts = {
        "features (FeatureState.compute)": lambda: predictor.features.compute(request, request.submit_s, x),
        "expansion (QuadraticExpansion.expand)": lambda: predictor._expansion.expand(x),
        "dot product (w . Phi)": lambda: float(predictor.nag.state.w.dot(phi)),
        "expansion and dot in one call (QuadraticExpansion.score)":
            lambda: predictor._expansion.score(x, predictor.nag.state.w, phi_out),
        "NAG step (Nag.step)": lambda: nag.step(phi, lambda f: gradient(f, 100.0, 4.0)),
        # the daemon's PREDICT (a job not yet numbered: nothing recorded)
        "a peek (LearnedPredictor.peek_features)":
            lambda: predictor.peek_features(unnumbered, request.submit_s),
    }
    calls = 20_000
    print("| part, per call | us |")
    print("|---|---|")
    for name, part in parts.items():
        seconds = min(timeit.repeat(part, number=calls, repeat=3)) / calls
        print(f"| {name} | {seconds * 1e6:.2f} |")


if __name__ == "__main__":
    main()
