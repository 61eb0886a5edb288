"""The daemon's learning rules at their edges (hpcpredict/daemon/core/learning.py). Added for the
mutation run (docs/mutation.md): when a job counts as killed at its own limit, and that a job
that never ran leaves its user's running jobs (features 11-15) without being learned."""

from __future__ import annotations

import pytest

from hpcpredict.daemon.core.events import EventKind, request_to_json
from hpcpredict.corrections.survival import SurvivalCorrection
from hpcpredict.daemon.core.learning import (
    Applied, LearnRule, apply_event, decide, killed_at_limit, observe_event,
)
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.predictor import LearnedPredictor


@pytest.mark.parametrize("state, run_s, requested_s, killed", [
    ("TIMEOUT", 10, 100, True),  # SLURM says so, whatever the runtime
    ("timeout", 10, 100, True),  # in any case
    ("COMPLETED", 100, 100, True),  # a log shows only a runtime that reached the request
    ("COMPLETED", 101, 100, True),
    ("COMPLETED", 99, 100, False),
    ("FAILED", 0, 100, False),
])
def test_killed_at_its_own_limit(state: str, run_s: int, requested_s: int, killed: bool) -> None:
    assert killed_at_limit(state, run_s, requested_s) is killed


def test_a_job_that_never_ran_leaves_the_running_set_unlearned() -> None:
    predictor = LearnedPredictor()
    other, never = JobRequest(1, 0, 2, 3600, 7), JobRequest(2, 0, 4, 3600, 7)
    for request in (other, never):
        apply_event(predictor, EventKind.SUBMITTED, {"job": request_to_json(request), "now_s": 0})
        apply_event(predictor, EventKind.STARTED, {"job": request_to_json(request), "now_s": 10})
    assert set(predictor.features.users[7].running) == {1, 2}
    applied = apply_event(predictor, EventKind.ENDED, {
        "job": request_to_json(never), "run_s": 0, "end_s": 10, "observed": True,
        "killed_at_lowered_limit": False, "final_state": "CANCELLED", "first_prediction_s": None,
    })
    assert applied.rule is LearnRule.NEVER_RAN and applied.learned is False
    assert set(predictor.features.users[7].running) == {1}
    assert predictor.features.users[7].running_procs == 2
    assert predictor.nag.state.t == 0  # nothing learned


def test_a_job_killed_at_a_lowered_limit_after_one_second_is_judged_against_the_model() -> None:
    """The shortest run there is (1 s) still gets the model's current prediction to compare
    with: a lower bound learned, or met."""
    predictor = LearnedPredictor()
    request = JobRequest(3, 0, 1, 3600, 8)
    apply_event(predictor, EventKind.SUBMITTED, {"job": request_to_json(request), "now_s": 0})
    apply_event(predictor, EventKind.STARTED, {"job": request_to_json(request), "now_s": 5})
    applied = apply_event(predictor, EventKind.ENDED, {
        "job": request_to_json(request), "run_s": 1, "end_s": 6, "observed": True,
        "killed_at_lowered_limit": True, "final_state": "TIMEOUT", "first_prediction_s": None,
    })
    assert applied.rule in (LearnRule.LOWER_BOUND, LearnRule.BOUND_MET)


def _ended(request: JobRequest, run_s: int, end_s: int, killed: bool = False) -> dict[str, object]:
    return {"job": request_to_json(request), "run_s": run_s, "end_s": end_s, "observed": True,
            "killed_at_lowered_limit": killed, "final_state": "COMPLETED",
            "first_prediction_s": None}


