"""Cold start and returning users (docs/method.md §2, robust features; docs/results.md).

A daemon trained on an old history met its users again with break times (feature 16) far
beyond anything learned; the polynomial extrapolated and every answer hit its cap, the user's
own request. ``feature_scaling="robust"`` reads the break time as log(1 + s) and clamps the
model's terms to the range learned from. Errors by user history are `analysis.error_by_history`.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcpredict.sim.analysis import HISTORY_BUCKETS, earlier_jobs, error_by_history
from hpcpredict.cli import main
from hpcpredict.daemon.core.config import ConfigError, DaemonConfig, load_config
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.learn.features import BREAK_TIME_S
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn import LearnedPredictor
from hpcpredict.learn.history import replay_history
from hpcpredict.learn.polynomial import QuadraticExpansion
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.easy.simulation import SimulationResult
from hpcpredict.logs.workload import load_workload

SAMPLE_LOG = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
YEAR_S = 365 * 86_400


def returning_users(feature_scaling: str, gap_s: int) -> list[tuple[int, int]]:
    """(prediction, request) for the ten busiest users of the sample, each back `gap_s` after the
    history ends with a job like their last, from a daemon trained on the sample as `train` does."""
    workload = load_workload(SAMPLE_LOG)
    learner = DaemonConfig(
        time_zone="Europe/Stockholm", learner=LearnerSettings(feature_scaling=feature_scaling)
    ).predictor_factory()
    replay = replay_history(workload.jobs, learner, offset_s=workload.header.unix_start_time or 0)
    assert replay.last_end_s is not None
    now_s = replay.last_end_s + gap_s
    answers = []
    for number, (user_id, _) in enumerate(Counter(j.user_id for j in workload.jobs).most_common(10)):
        last = [j for j in workload.jobs if j.user_id == user_id][-1]
        request = JobRequest(job_id=10**7 + number, submit_s=now_s, procs=last.procs,
                             requested_s=last.requested_s, user_id=user_id)
        answers.append((learner.peek(request, now_s), request.requested_s))
    return answers


@pytest.mark.parametrize("gap_s", [YEAR_S, 30 * YEAR_S])
def test_a_returning_user_gets_less_than_the_request(gap_s: int) -> None:
    robust = returning_users("robust", gap_s)
    assert all(prediction < requested_s for prediction, requested_s in robust)
    # The failure robust features fix: with raw features nearly everyone gets the request back.
    raw = returning_users("raw", gap_s)
    assert sum(prediction == requested_s for prediction, requested_s in raw) >= 8


def test_robust_predictions_do_not_move_with_the_length_of_the_gap() -> None:
    """One year or thirty: the clamped model answers (nearly) the same for the same user."""
    one, thirty = returning_users("robust", YEAR_S), returning_users("robust", 30 * YEAR_S)
    for (a, requested_s), (b, _) in zip(one, thirty):
        assert abs(a - b) <= 0.1 * requested_s


def test_robust_features_log_the_break_time_and_clamp_to_the_learned_range() -> None:
    predictor = LearnedPredictor(feature_scaling="robust", l2=0.0)
    first = JobRequest(job_id=1, submit_s=0, procs=4, requested_s=3600, user_id=1)
    predictor.predict(first, 0)
    predictor.job_started(first, 0)
    predictor.job_ended(first, 600, 600)
    second = JobRequest(job_id=2, submit_s=600 + 86_400, procs=4, requested_s=3600, user_id=1)
    predictor.predict(second, second.submit_s)
    phi = predictor.state_dict()["pending/phi"][0]
    expansion = QuadraticExpansion(20)
    x = predictor.features.compute(second, second.submit_s)  # raw: second already recorded
    assert phi[1 + BREAK_TIME_S] == pytest.approx(math.log1p(86_400))
    assert x[BREAK_TIME_S] == 86_400  # the shared history is not changed, only what the model sees
    # The prediction uses Phi clamped to NAG's scales: equal to w . clip(Phi, -s, s).
    state = predictor.nag.state
    expected = float(state.w.dot(np.clip(phi, -state.s, state.s)))
    assert predictor.raw_prediction(second) == pytest.approx(expected)
    assert np.any(np.abs(phi) > state.s)  # this job is outside the range learned: clamping acts
    assert expansion.n_terms == phi.size


def test_robust_features_and_censoring_survive_a_checkpoint(tmp_path: Path) -> None:
    predictor = LearnedPredictor(feature_scaling="robust", censor_at_limit=True)
    job = JobRequest(job_id=1, submit_s=0, procs=4, requested_s=3600, user_id=1)
    predictor.predict(job, 0)
    predictor.save(tmp_path / "m.npz")
    restored = LearnedPredictor.load(tmp_path / "m.npz")
    assert restored.hyperparameters()["feature_scaling"] == "robust"
    assert restored.censor_at_limit is True
    with pytest.raises(ValueError, match="feature_scaling"):
        LearnedPredictor().load_state_dict(predictor.state_dict())
    # A checkpoint made before the options existed loads with their defaults.
    old = {k: v for k, v in LearnedPredictor().state_dict().items()
           if k not in ("hyper/censor_at_limit", "hyper/feature_scaling")}
    LearnedPredictor().load_state_dict(old)


def test_the_daemon_reads_both_options_from_its_configuration(tmp_path: Path) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text('[learner]\nfeature_scaling = "robust"\ncensor_at_limit = true\n')
    learner = load_config(config).predictor_factory()
    assert learner.feature_scaling == "robust" and learner.censor_at_limit is True
    config.write_text('[learner]\nfeature_scaling = "log"\n')
    with pytest.raises(ConfigError, match="feature scaling"):
        load_config(config)
    config.write_text('[learner]\ncensor_at_limit = "yes"\n')
    with pytest.raises(ConfigError, match="censor_at_limit"):
        load_config(config)


def test_a_robust_daemon_does_not_promise_requests_when_stale(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'old.db'}"
    config = tmp_path / "daemon.toml"
    config.write_text(f'[daemon]\ndb = "{db}"\n[learner]\nfeature_scaling = "robust"\n')
    result = CliRunner().invoke(main, ["train", str(SAMPLE_LOG), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "robust features: no extrapolation" in result.output
    assert "fall back to their requests" not in result.output
    store = Store(db)
    try:
        service = PredictionService.open(store, load_config(config).predictor_factory)
        assert service.history_age(2e9).stale
    finally:
        store.close()


# ---------------------------------------------------------------------- error by history
def test_earlier_jobs_counts_the_users_ends_before_each_submission() -> None:
    jobs = [Job(JobRequest(i, submit, 1, 1000, user), run)
            for i, (submit, user, run) in enumerate(
                [(0, 1, 100), (50, 2, 10), (100, 1, 100), (150, 1, 10), (5_000_000, 1, 10)])]
    # Each job starts at its submission: ends are 100, 60, 200, 160, 5_000_010.
    result = SimulationResult(jobs, 4, "x", "y", "z", start_s=[j.submit_s for j in jobs],
                              initial_prediction_s=[100, 10, 1000, 5, 10],
                              final_prediction_s=[100, 10, 1000, 5, 10], corrections=[0] * 5,
                              backfilled=[False] * 5, first_reserved_start_s=[-1] * 5)
    count, gap = earlier_jobs(result)
    # Job 2 is submitted at 100, the instant job 0 ends: submissions come first, so 0 earlier.
    assert count.tolist() == [0, 0, 0, 1, 3]
    assert gap.tolist() == [-1, -1, -1, 50, 5_000_000 - 200]
    buckets = {b.bucket: b for b in error_by_history(result)}
    assert [b.jobs for b in buckets.values()] == [3, 2, 0, 0, 1]
    assert buckets["0"].mae_s == pytest.approx((0 + 0 + 900) / 3)
    assert buckets["0"].at_request_rate == pytest.approx(1 / 3)
    assert buckets["1-5"].under_prediction_rate == 0.5  # 5 s for 10 s; then 10 s for 10 s
    assert buckets["back after >= 30 days"].jobs == 1
    assert math.isnan(buckets["6-20"].mae_s)


def test_history_buckets_cover_every_job_of_a_replay() -> None:
    workload = load_workload(SAMPLE_LOG)
    result = run(workload, RunSpec())
    rows = error_by_history(result)
    assert [row.bucket for row in rows[: len(HISTORY_BUCKETS)]] == ["0", "1-5", "6-20", ">20"]
    assert sum(row.jobs for row in rows[: len(HISTORY_BUCKETS)]) == len(workload.jobs)
    # every user's first job, and the ones submitted before any of theirs had ended
    assert rows[0].jobs >= len({job.user_id for job in workload.jobs})


def test_predict_eval_reports_errors_by_history(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["predict-eval", str(SAMPLE_LOG), "--no-plots", "--format", "json",
                                       "--feature-scaling", "robust"])
    assert result.exit_code == 0, result.output
    import json

    payload = json.loads(result.output)
    learned = next(v for k, v in payload["predictors"].items() if k.startswith("learned"))
    assert [row["bucket"] for row in learned["by_history"]][:4] == ["0", "1-5", "6-20", ">20"]
    assert "robust" in next(iter(payload["predictors"]))
