"""Per-user expert choice (docs/method.md §6, hpcpredict/learn/experts.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcpredict.daemon.learning import LearnRule
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn import LearnedPredictor
from hpcpredict.learn.experts import EXPERTS, ExpertScores
from hpcpredict.predictors import Ave2Predictor
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.workload import load_workload

SAMPLE_LOG = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"


def test_scores_follow_the_leader_with_discounting() -> None:
    scores = ExpertScores(decay=0.5)
    assert EXPERTS[scores.choice(1)] == "learned"  # nothing known: the shared model
    scores.update(1, (4.0, 1.0, 9.0))
    assert EXPERTS[scores.choice(1)] == "ave2"
    scores.update(1, (0.0, 3.0, 0.0))  # (2, 3.5, 4.5): the model leads again
    assert EXPERTS[scores.choice(1)] == "learned"
    np.testing.assert_allclose(scores.users[1], [2.0, 3.5, 4.5])
    assert EXPERTS[scores.choice(2)] == "learned"  # users are scored apart
    scores.update(3, (1.0, 1.0, 1.0))
    assert EXPERTS[scores.choice(3)] == "learned"  # ties: the model first
    with pytest.raises(ValueError):
        ExpertScores(decay=1.0)


def steady_user(predictor: LearnedPredictor, jobs: int, *, run_s: int = 1000,
                requested_s: int = 36_000, first_id: int = 1) -> tuple[list[int], int]:
    """A user whose jobs always run `run_s` of `requested_s`: AVE2 is exact from the third on."""
    answers = []
    now_s = 0
    for job_id in range(first_id, first_id + jobs):
        request = JobRequest(job_id=job_id, submit_s=now_s, procs=8, requested_s=requested_s,
                             user_id=5)
        answers.append(predictor.predict(request, now_s))
        predictor.job_started(request, now_s)
        predictor.job_ended(request, run_s, now_s + run_s)
        now_s += run_s + 60
    return answers, now_s


def test_a_user_whose_runtime_never_changes_gets_ave2() -> None:
    predictor = LearnedPredictor(per_user_experts=True)
    answers, _ = steady_user(predictor, 12)
    assert predictor.expert_of(5) == "ave2"
    assert answers[-1] == 1000  # AVE2's answer, exact
    assert predictor.nag.state.t == 12  # the model learned every job all the same
    plain, _ = steady_user(LearnedPredictor(), 12)
    assert plain[-1] != 1000


def test_ave2_read_from_the_features_is_ave2predictors_answer() -> None:
    """The expert AVE2 must answer what `Ave2Predictor` answers, job by job."""
    workload = load_workload(SAMPLE_LOG)
    predictor = LearnedPredictor(per_user_experts=True)
    reference = Ave2Predictor()
    for job in workload.jobs[:1500]:  # jobs one after the other: every end before the next submit
        request = job.request
        predictor.predict(request, request.submit_s)
        phi = predictor._pending_phi[request.job_id]  # noqa: SLF001
        assert predictor._ave2_s(request, phi) == reference.predict(request, request.submit_s)  # noqa: SLF001
        predictor.job_started(request, request.submit_s)
        predictor.job_ended(request, job.run_s, request.submit_s + job.run_s)
        reference.job_ended(request, job.run_s, request.submit_s + job.run_s)


def test_experts_survive_a_checkpoint_bit_for_bit(tmp_path: Path) -> None:
    predictor = LearnedPredictor(per_user_experts=True)
    _, now_s = steady_user(predictor, 6)
    pending = JobRequest(job_id=100, submit_s=now_s, procs=8, requested_s=36_000, user_id=5)
    predictor.predict(pending, now_s)
    predictor.save(tmp_path / "m.npz")
    restored = LearnedPredictor.load(tmp_path / "m.npz")
    for each in (predictor, restored):
        each.job_started(pending, now_s)
        each.job_ended(pending, 5000, now_s + 5000)
    a, _ = steady_user(predictor, 5, first_id=200)
    b, _ = steady_user(restored, 5, first_id=200)
    assert a == b
    np.testing.assert_array_equal(predictor.experts.users[5], restored.experts.users[5])
    with pytest.raises(ValueError, match="per_user_experts"):
        LearnedPredictor().load_state_dict(predictor.state_dict())


def test_the_daemon_judges_a_lowered_limit_kill_by_the_model_not_the_expert(tmp_path: Path) -> None:
    """With experts the published answer may be AVE2; the bound is checked against the model,
    as learn_lower_bound checks it, so the rule and the step agree."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        service = PredictionService.open(store, lambda: LearnedPredictor(per_user_experts=True))
        for k in range(12):  # user 5: 1000 s of 36,000 s, AVE2 is chosen
            request = JobRequest(job_id=k + 1, submit_s=k * 2000, procs=8, requested_s=36_000,
                                 user_id=5)
            service.submitted(request, request.submit_s)
            service.started(request.job_id, request.submit_s)
            service.ended(request.job_id, 1000, request.submit_s + 1000, "COMPLETED")
        request = JobRequest(job_id=99, submit_s=30_000, procs=8, requested_s=36_000, user_id=5)
        published = service.submitted(request, request.submit_s)
        assert published == 1000  # AVE2
        service.started(99, request.submit_s)
        service.limit_changed(99, 1200, request.submit_s)
        outcome = service.ended(99, 1200, request.submit_s + 1200, "TIMEOUT", True)
        # The model itself predicts far more (about 22,000 s): the bound is met, no step. Judged
        # by the published 1000 s it would have been called lower_bound, yet not learned.
        assert outcome.rule is LearnRule.BOUND_MET and not outcome.learned
    finally:
        store.close()


def test_the_option_reaches_the_simulator() -> None:
    spec = RunSpec(per_user_experts=True)
    assert spec.to_dict()["per_user_experts"] is True
    assert "per_user_experts" not in RunSpec().to_dict()
    assert "per-user experts" in spec.label
    result = run(load_workload(SAMPLE_LOG), spec)
    assert "experts" in result.predictor