def test_the_survival_correction_hears_starts_and_ends_from_the_payloads() -> None:
    """SURVIVAL's history (hpcpredict/corrections/survival.py) is fed from the events alone: a
    start enters the user's running jobs; an end is a runtime (above the request: the request;
    1 s is a runtime too), or a lower bound when killed at a lowered limit or when it never ran
    (by the learner's rule or by its 0 s, whatever the rule). Added for the mutation run:
    catches the started or ended job not passed on, and each part of the censoring condition
    (`observe_event` 6, 7, 20-29)."""
    correction = SurvivalCorrection()
    jobs = [JobRequest(job_id, 0, 1, 100, 7) for job_id in range(1, 7)]
    for request in jobs:
        payload = {"job": request_to_json(request), "now_s": 10 * request.job_id}
        observe_event(correction, EventKind.STARTED, payload, Applied())
    assert correction.history.observations(7, 100) == ([], [90, 80, 70, 60, 50, 40])
    ends = [(_ended(jobs[0], 50, 60), LearnRule.TRUE_RUNTIME),
            (_ended(jobs[1], 130, 150), LearnRule.TRUE_RUNTIME),  # over its request
            (_ended(jobs[2], 1, 70), LearnRule.TRUE_RUNTIME),
            (_ended(jobs[3], 40, 80, killed=True), LearnRule.LOWER_BOUND),
            (_ended(jobs[4], 0, 90), LearnRule.NEVER_RAN),
            (_ended(jobs[5], 0, 90), None)]
    for payload, rule in ends:
        observe_event(correction, EventKind.ENDED, payload, Applied(rule=rule))
    assert correction.history.observations(7, 200) == ([50, 100, 1], [40, 0, 0])


def test_a_runtime_past_the_request_ends_the_job_at_its_limit_in_the_history() -> None:
    """A job that ran 130 s of the 100 it asked (SLURM's OverTimeLimit grace) is learned as
    100 s ending at 110, not 140: the next job's break time counts from then. Catches the end
    time's correction (`_apply_end` 56-58)."""
    predictor = LearnedPredictor()
    request = JobRequest(5, 0, 1, 100, 9)
    apply_event(predictor, EventKind.SUBMITTED, {"job": request_to_json(request), "now_s": 0})
    apply_event(predictor, EventKind.STARTED, {"job": request_to_json(request), "now_s": 10})
    applied = apply_event(predictor, EventKind.ENDED, _ended(request, 130, 140))
    assert applied.rule is LearnRule.TRUE_RUNTIME
    user = predictor.features.users[9]
    assert (user.last_run_s, user.last_end_s) == (100.0, 110.0)


def test_an_unseen_job_killed_at_a_limit_is_not_submitted_by_its_end() -> None:
    """A job the learner never saw, reported killed at a lowered limit, enters the history only:
    the model is not asked about it (asking records a submission: feature 9 of the user's next
    jobs would count it). Catches the model asked for unseen jobs (`_apply_end` 25)."""
    predictor = LearnedPredictor()
    request = JobRequest(6, 0, 4, 100, 9)
    payload = {**_ended(request, 50, 60, killed=True), "observed": False}
    assert apply_event(predictor, EventKind.ENDED, payload).rule is LearnRule.UNSEEN_KILLED
    user = predictor.features.users[9]
    assert (user.n_submitted, user.n_completed, user.last_run_s) == (0, 1, 50.0)


@pytest.mark.parametrize("censored, message", [
    (True, "a censored job needs the model's current prediction"),
    (False, "a job killed at a lowered limit needs the model's current prediction"),
])
def test_a_judgement_without_the_models_prediction_is_refused_by_name(
    censored: bool, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        decide(run_s=50, requested_s=100, observed=True, killed_at_lowered_limit=not censored,
               first_prediction_s=None, current_prediction_s=None, censored_at_limit=censored)
    assert str(raised.value) == message


def test_an_event_of_no_known_kind_is_refused_by_name() -> None:
    request = JobRequest(8, 0, 1, 100, 9)
    with pytest.raises(ValueError) as raised:
        apply_event(LearnedPredictor(), "resumed", {"job": request_to_json(request)})  # type: ignore[arg-type]
    assert str(raised.value) == "unknown event kind 'resumed'"
