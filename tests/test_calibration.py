"""Calibrated confidence (hpcpredict/learn/calibration.py, issue 14 idea 2): the published
prediction's realised under-prediction rate hits its target on synthetic streams, per user and
under drift; the learner publishes through it and checkpoints it."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from hpcpredict.daemon.core.config import ConfigError, DaemonConfig, load_config
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.calibration import ConformalCalibration
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.sim.runner import RunSpec

TOLERANCE = 0.02  # on 20,000 jobs the bound (B + step) / (step T) is about 0.015 here


def synthetic_stream(seed: int, jobs: int = 20_000, drift_at: int | None = None):
    """(user, model prediction, runtime): three users whose runtimes are the model's answer times
    a lognormal factor of their own (median 0.5x, 2x, 8x); after `drift_at` every factor x10."""
    rng = random.Random(seed)
    medians = {1: math.log(0.5), 2: math.log(2.0), 3: math.log(8.0)}
    for index in range(jobs):
        user = rng.choice((1, 2, 3))
        model_s = rng.randint(60, 7_200)
        shift = math.log(10.0) if drift_at is not None and index >= drift_at else 0.0
        run_s = max(1, int(model_s * math.exp(rng.gauss(medians[user] + shift, 1.0))))
        yield user, model_s, run_s


@pytest.mark.parametrize("alpha", [0.1, 0.3, 0.5])
def test_the_realised_under_prediction_rate_hits_its_target(alpha: float) -> None:
    calibration = ConformalCalibration(alpha)
    for user, model_s, run_s in synthetic_stream(seed=int(alpha * 100)):
        published = calibration.published_s(user, model_s, requested_s=10**9)
        calibration.observe(user, model_s, published, run_s)
    assert abs(calibration.under_rate - alpha) < TOLERANCE
    # The model alone under-predicts far more (users 2 and 3 run longer than it says).
    # Each user's threshold sits near the (1 - alpha) quantile of its own log ratio.
    for user, median in ((1, math.log(0.5)), (2, math.log(2.0)), (3, math.log(8.0))):
        z = {0.1: 1.2816, 0.3: 0.5244, 0.5: 0.0}[alpha]
        assert calibration.user_q[user] == pytest.approx(median + z, abs=0.25)


def test_the_rate_holds_through_a_drift() -> None:
    calibration = ConformalCalibration(0.2)
    outcomes = []
    for user, model_s, run_s in synthetic_stream(seed=3, drift_at=10_000):
        published = calibration.published_s(user, model_s, requested_s=10**9)
        outcomes.append(run_s > published)
        calibration.observe(user, model_s, published, run_s)
    assert abs(sum(outcomes) / len(outcomes) - 0.2) < TOLERANCE
    assert abs(sum(outcomes[10_000:]) / 10_000 - 0.2) < 2 * TOLERANCE  # after the shift too


def test_a_new_user_gets_the_global_threshold_and_predictions_stay_in_bounds() -> None:
    calibration = ConformalCalibration(0.1, min_user_jobs=3)
    for _ in range(50):
        calibration.observe(1, 100, 100, 1_000)  # user 1 always outlives: thresholds rise
    assert calibration.threshold(2) == calibration.global_q > 0
    assert calibration.threshold(1) == calibration.user_q[1]
    assert calibration.published_s(2, 100, requested_s=150) == 150  # capped at the request
    calibration.observe(3, 100, None, 0)  # never ran: nothing learned
    assert 3 not in calibration.user_q


def stream_jobs(count: int, seed: int = 0):
    rng = random.Random(seed)
    for job_id in range(1, count + 1):
        user = rng.randint(1, 5)
        request = JobRequest(job_id=job_id, submit_s=job_id * 600, procs=rng.randint(1, 8),
                             requested_s=36_000, user_id=user)
        yield request, rng.randint(600, 9_000) * user // 3 + 1


def test_the_learner_publishes_calibrated_predictions_at_the_target_rate() -> None:
    alpha = 0.3
    plain, calibrated = LearnedPredictor(), LearnedPredictor(calibration_alpha=alpha)
    under_plain = under_calibrated = 0
    jobs = list(stream_jobs(6_000))
    for request, run_s in jobs:  # each job ends before the next is submitted
        for predictor in (plain, calibrated):
            predicted = predictor.predict(request, request.submit_s)
            predictor.job_started(request, request.submit_s)
            if predictor is plain:
                under_plain += run_s > predicted
            else:
                under_calibrated += run_s > predicted
                assert 1 <= predicted <= request.requested_s
            predictor.job_ended(request, run_s, request.submit_s + run_s)
    assert calibrated.calibration.judged == len(jobs)
    assert calibrated.calibration.under_rate == under_calibrated / len(jobs)
    assert abs(under_calibrated / len(jobs) - alpha) < 0.03
    assert under_plain / len(jobs) - alpha > 0.1  # the model alone is far from the target
    # The model itself learned the same: calibration only changes what is published.
    assert np.array_equal(plain.nag.state.w, calibrated.nag.state.w)


def test_the_calibration_is_checkpointed_and_restored_exactly(tmp_path) -> None:
    predictor = LearnedPredictor(calibration_alpha=0.2)
    jobs = list(stream_jobs(400, seed=5))
    for request, run_s in jobs[:300]:
        predictor.predict(request, request.submit_s)
        predictor.job_started(request, request.submit_s)
        predictor.job_ended(request, run_s, request.submit_s + run_s)
    pending, _ = jobs[300]
    first = predictor.predict(pending, pending.submit_s)
    restored = LearnedPredictor(calibration_alpha=0.2)
    restored.load_state_dict(predictor.state_dict())
    assert restored.calibration.user_q == predictor.calibration.user_q
    assert restored.predict(pending, pending.submit_s) == first
    for request, run_s in jobs[301:]:
        answers = [p.predict(request, request.submit_s) for p in (predictor, restored)]
        assert answers[0] == answers[1]
        for p in (predictor, restored):
            p.job_started(request, request.submit_s)
            p.job_ended(request, run_s, request.submit_s + run_s)
    with pytest.raises(ValueError, match="calibration_alpha"):
        LearnedPredictor().load_state_dict(predictor.state_dict())
    predictor.save(tmp_path / "model.npz")
    loaded = LearnedPredictor.load(tmp_path / "model.npz")
    assert loaded.calibration_alpha == 0.2 and loaded.calibration.global_q == predictor.calibration.global_q
    predictor_off = LearnedPredictor()
    predictor_off.save(tmp_path / "off.npz")
    assert LearnedPredictor.load(tmp_path / "off.npz").calibration is None


def test_the_option_in_simulate_campaigns_and_the_daemon(tmp_path) -> None:
    assert RunSpec.from_keys(calibration_alpha=0.3).to_dict()["calibration_alpha"] == 0.3
    assert "calibration_alpha" not in RunSpec().to_dict()  # off: the keys of older runs
    assert "calibrated alpha=0.3" in RunSpec.from_keys(calibration_alpha=0.3).label
    with pytest.raises(ValueError):
        RunSpec.from_keys(calibration_alpha=1.0)
    path = tmp_path / "daemon.toml"
    path.write_text("[learner]\ncalibration_alpha = 0.25\n")
    assert load_config(path).predictor_factory().calibration_alpha == 0.25
    assert DaemonConfig().predictor_factory().calibration is None
    path.write_text("[learner]\ncalibration_alpha = 2.0\n")
    with pytest.raises(ConfigError):
        load_config(path)
