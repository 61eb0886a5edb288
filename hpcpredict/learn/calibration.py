"""Calibrated confidence (docs/method.md §6): publish the model's prediction
scaled so that a chosen share `alpha` of jobs outlive it, learned online.

The learned model under-predicts on purpose (the E-Loss charges an over-prediction its square):
86% of KTH-SP2's jobs outlive their prediction (docs/results.md). How often it does is a property
of the model and the workload, not a setting. Here it becomes one. With p the model's answer and
r the runtime, the score of an ended job is s = log(r / p); the published prediction is
p * exp(q), and q follows the online quantile update of adaptive conformal inference (Gibbs &
Candès, "Adaptive conformal inference under distribution shift", NeurIPS 2021, in the form that
updates the threshold itself, Angelopoulos, Candès & Tibshirani 2023):

    q <- q + step * (err - alpha),   err = 1 if s > q (the job outlived p * exp(q)) else 0.

An under-prediction raises q by step * (1 - alpha), a safe prediction lowers it by step * alpha,
so q settles where a share alpha of scores is above it, whatever the stream: q stays within
B + step of 0 (B the largest |score|, at most log of the longest request in seconds), so over any
T jobs the share of errors is within (B + step) / (step * T) of alpha (the argument of Gibbs &
Candès, Prop. 4.1), with no assumption on how the scores are distributed: a workload may drift.

One threshold per user, with a global one as the fallback: a user's own q is used once it has been
updated `min_user_jobs` times (it starts from the global q of that moment); the global q learns from
every job. The step is in log units: 0.05 moves the published value by 5% per job.

The error is judged against the threshold of the moment the job ends, not of its submission (the
feedback is delayed by the job's wait and run, as live): the guarantee above is on those
thresholds, and the threshold moves slowly. `under_rate` reports the realised share on the
predictions actually published.

>>> calibration = ConformalCalibration(alpha=0.5, step=0.1)
>>> calibration.published_s(user_id=1, model_s=100, requested_s=1_000)
100
>>> calibration.observe(user_id=1, model_s=100, published_s=100, run_s=300)
>>> round(calibration.global_q, 3)  # an under-prediction: q rises by step * (1 - alpha)
0.05
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_CALIBRATION_STEP = 0.05  # log units per job: 5% of the published value
DEFAULT_MIN_USER_JOBS = 10  # a user's own threshold after this many of its jobs ended


class ConformalCalibration:
    """Per-user and global thresholds q on log(runtime / model prediction) (module doc)."""

    def __init__(
        self,
        alpha: float,
        *,
        step: float = DEFAULT_CALIBRATION_STEP,
        min_user_jobs: int = DEFAULT_MIN_USER_JOBS,
    ) -> None:
        if not 0.0 < alpha < 1.0:
            raise ValueError(f"the target under-prediction rate must be in (0, 1), got {alpha!r}")
        if not step > 0.0:
            raise ValueError(f"the calibration step must be > 0, got {step!r}")
        self.alpha = float(alpha)
        self.step = float(step)
        self.min_user_jobs = int(min_user_jobs)
        self.global_q = 0.0
        self.user_q: dict[int, float] = {}
        self.user_jobs: dict[int, int] = {}
        self.judged = 0  # ended jobs whose published prediction is known
        self.under = 0  # ... of which outlived it

    def threshold(self, user_id: int) -> float:
        """The q a prediction for this user's next job is published with."""
        if self.user_jobs.get(user_id, 0) >= self.min_user_jobs:
            return self.user_q[user_id]
        return self.global_q

    def published_s(self, user_id: int, model_s: int, requested_s: int) -> int:
        """The model's answer scaled by exp(q), whole seconds in [1, requested_s]."""
        value = model_s * math.exp(self.threshold(user_id))
        return max(1, min(int(value), requested_s)) if value == value else requested_s

    def observe(self, user_id: int, model_s: int, published_s: int | None, run_s: int) -> None:
        """A job ended after `run_s`; `model_s` was the model's answer at its submission and
        `published_s` what was published (None: not known, the realised rate skips it)."""
        if run_s <= 0 or model_s <= 0:
            return  # a job that never ran says nothing about its length
        score = math.log(run_s / model_s)
        self.global_q += self.step * ((score > self.global_q) - self.alpha)
        q = self.user_q.get(user_id, self.global_q)
        self.user_q[user_id] = q + self.step * ((score > q) - self.alpha)
        self.user_jobs[user_id] = self.user_jobs.get(user_id, 0) + 1
        if published_s is not None:
            self.judged += 1
            self.under += run_s > published_s

    def save_user(self, user_id: int) -> tuple[float, float | None, int | None, int, int]:
        """What one ended job of `user_id` can change (`observe`), for `restore_user`."""
        return (self.global_q, self.user_q.get(user_id), self.user_jobs.get(user_id),
                self.judged, self.under)

    def restore_user(self, user_id: int, saved: tuple[float, float | None, int | None, int, int]) -> None:
        """Put back what `save_user` saved (the daemon's failed event: `LearnedPredictor.savepoint`)."""
        self.global_q, user_q, user_jobs, self.judged, self.under = saved
        for mapping, value in ((self.user_q, user_q), (self.user_jobs, user_jobs)):
            if value is None:
                mapping.pop(user_id, None)
            else:
                mapping[user_id] = value

    @property
    def under_rate(self) -> float:
        """The realised share of ended jobs that outlived their published prediction."""
        return self.under / self.judged if self.judged else 0.0

    def to_state(self) -> dict[str, np.ndarray]:
        users = list(self.user_q)
        return {
            "global_q": np.array(self.global_q, dtype=np.float64),
            "user_id": np.array(users, dtype=np.int64),
            "user_q": np.array([self.user_q[u] for u in users], dtype=np.float64),
            "user_jobs": np.array([self.user_jobs[u] for u in users], dtype=np.int64),
            "counts": np.array([self.judged, self.under], dtype=np.int64),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.global_q = float(state["global_q"])
        users = state["user_id"].tolist()
        self.user_q = dict(zip(users, state["user_q"].tolist()))
        self.user_jobs = dict(zip(users, state["user_jobs"].tolist()))
        self.judged, self.under = (int(v) for v in state["counts"].tolist())
