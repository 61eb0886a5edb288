"""`LearnedPredictor.explain` (issue 28, item 8): the terms w_i * phi_i of a prediction add up to
the prediction, in the model's output space, and the transform to seconds is the served one.

Checked on every job of the bundled KTH-SP2 sample, replayed as `hpcpredict train` does, for the
daemon's default learner and for the options that change how f is computed (robust features
clamp Phi; experts and calibration publish another answer than the model's).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from hpcpredict.learn.features import FEATURE_NAMES
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.history import replay_history
from hpcpredict.learn.polynomial import quadratic_pairs, term_names
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload


class ExplainedEveryJob:
    """Asks `explain` before each prediction and checks it against the prediction itself."""

    def __init__(self, inner: LearnedPredictor) -> None:
        self.inner = inner
        self.checked = 0
        self.negative = 0
        self.capped = 0

    def predict(self, request: JobRequest, now_s: int) -> int:
        explanation = self.inner.explain(request, now_s)
        published_s = self.inner.predict(request, now_s)
        # The terms sum to f, the model's output before the negative rule and clipping.
        parts = explanation.contributions_s
        assert len(parts) == 231
        scale = math.fsum(abs(part) for part in parts) + 1.0
        assert abs(math.fsum(parts) - explanation.raw_s) <= 1e-9 * scale
        assert explanation.raw_s == self.inner.raw_prediction(request)  # f of the prediction made
        # ... and f becomes the served seconds by the learner's own transform.
        assert explanation.model_s == self.inner.model_prediction_s(request, now_s)
        assert explanation.published_s == published_s
        self.checked += 1
        self.negative += explanation.raw_s < 0
        self.capped += explanation.raw_s > request.requested_s
        return published_s

    def job_started(self, request: JobRequest, now_s: int) -> None:
        self.inner.job_started(request, now_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        self.inner.job_ended(request, run_s, end_s)


@pytest.mark.parametrize("options", [
    {},
    {"feature_scaling": "robust"},
    {"negative": "clip"},
    {"calibration_alpha": 0.2},
], ids=["default", "robust", "clip", "calibrated"])
def test_terms_sum_to_every_prediction_of_a_real_log(sample_log: Path, options: dict) -> None:
    workload = load_workload(sample_log)
    checking = ExplainedEveryJob(LearnedPredictor(**options))
    replay_history(workload.jobs, checking, offset_s=workload.header.unix_start_time or 0)
    assert checking.checked == len(workload.jobs)
    if not options:  # the transform's branches are all exercised on this log
        assert checking.negative > 0 and checking.capped > 0


def test_explain_records_nothing(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    predictor = LearnedPredictor()
    replay_history(workload.jobs[:500], predictor)
    before = predictor.state_dict()
    job = JobRequest(job_id=10**9, submit_s=workload.jobs[499].submit_s, procs=8, requested_s=7200, user_id=3)
    predictor.explain(job, job.submit_s)
    after = predictor.state_dict()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[key], after[key]) for key in before)


def test_term_names_follow_the_expansion_order() -> None:
    names = term_names(FEATURE_NAMES)
    left, right = quadratic_pairs(len(FEATURE_NAMES))
    assert len(names) == len(left) == 231
    assert names[0] == "bias" and names[1] == "requested_s"
    assert names[1 + 20] == "requested_s^2"
    assert names[-1] == "week_cos x week_sin"


def test_top_terms_rank_by_magnitude_with_shares(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    predictor = LearnedPredictor()
    replay_history(workload.jobs[:1000], predictor)
    last = workload.jobs[999]
    explanation = predictor.explain(JobRequest(job_id=-1, submit_s=last.submit_s, procs=last.procs,
                                               requested_s=last.requested_s, user_id=last.user_id),
                                    last.submit_s)
    top = explanation.top_terms(5)
    magnitudes = [abs(term.contribution_s) for term in top]
    assert magnitudes == sorted(magnitudes, reverse=True) and magnitudes[0] > 0
    assert sum(abs(c) for c in explanation.contributions_s) * top[0].share == pytest.approx(magnitudes[0])
    assert all(term.term in term_names(FEATURE_NAMES) for term in top)


def test_the_transform_is_said_for_each_branch() -> None:
    from hpcpredict.learn.explanation import describe_transform

    assert describe_transform(-30.4, 30, 600, abs_negative=True).endswith("(f < 0: its magnitude |f| is used; truncated to whole seconds)")
    assert "f < 0: 1 s is used" in describe_transform(-30.4, 1, 600, abs_negative=False)
    assert "capped at the request (600 s)" in describe_transform(9000.0, 600, 600, abs_negative=True)
    assert "raised to the 1 s minimum" in describe_transform(0.2, 1, 600, abs_negative=True)
    assert "NaN" in describe_transform(float("nan"), 600, 600, abs_negative=True)
