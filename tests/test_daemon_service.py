"""PredictionService: one transaction per event, idempotent ingestion, the learning rule,
checkpoints, and a restart that is bit for bit an uninterrupted run (on the KTH-SP2 sample).

Every test taking `store`, `store_url` or `databases` (tests/conftest.py) runs on SQLite and on
PostgreSQL. The crash here is a service dropped without a checkpoint; a real kill -9 of the
daemon is tests/test_daemon_crash.py (SQLite, the daemon's default store).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Databases
from sqlalchemy import func, select

from hpcpredict.daemon.core.feature_tokens import FeatureTokens
from hpcpredict.daemon.core.learning import LearnRule, decide
from hpcpredict.daemon.core.service import EventOutcome, PredictionService, UnknownJobError
from hpcpredict.daemon.core.store import (
    CheckpointRow,
    CorrectionRow,
    EventRow,
    JobRow,
    PredictionRow,
    Store,
)
from hpcpredict.learn.features import FeatureContext
from hpcpredict.jobs import JobRequest
from hpcpredict.learn import LearnedPredictor
from hpcpredict.logs.swf import read_swf
from hpcpredict.logs.workload import load_workload

SAMPLE_LOG = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
T0 = 1_700_000_000  # Unix seconds, as the daemon sees them


def stockholm_learner() -> LearnedPredictor:
    """The daemon's learner for the KTH site: Unix seconds read in the site's time zone."""
    return LearnedPredictor(context=FeatureContext(0, "Europe/Stockholm"))


def job(
    job_id: int, *, user_id: int = 7, submit_s: int = T0, requested_s: int = 3600
) -> JobRequest:
    return JobRequest(
        job_id=job_id, submit_s=submit_s, procs=4, requested_s=requested_s, user_id=user_id
    )


def count(store: Store, model: type) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(model)).scalar_one()


def assert_same_state(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)


def model_steps(service: PredictionService) -> int:
    return int(service.state_dict()["nag/t"])


def train(
    service: PredictionService, n_jobs: int, *, user_id: int = 7, first_id: int = 1000
) -> None:
    """A few completed jobs of 600 s out of 3600 s requested, so the model has weights."""
    for k in range(n_jobs):
        request = job(first_id + k, user_id=user_id, submit_s=T0 + 1000 * k)
        service.submitted(request, request.submit_s)
        service.started(request.job_id, request.submit_s)
        service.ended(request.job_id, 600, request.submit_s + 600, "COMPLETED")


# ---------------------------------------------------------------------- submissions
def test_prediction_is_recorded_and_never_above_the_request(store: Store) -> None:
    service = PredictionService(store)
    request = job(1, requested_s=60)
    prediction = service.submitted(request, T0)
    assert 1 <= prediction <= 60
    with store.session() as session:
        row = session.get(JobRow, 1)
        assert row is not None and row.status == "submitted" and row.observed
        predictions = list(session.scalars(select(PredictionRow)))
        assert [(p.job_id, p.predicted_s, p.predicted_at_s, p.model_t) for p in predictions] == [
            (1, prediction, T0, 0)
        ]
    assert count(store, EventRow) == 1


def test_asking_twice_does_not_count_the_submission_twice(store: Store) -> None:
    service = PredictionService(store)
    train(service, 5)
    request = job(1, submit_s=T0 + 10_000)
    first = service.submitted(request, T0 + 10_000)
    state = service.state_dict()
    again = service.submitted(request, T0 + 10_005)
    assert again == first  # same features as submitted, same weights
    assert_same_state(service.state_dict(), state)
    assert count(store, EventRow) == 16  # 5 jobs x 3 events + this submission, once
    assert count(store, PredictionRow) == 7  # both answers are on record
    # After its end, asking again gives the prediction it had, and still learns nothing.
    service.ended(1, 700, T0 + 10_700, "COMPLETED")
    state = service.state_dict()
    assert service.submitted(request, T0 + 20_000) == first
    assert_same_state(service.state_dict(), state)


# ---------------------------------------------------------------------- feature tokens
def served_then_changed(service: PredictionService) -> tuple[JobRequest, int, str]:
    """A prediction served for user 7 (PREDICT), then another job of theirs ends before the
    served job is reported: features computed at the report would differ from the served ones."""
    train(service, 3)
    served = job(-1, submit_s=T0 + 10_000)
    prediction_s, token = service.serve(served, T0 + 10_000)
    other = job(50, submit_s=T0 + 10_001)
    service.submitted(other, T0 + 10_001)
    service.started(50, T0 + 10_001)
    service.ended(50, 3000, T0 + 13_001, "COMPLETED")
    return dataclasses.replace(served, job_id=60, submit_s=T0 + 10_000), prediction_s, token


def submitted_features(store: Store, job_id: int) -> list[float] | None:
    with store.session() as session:
        text = session.scalar(select(EventRow.payload_json).where(
            EventRow.job_id == job_id, EventRow.kind == "submitted"))
    return json.loads(text).get("features")


def test_a_submission_with_its_token_learns_from_the_served_features(store: Store) -> None:
    service = PredictionService(store)
    request, prediction_s, token = served_then_changed(service)
    served = service.feature_tokens.features_for(token, request)
    assert served is not None and served[1] == 600.0  # the last runtime when it was served
    assert service.submitted(request, T0 + 13_005, given_prediction_s=prediction_s,
                             feature_token=token) == prediction_s
    assert submitted_features(store, 60) == [float(value) for value in served]
    learner = service._predictor
    expected_phi = learner._expansion.expand(served.copy())
    np.testing.assert_array_equal(learner._pending_phi[60], expected_phi)
    assert learner.features.compute(request, T0 + 13_005)[1] == 3000.0  # what a recompute reads
    # The features are in the log: a restart rebuilds the same learner from it.
    state = service.state_dict()
    restarted = PredictionService(store)
    assert_same_state(restarted.state_dict(), state)
    np.testing.assert_array_equal(restarted._predictor._pending_phi[60], expected_phi)


@pytest.mark.parametrize("change", ["procs", "user_id", "requested_s", "token"])
def test_a_token_for_another_request_or_unknown_gives_features_computed_now(store: Store, change: str) -> None:
    service = PredictionService(store)
    request, _, token = served_then_changed(service)
    if change == "token":
        token = service.feature_tokens.prefix + "-ff"
    else:
        request = dataclasses.replace(request, **{change: getattr(request, change) + 1})
    service.submitted(request, T0 + 13_005, feature_token=token)
    assert submitted_features(store, 60) is None
    counts = service.feature_tokens.counts
    assert (counts.unknown, counts.mismatched) == ((1, 0) if change == "token" else (0, 1))


def test_the_token_store_keeps_the_newest_and_a_restart_starts_anew() -> None:
    tokens = FeatureTokens(capacity=2)
    request = job(-1)
    first, second, third = (tokens.issue(request, np.full(20, float(k))) for k in range(3))
    assert tokens.features_for(first, request) is None and len(tokens) == 2
    assert tokens.features_for(third, request)[0] == 2.0
    assert tokens.features_for(third, request) is not None  # kept: a retried SUBMIT finds it
    assert FeatureTokens().prefix != tokens.prefix and second != third


# ---------------------------------------------------------------------- ends
def test_a_second_end_is_a_no_op_and_says_so(store: Store) -> None:
    service = PredictionService(store)
    service.submitted(job(1), T0)
    first = service.ended(1, 600, T0 + 600, "COMPLETED")
    assert first.applied and first.learned and first.rule is LearnRule.TRUE_RUNTIME
    state = service.state_dict()
    second = service.ended(1, 600, T0 + 600, "COMPLETED")
    assert not second.applied and "not learned twice" in second.note
    assert second.rule is LearnRule.TRUE_RUNTIME and second.learned  # what happened the first time
    assert_same_state(service.state_dict(), state)
    assert model_steps(service) == 1
    assert count(store, EventRow) == 2


def test_unknown_jobs_need_their_request(store: Store) -> None:
    service = PredictionService(store)
    with pytest.raises(UnknownJobError, match="job 5"):
        service.started(5, T0)
    with pytest.raises(UnknownJobError, match="job 5"):
        service.ended(5, 100, T0 + 100, "COMPLETED")
    with pytest.raises(UnknownJobError, match="job 5"):
        service.limit_changed(5, 60, T0)
    assert count(store, EventRow) == 0 and count(store, JobRow) == 0
    with pytest.raises(ValueError, match="request of job 6"):
        service.ended(5, 100, T0 + 100, "COMPLETED", request=job(6))


def test_an_end_never_submitted_is_recorded_then_learned_through_learn_unseen(store: Store) -> None:
    service = PredictionService(store)
    outcome = service.ended(5, 100, T0 + 100, "COMPLETED", request=job(5))
    assert outcome.applied and outcome.learned and outcome.rule is LearnRule.UNSEEN
    assert model_steps(service) == 1
    with store.session() as session:
        row = session.get(JobRow, 5)
        assert row is not None
        assert (row.status, row.observed, row.run_s, row.learned) == ("ended", False, 100, True)


def test_a_learner_without_learn_unseen_records_unseen_jobs_without_learning(store: Store) -> None:
    service = PredictionService(store, lambda: LearnedPredictor(learn_unseen=False))
    outcome = service.ended(5, 100, T0 + 100, "COMPLETED", request=job(5))
    assert outcome.applied and not outcome.learned and outcome.rule is LearnRule.UNSEEN
    assert model_steps(service) == 0


def test_a_start_never_submitted_is_recorded_and_its_end_learned(store: Store) -> None:
    service = PredictionService(store)
    assert service.started(5, T0 + 10, request=job(5)).applied
    state = service.state_dict()
    assert state["features/running_ids"].tolist() == [[7, 5]]
    assert state["pending/job_id"].tolist() == []  # nothing to learn from until its end
    outcome = service.ended(5, 100, T0 + 110, "COMPLETED")
    assert outcome.learned and outcome.rule is LearnRule.UNSEEN
    assert service.state_dict()["features/running_ids"].tolist() == []


def test_stale_and_repeated_starts_change_nothing(store: Store) -> None:
    service = PredictionService(store)
    service.submitted(job(1), T0)
    assert service.started(1, T0 + 5).applied
    repeated = service.started(1, T0 + 6)
    assert not repeated.applied and "already started" in repeated.note
    service.ended(1, 60, T0 + 65, "COMPLETED")
    late = service.started(1, T0 + 70)
    assert not late.applied and "already ended" in late.note
    assert count(store, EventRow) == 3


def test_a_job_that_never_ran_is_recorded_and_forgotten_by_the_learner(store: Store) -> None:
    service = PredictionService(store)
    service.submitted(job(1), T0)
    outcome = service.ended(1, 0, T0 + 30, "CANCELLED")
    assert outcome.applied and not outcome.learned and outcome.rule is LearnRule.NEVER_RAN
    state = service.state_dict()
    assert state["pending/job_id"].tolist() == []
    assert state["features/user_counts"].tolist() == [[0, 1]]  # no completion in the history
    assert model_steps(service) == 0


# ---------------------------------------------------------------------- killed at a lowered limit
@pytest.mark.parametrize(
    ("run_s", "killed", "first_s", "current_s", "observed", "expected"),
    [
        (0, True, 100, 100, True, LearnRule.NEVER_RAN),
        (500, False, None, None, False, LearnRule.UNSEEN),
        (500, True, None, None, False, LearnRule.UNSEEN_KILLED),
        (500, False, 100, None, True, LearnRule.TRUE_RUNTIME),
        (90, True, 100, None, True, LearnRule.BELOW_PREDICTION),  # that limit was not ours
        (500, True, 100, 499, True, LearnRule.LOWER_BOUND),  # model below the bound: learn
        (500, True, 100, 500, True, LearnRule.BOUND_MET),  # model at the bound: do not pull down
        (500, True, 100, 3000, True, LearnRule.BOUND_MET),
    ],
)
def test_decide(
    run_s: int,
    killed: bool,
    first_s: int | None,
    current_s: int | None,
    observed: bool,
    expected: LearnRule,
) -> None:
    rule = decide(
        run_s=run_s,
        requested_s=3600,
        observed=observed,
        killed_at_lowered_limit=killed,
        first_prediction_s=first_s,
        current_prediction_s=current_s,
    )
    assert rule is expected
    assert rule.trains == (
        expected
        in (
            LearnRule.UNSEEN,
            LearnRule.TRUE_RUNTIME,
            LearnRule.BELOW_PREDICTION,
            LearnRule.LOWER_BOUND,
        )
    )


def test_killed_above_the_models_prediction_is_learned_as_a_lower_bound(store: Store) -> None:
    service = PredictionService(store)
    prediction = service.submitted(job(1), T0)  # untrained: 1 s
    service.started(1, T0)
    service.limit_changed(1, 120, T0)
    outcome = service.ended(1, 120, T0 + 120, "TIMEOUT", killed_at_lowered_limit=True)
    assert prediction < 120
    assert outcome.rule is LearnRule.LOWER_BOUND and outcome.learned
    assert model_steps(service) == 1


def test_killed_below_the_models_prediction_is_not_trained_on(store: Store) -> None:
    service = PredictionService(store)
    train(service, 8)  # the model now predicts about 600 s for this user
    request = job(1, submit_s=T0 + 100_000)
    prediction = service.submitted(request, request.submit_s)
    assert prediction > 100
    service.started(1, request.submit_s)
    steps = model_steps(service)
    # Killed after more than the prediction at submission (so at our limit), yet the model,
    # asked now, predicts more than the bound: nothing to learn from the bound.
    run_s = prediction
    outcome = service.ended(1, run_s, request.submit_s + run_s, "TIMEOUT", True)
    assert outcome.rule is LearnRule.BOUND_MET and not outcome.learned
    assert model_steps(service) == steps
    state = service.state_dict()
    assert 1 not in state["pending/job_id"].tolist()  # forgotten, not leaked
    assert state["features/running_ids"].tolist() == []
    assert state["features/user_counts"].tolist() == [[9, 9]]  # in the history, though
    with store.session() as session:
        row = session.get(JobRow, 1)
        assert row is not None
        assert (row.learned, row.learn_rule, row.killed_at_lowered_limit) == (
            False,
            "bound_met",
            True,
        )


def test_killed_before_the_prediction_was_not_our_limit(store: Store) -> None:
    service = PredictionService(store)
    train(service, 8)
    request = job(1, submit_s=T0 + 100_000)
    prediction = service.submitted(request, request.submit_s)
    outcome = service.ended(1, prediction - 1, request.submit_s + prediction, "TIMEOUT", True)
    assert outcome.rule is LearnRule.BELOW_PREDICTION and outcome.learned


# ---------------------------------------------------------------------- killed at the user's limit
def censoring_learner() -> LearnedPredictor:
    return LearnedPredictor(context=FeatureContext(0, "Europe/Stockholm"), censor_at_limit=True)


@pytest.mark.parametrize(
    ("run_s", "current_s", "observed", "expected"),
    [
        (3600, 1200, True, LearnRule.TIMEOUT_BOUND),  # model below the limit: learn the bound
        (3600, 3600, True, LearnRule.TIMEOUT_BOUND_MET),  # model at the limit: no step
        (3600, None, False, LearnRule.UNSEEN_KILLED),  # nothing to check the bound against
    ],
)
def test_decide_censored_at_the_users_limit(
    run_s: int, current_s: int | None, observed: bool, expected: LearnRule
) -> None:
    rule = decide(run_s=run_s, requested_s=3600, observed=observed, killed_at_lowered_limit=False,
                  first_prediction_s=100, current_prediction_s=current_s, censored_at_limit=True)
    assert rule is expected
    assert rule.trains == (expected is LearnRule.TIMEOUT_BOUND)
    assert rule.lower_bound == observed


def timeout_at_own_limit(
    service: PredictionService, job_id: int, submit_s: int
) -> tuple[int, EventOutcome]:
    """A job of user 7 that SLURM kills at the user's own limit (3600 s): TIMEOUT, 5 s late.
    Returns the prediction it got and the outcome of its end."""
    request = job(job_id, submit_s=submit_s)
    prediction = service.submitted(request, submit_s)
    service.started(job_id, submit_s)
    return prediction, service.ended(job_id, 3600 + 5, submit_s + 3605, "TIMEOUT")


def test_a_timeout_at_the_users_limit_is_a_true_runtime_without_censoring(store: Store) -> None:
    service = PredictionService(store, stockholm_learner)
    _, outcome = timeout_at_own_limit(service, 1, T0)
    assert outcome.rule is LearnRule.TRUE_RUNTIME and outcome.learned


def test_a_timeout_at_the_users_limit_is_a_lower_bound_with_censoring(store: Store) -> None:
    service = PredictionService(store, censoring_learner)
    train(service, 8)  # about 600 s predicted for user 7: below the 3600-s bound
    steps = model_steps(service)
    prediction, outcome = timeout_at_own_limit(service, 1, T0 + 8000)
    assert prediction < 3600
    assert outcome.rule is LearnRule.TIMEOUT_BOUND and outcome.learned
    assert model_steps(service) == steps + 1
    with store.session() as session:
        row = session.get(JobRow, 1)
        assert row is not None and row.learn_rule == "timeout_bound"
    # The same event replayed from the log after a restart gives the same model, bit for bit.
    restarted = PredictionService(store, censoring_learner)
    assert_same_state(restarted.state_dict(), service.state_dict())


def test_a_timeout_the_model_already_predicts_is_not_trained_on(store: Store) -> None:
    service = PredictionService(store, censoring_learner)
    # Jobs that all run to their limit: the model learns to predict the limit.
    for k in range(30):
        timeout_at_own_limit(service, 100 + k, T0 + 4000 * k)
    request = job(1, submit_s=T0 + 120_000)
    assert service.submitted(request, request.submit_s) == 3600
    steps = model_steps(service)
    service.started(1, request.submit_s)
    outcome = service.ended(1, 3600, request.submit_s + 3600, "TIMEOUT")
    assert outcome.rule is LearnRule.TIMEOUT_BOUND_MET and not outcome.learned
    assert model_steps(service) == steps
    assert 1 not in service.state_dict()["pending/job_id"].tolist()


# ---------------------------------------------------------------------- corrections
def test_a_limit_may_return_to_a_value_it_had_and_each_change_is_logged(store: Store) -> None:
    """The starvation guard gives a pending job its request, then its lowered limit again, and may
    do so twice: every change is an event of its own; a resend of the last one is not."""
    service = PredictionService(store)
    service.submitted(job(1), T0, limit_s=600)
    for at, limit in enumerate([3600, 600, 3600], start=1):
        assert service.limit_changed(1, limit, T0 + at).applied, (at, limit)
    assert not service.limit_changed(1, 3600, T0 + 9).applied  # resent: the job has it already
    with store.session() as session:
        changes = [(c.old_limit_s, c.new_limit_s) for c in session.scalars(select(CorrectionRow).order_by(CorrectionRow.id))]
        assert session.get(JobRow, 1).limit_s == 3600
    assert changes == [(600, 3600), (3600, 600), (600, 3600)]


def test_limit_changes_are_recorded_once(store: Store) -> None:
    service = PredictionService(store)
    service.submitted(job(1), T0)
    assert service.limit_changed(1, 600, T0 + 1).applied
    assert service.limit_changed(1, 1200, T0 + 500).applied
    same = service.limit_changed(1, 1200, T0 + 501)
    assert not same.applied and "already has limit" in same.note
    with store.session() as session:
        corrections = [
            (c.old_limit_s, c.new_limit_s, c.changed_at_s)
            for c in session.scalars(select(CorrectionRow).order_by(CorrectionRow.id))
        ]
        row = session.get(JobRow, 1)
        assert row is not None and row.limit_s == 1200
    assert corrections == [(3600, 600, T0 + 1), (600, 1200, T0 + 500)]
    service.ended(1, 100, T0 + 600, "COMPLETED")
    assert not service.limit_changed(1, 3600, T0 + 700).applied


# ---------------------------------------------------------------------- checkpoints
def test_checkpoints_every_n_events_keep_the_newest_and_close_writes_one(store: Store) -> None:
    service = PredictionService(store, checkpoint_every=10, keep_checkpoints=2)
    train(service, 12)  # 36 events: checkpoints at 10, 20, 30
    with store.session() as session:
        kept = sorted(session.scalars(select(CheckpointRow.last_event_seq)))
    assert kept == [20, 30]
    service.close()
    assert store.latest_checkpoint().last_event_seq == 36  # type: ignore[union-attr]
    reopened = PredictionService(store, checkpoint_every=10)
    assert reopened.replayed_events == 0 and reopened.last_event_seq == 36
    assert_same_state(reopened.state_dict(), service.state_dict())
    assert reopened.checkpoint() is None  # nothing new to checkpoint


def test_a_checkpoint_with_other_hyperparameters_is_refused(store: Store) -> None:
    service = PredictionService(store, checkpoint_every=1)
    train(service, 1)
    with pytest.raises(ValueError, match="other hyperparameters"):
        PredictionService(store, lambda: LearnedPredictor(eta=1.0))


def test_a_failed_event_leaves_learner_and_store_in_step(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that fails after the learner learned: the event is gone from both."""
    service = PredictionService(store, checkpoint_every=4)
    service.submitted(job(1), T0)
    service.started(1, T0)
    service.submitted(job(2), T0 + 1)
    before = service.state_dict()

    def fail(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(service, "_write_checkpoint", fail)  # the 4th event checkpoints
    with pytest.raises(OSError, match="disk full"):
        service.ended(1, 600, T0 + 600, "COMPLETED")
    monkeypatch.undo()
    assert_same_state(service.state_dict(), before)  # rebuilt from the store
    assert count(store, EventRow) == 3 and count(store, CheckpointRow) == 0
    outcome = service.ended(1, 600, T0 + 600, "COMPLETED")  # the sender retries
    # 4 on SQLite; 5 on PostgreSQL, whose sequences never hand out a number twice, even one
    # taken by a transaction that rolled back (store.py, EventRow).
    assert outcome.applied and outcome.learned and outcome.seq in (4, 5)
    assert [event.seq for event in store.events_after(0)] == [1, 2, 3, outcome.seq]
    assert service.last_event_seq == outcome.seq
    assert store.latest_checkpoint().last_event_seq == outcome.seq  # type: ignore[union-attr]


# ---------------------------------------------------------------------- restart = no restart
Event = tuple[int, int, int, str, JobRequest, dict[str, Any]]
SUBMIT, END, START, LIMIT = 0, 1, 2, 3  # docs/method.md §10: submission, termination, start


def sample_events(n_events: int) -> list[Event]:
    """The first `n_events` events of the KTH-SP2 sample, as a daemon would receive them.

    Submissions, starts (submit + the log's wait) and ends (start + runtime) in time order, in
    Unix seconds. To cover every path of the service, a few jobs are changed: every 7th (if
    it asked for more than 2 minutes) has its limit lowered to half its request at its start and is killed there if it runs longer;
    every 50th is cancelled while pending; every 40th is first seen at its start, and another
    every 40th only at its end.
    """
    workload = load_workload(SAMPLE_LOG)
    waits_s = {record.job_id: record.wait_s for record in read_swf(SAMPLE_LOG).records}
    unix_start_s = workload.header.unix_start_time
    assert unix_start_s is not None
    events: list[Event] = []
    for index, sample_job in enumerate(workload.jobs):
        request = dataclasses.replace(
            sample_job.request, submit_s=unix_start_s + sample_job.submit_s
        )
        job_id, submit_s = request.job_id, request.submit_s
        start_s = submit_s + max(0, waits_s[job_id])
        run_s = sample_job.run_s
        if index % 40 != 17 and index % 40 != 37:
            events.append((submit_s, SUBMIT, job_id, "submitted", request, {}))
        if index % 50 == 3:
            end_s = submit_s + min(waits_s[job_id], 60)
            events.append(
                (end_s, END, job_id, "ended", request, {"run_s": 0, "state": "CANCELLED"})
            )
            continue
        if index % 40 != 37:
            events.append(
                (start_s, START, job_id, "started", request, {"unseen": index % 40 == 17})
            )
        ending = {"run_s": run_s, "state": "COMPLETED", "unseen": index % 40 == 37}
        # (a job unseen until its end has no limit to change; 2 minutes are not lowered)
        if index % 7 == 2 and index % 40 != 37 and request.requested_s > 120:
            limit_s = request.requested_s // 2
            events.append((start_s, LIMIT, job_id, "limit_changed", request, {"limit_s": limit_s}))
            if run_s > limit_s:
                ending = {"run_s": limit_s, "state": "TIMEOUT", "killed": True}
                run_s = limit_s
        events.append((start_s + run_s, END, job_id, "ended", request, ending))
    events.sort(key=lambda event: event[:3])
    return events[:n_events]


def send(service: PredictionService, event: Event) -> int | EventOutcome:
    time_s, _, job_id, kind, request, extra = event
    if kind == "submitted":
        return service.submitted(request, time_s)
    if kind == "started":
        return service.started(job_id, time_s, request=request if extra["unseen"] else None)
    if kind == "limit_changed":
        return service.limit_changed(job_id, extra["limit_s"], time_s)
    return service.ended(
        job_id,
        extra["run_s"],
        time_s,
        extra["state"],
        extra.get("killed", False),
        request=request if extra.get("unseen") else None,
    )


N_EVENTS = 2000
CHECKPOINT_EVERY = 100


@dataclasses.dataclass
class Run:
    url: str
    results: list[int | EventOutcome]
    state: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return sample_events(N_EVENTS)


@pytest.fixture(scope="module")
def uninterrupted(events: list[Event], databases: Databases) -> Iterator[Run]:
    """The sample stream sent to one service that never stops (once per backend)."""
    url = databases.create_database()
    store = Store(url)
    service = PredictionService.open(store, stockholm_learner, checkpoint_every=CHECKPOINT_EVERY)
    results = [send(service, event) for event in events]
    state = service.state_dict()
    store.close()
    yield Run(url, results, state)
    databases.drop_database(url)


def test_the_sample_stream_exercises_every_path(uninterrupted: Run) -> None:
    outcomes = [r for r in uninterrupted.results if isinstance(r, EventOutcome)]
    assert all(outcome.applied for outcome in outcomes)
    rules = Counter(outcome.rule for outcome in outcomes if outcome.rule is not None)
    # Every rule but bound_met and the censoring learner's two (tested on their own above)
    # occurs, forget_pending included (never_ran jobs the learner had predicted).
    for rule in set(LearnRule) - {LearnRule.BOUND_MET, LearnRule.TIMEOUT_BOUND,
                                  LearnRule.TIMEOUT_BOUND_MET}:
        assert rules[rule] > 0, rule
    assert int(uninterrupted.state["nag/t"]) > 500


def open_service(url: str) -> tuple[Store, PredictionService]:
    store = Store(url)
    return store, PredictionService.open(
        store, stockholm_learner, checkpoint_every=CHECKPOINT_EVERY
    )


def test_restart_replays_to_the_uninterrupted_model_bit_for_bit(
    events: list[Event], uninterrupted: Run, store_url: str
) -> None:
    results: list[int | EventOutcome] = []
    # Two crashes: one between checkpoints (34 events to replay), one right after a checkpoint.
    segments = [(0, 1234, None), (1234, 1700, 34), (1700, N_EVENTS, 0)]
    for begin, end, expected_replay in segments:
        store, service = open_service(store_url)
        if expected_replay is not None:
            assert service.replayed_events == expected_replay
            assert service.last_event_seq == begin
        results += [send(service, event) for event in events[begin:end]]
        # The crash: the object is dropped, no final checkpoint, connections closed.
        del service
        store.close()
    assert results == uninterrupted.results
    store, service = open_service(store_url)
    assert service.replayed_events == 0  # 2000 is a multiple of 100: the last event checkpointed
    assert_same_state(service.state_dict(), uninterrupted.state)
    store.close()


@pytest.fixture
def copy_of_uninterrupted(uninterrupted: Run, databases: Databases) -> Iterator[str]:
    """URL of a copy of the uninterrupted run's database (a file copy, or a template)."""
    url = databases.create_database(template_url=uninterrupted.url)
    yield url
    databases.drop_database(url)


def test_resending_ingested_events_changes_nothing(
    events: list[Event], uninterrupted: Run, copy_of_uninterrupted: str
) -> None:
    store, service = open_service(copy_of_uninterrupted)
    assert_same_state(service.state_dict(), uninterrupted.state)
    counts_before = {model: count(store, model) for model in (EventRow, JobRow, CheckpointRow)}
    ended = {event[2] for event in events if event[3] == "ended"}
    for event, first in zip(events, uninterrupted.results):
        again = send(service, event)
        if isinstance(first, EventOutcome):
            assert isinstance(again, EventOutcome) and not again.applied, event
        elif event[2] in ended:
            assert again == first, event  # an ended job: the prediction it had
        else:  # still pending: predicted again from its features, with today's weights
            assert isinstance(again, int) and 1 <= again <= event[4].requested_s, event
    assert_same_state(service.state_dict(), uninterrupted.state)
    assert {model: count(store, model) for model in counts_before} == counts_before
    store.close()
