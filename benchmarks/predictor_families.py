"""Learners beside NAG, for issue 54's frontier: measured by the same guarded replays, not shipped.

Two families the issue names, as predictors of the simulator's protocol (Python loop):

* ``gbm``: a gradient-boosted model refitted every `--refit-every` ended jobs on the last
  `--window` (scikit-learn's HistGradientBoostingRegressor, 100 trees, quantile loss on
  log(1 + runtime), `--quantile` 0.5: the median), on the same 20 features as the learner
  (hpcpredict's own FeatureState: one implementation of the features); AVE2 until the first fit
  (500 ended jobs). Its trees are evaluated by a small numba function (scikit-learn's predict
  costs about 1 ms a call, which made a replay of SDSC-BLUE hours long).
* ``ensemble``: the learned model (the default settings) and AVE2 side by side, the one with the
  lower mean E-Loss (hours; over-prediction squared, under-prediction linear) over the user's
  last `--window` ended jobs chosen per user (the learned model until then).

Both run EASY-SJBF with INCREMENTAL corrections under the 24 h starvation guard, as the default
does, on the shaken replicas `hpcpredict simulate --replicas` replays (same seed and shake), and
write the JSON shape of `hpcpredict simulate --format json --no-baseline` (runs[0].replicas), so
that benchmarks/family_frontier.py pairs them with `simulate`'s own runs replica by replica:

    python benchmarks/predictor_families.py gbm ../shared/swf/KTH-SP2-1996-2.swf.gz --out kth-gbm.json
    python benchmarks/predictor_families.py ensemble ../shared/swf/CEA-Curie-2011-2.1-cln.swf.gz \
        --procs 80640 --out curie-ensemble.json

Needs scikit-learn (``pip install scikit-learn``; not a dependency of hpcpredict). One replay of
SDSC-BLUE takes about 2 minutes (gbm) on one core here.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one fit at a time per core; threads only spin here

import argparse
import dataclasses
import json
import time
from collections import defaultdict, deque
from pathlib import Path

import numba
import numpy as np

from hpcpredict.corrections.policies import IncrementalCorrection
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.learn.baselines import Ave2Predictor
from hpcpredict.learn.features import FeatureState
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.logs.workload import load_workload
from hpcpredict.sim.easy.schedulers import SCHEDULERS
from hpcpredict.sim.easy.simulation import simulate
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import feature_context
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S, replica


@numba.njit(cache=True)
def _trees_sum(x, feature, threshold, left, right, leaf, value, roots, baseline):  # pragma: no cover - compiled
    """The boosted trees' output for one row `x`: each tree walked from its root to a leaf."""
    total = baseline
    for root in roots:
        node = root
        while not leaf[node]:
            node = left[node] if x[feature[node]] <= threshold[node] else right[node]
        total += value[node]
    return total


class Trees:
    """A fitted HistGradientBoostingRegressor's trees as flat arrays, for `_trees_sum`."""

    def __init__(self, model) -> None:  # model: HistGradientBoostingRegressor
        parts: dict[str, list[np.ndarray]] = defaultdict(list)
        roots, offset = [], 0
        for (tree,) in model._predictors:
            nodes = tree.nodes
            roots.append(offset)
            parts["feature"].append(nodes["feature_idx"].astype(np.int64))
            parts["threshold"].append(nodes["num_threshold"].astype(np.float64))
            parts["left"].append(nodes["left"].astype(np.int64) + offset)
            parts["right"].append(nodes["right"].astype(np.int64) + offset)
            parts["leaf"].append(nodes["is_leaf"].astype(np.bool_))
            parts["value"].append(nodes["value"].astype(np.float64))
            offset += len(nodes)
        self.arrays = tuple(np.concatenate(parts[name]) for name in
                            ("feature", "threshold", "left", "right", "leaf", "value"))
        self.roots = np.array(roots, dtype=np.int64)
        self.baseline = float(np.ravel(model._baseline_prediction)[0])

    def __call__(self, x: np.ndarray) -> float:
        return _trees_sum(x, *self.arrays, self.roots, self.baseline)


class Gbm:
    """The refitted gradient-boosted model (module doc)."""

    name = "gbm"

    def __init__(self, context, quantile: float = 0.5, refit_every: int = 2000, window: int = 20_000,
                 first_fit: int = 500) -> None:
        self.features = FeatureState(context)
        self.before_first_fit = Ave2Predictor()
        self.quantile, self.refit_every, self.window, self.first_fit = quantile, refit_every, window, first_fit
        self.rows: list[np.ndarray] = []
        self.targets: list[float] = []
        self.pending: dict[int, np.ndarray] = {}
        self.trees: Trees | None = None
        self.since_fit = 0

    def why_python(self) -> str:
        return "a learner of benchmarks/predictor_families.py"

    def predict(self, request, now_s: int) -> int:
        x = self.features.job_submitted(request, now_s).copy()
        self.pending[request.job_id] = x
        if self.trees is None:
            return self.before_first_fit.predict(request, now_s)
        seconds = float(np.expm1(self.trees(x)))
        return int(min(max(seconds, 1.0), request.requested_s))

    def job_started(self, request, now_s: int) -> None:
        self.features.job_started(request, now_s)

    def job_ended(self, request, run_s: int, end_s: int) -> None:
        x = self.pending.pop(request.job_id, None)
        run = min(run_s, request.requested_s)  # learned at the limit beyond it, as the learner does
        if x is not None and run > 0:
            self.rows.append(x)
            self.targets.append(float(np.log1p(run)))
            self.since_fit += 1
        self.features.job_ended(request, run, end_s - (run_s - run))
        self.before_first_fit.job_ended(request, run_s, end_s)
        if len(self.targets) >= self.first_fit and (self.trees is None or self.since_fit >= self.refit_every):
            from sklearn.ensemble import HistGradientBoostingRegressor

            model = HistGradientBoostingRegressor(loss="quantile", quantile=self.quantile, max_iter=100,
                                                  early_stopping=False, random_state=0)
            model.fit(np.array(self.rows[-self.window:]), np.array(self.targets[-self.window:]))
            self.trees = Trees(model)
            self.since_fit = 0


def eloss_hours(predicted_s: int, run_s: int) -> float:
    """The E-Loss's branches in hours, unweighted: an over-prediction costs its square, an
    under-prediction its size."""
    error_h = (predicted_s - run_s) / 3600.0
    return error_h * error_h if error_h >= 0 else -error_h


class Ensemble:
    """The learned model and AVE2, chosen per user by their recent E-Loss (module doc)."""

    name = "ensemble"

    def __init__(self, context, window: int = 5) -> None:
        self.experts = (LearnedPredictor.from_settings(LearnerSettings(), context), Ave2Predictor())
        self.window = window
        self.costs: dict[int, tuple[deque, deque]] = defaultdict(lambda: (deque(maxlen=window), deque(maxlen=window)))
        self.pending: dict[int, tuple[int, int]] = {}

    def why_python(self) -> str:
        return "a learner of benchmarks/predictor_families.py"

    def predict(self, request, now_s: int) -> int:
        learned, ave2 = (expert.predict(request, now_s) for expert in self.experts)
        self.pending[request.job_id] = (learned, ave2)
        learned_costs, ave2_costs = self.costs[request.user_id]
        if len(ave2_costs) < self.window:
            return learned
        return ave2 if sum(ave2_costs) < sum(learned_costs) else learned

    def job_started(self, request, now_s: int) -> None:
        for expert in self.experts:
            expert.job_started(request, now_s)

    def job_ended(self, request, run_s: int, end_s: int) -> None:
        given = self.pending.pop(request.job_id, None)
        if given is not None:
            run = min(run_s, request.requested_s)
            for costs, predicted_s in zip(self.costs[request.user_id], given):
                costs.append(eloss_hours(predicted_s, run))
        for expert in self.experts:
            expert.job_ended(request, run_s, end_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=["gbm", "ensemble"])
    parser.add_argument("log", type=Path)
    parser.add_argument("--procs", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--quantile", type=float, default=0.5, help="gbm: the quantile of log runtime fitted")
    parser.add_argument("--refit-every", type=int, default=2000, help="gbm: ended jobs between fits")
    parser.add_argument("--window", type=int, default=None,
                        help="gbm: the last N ended jobs fitted (20000); ensemble: the user's last N jobs judged (5)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    workload = load_workload(args.log, machine_procs=args.procs)
    scheduler = dataclasses.replace(SCHEDULERS["easy-sjbf"], guard=GuardSettings(wait_s=86_400))
    replicas = []
    for index in range(args.replicas):
        jobs = replica(workload, index, shake_s=DEFAULT_SHAKE_S, seed=DEFAULT_SEED)
        if args.family == "gbm":
            predictor = Gbm(feature_context(jobs), args.quantile, args.refit_every, args.window or 20_000)
        else:
            predictor = Ensemble(feature_context(jobs), args.window or 5)
        began = time.time()
        metrics = compute_metrics(simulate(jobs.jobs, jobs.machine_procs, scheduler, predictor, IncrementalCorrection()))
        replicas.append(metrics.to_dict())
        print(f"replica {index}: AVEbsld {metrics.ave_bsld:.2f} ({time.time() - began:.0f} s)", flush=True)
        args.out.write_text(json.dumps({"log": str(args.log), "family": args.family, "settings": vars(args) | {
            "log": str(args.log), "out": str(args.out)}, "runs": [{"replicas": replicas, "metrics": replicas[0]}]}))


if __name__ == "__main__":
    main()
