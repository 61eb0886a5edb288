"""How one logged event changes the learner: the code shared by live ingestion and replay.

`apply_event` is the only place where the daemon touches its `LearnedPredictor`. The service
calls it when an event arrives, and again for every event after the last checkpoint when it
restarts; since it reads nothing but the predictor and the event's payload, the model after a
restart is bit for bit the model of an uninterrupted run.

When an ended job is learned (`decide`)
---------------------------------------
SLURM kills a job at its time limit. A job killed at a limit hpcpredict *lowered* (below the
user's request) did not show its runtime: it would have run longer, so ``run_s`` is only a lower
bound on it. Learning it as a true runtime would teach the model that the job was exactly as
long as the limit the model itself chose, a feedback loop that hides under-predictions
(lowering the limit is only safe because the corrector raises it in time). The rule,
in order:

1. ``never_ran`` — ``run_s <= 0`` (cancelled while pending): no runtime was observed. Recorded,
   not learned, and kept out of the user's history, as the simulator's cleaning drops such jobs
   (docs/method.md §10, rule 4).
2. ``unseen`` — the learner never saw the submission: learned through LearnedPredictor's
   ``learn_unseen`` path (an approximation its docstring describes), if the learner does.
   ``unseen_killed``: reported killed at a lowered limit although the daemon never saw it (state
   lost?): nothing to check the bound against, so not trained; it enters the history only.
3. ``true_runtime`` — not killed at a lowered limit: learned.
4. ``below_prediction`` — reported killed at a lowered limit, but it ran *less* than the
   prediction hpcpredict gave at submission. hpcpredict never lowers a limit below its
   prediction (the plugin rounds up to minutes, the corrector only raises), so that limit was
   not ours and the runtime is true: learned.
5. ``lower_bound`` — killed at our lowered limit, and the model, asked now with the job's
   submission features, predicts less than ``run_s``: learned. Training towards the bound moves
   the prediction up, in the right direction; the true error was at least this large, so the
   step under-corrects but never mis-corrects.
6. ``bound_met`` — killed at our lowered limit, and the model already predicts ``run_s`` or
   more: the bound does not contradict it, and training would pull the prediction *down*
   towards a runtime the job did not have. Not trained. The job still enters the user's
   history (it did run ``run_s`` seconds; history describes behaviour, it is not a target).

The first draft of this rule said "not trained on, unless run_s < the prediction"; rules 4-6 are
that, made precise: below the prediction given at submission the runtime is true (4); above it,
the bound is used only in the direction it is informative (5, 6).

7. ``timeout_bound`` / ``timeout_bound_met`` — only with the learner's ``censor_at_limit``: a job
   killed at the *user's own* limit (SLURM's TIMEOUT, or a runtime that reached the request) is
   censored the same way: its runtime is at least the limit. Learned as a lower bound when the
   model predicts less (7a), not trained when it already predicts the limit (7b). Unseen, it is
   ``unseen_killed``. Without ``censor_at_limit`` such a job is a ``true_runtime`` (the
   simulator's default does the same with a log).

Rules 5-7 are one method of the learner, `LearnedPredictor.learn_lower_bound` (the under-prediction
branch of the loss alone, no step when the bound is met), the same the simulator calls with
``censor_at_limit``: one learner, two drivers.

As the simulator's cleaning does (docs/method.md §10, rule 7), a runtime above the request (SLURM's
``OverTimeLimit`` grace) is learned as the request; the store keeps the reported value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from hpcpredict.daemon.core.events import EventKind, request_from_json
from hpcpredict.jobs import JobRequest
from hpcpredict.corrections.policies import CorrectionPolicy
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.learn.baselines import clip_prediction


class LearnRule(StrEnum):
    """Which rule of the module doc applied to an ended job (stored in ``jobs.learn_rule``)."""

    NEVER_RAN = "never_ran"
    UNSEEN = "unseen"
    UNSEEN_KILLED = "unseen_killed"
    TRUE_RUNTIME = "true_runtime"
    BELOW_PREDICTION = "below_prediction"
    LOWER_BOUND = "lower_bound"
    BOUND_MET = "bound_met"
    TIMEOUT_BOUND = "timeout_bound"
    TIMEOUT_BOUND_MET = "timeout_bound_met"

    @property
    def lower_bound(self) -> bool:
        """True when the runtime is only a lower bound (rules 5-7): `learn_lower_bound` applies."""
        return self in _BOUND_RULES

    @property
    def trains(self) -> bool:
        """True when the job is handed to the learner's `job_ended` (it takes a NAG step)."""
        return self in _TRAINING_RULES


_TRAINING_RULES = frozenset(
    {LearnRule.UNSEEN, LearnRule.TRUE_RUNTIME, LearnRule.BELOW_PREDICTION, LearnRule.LOWER_BOUND,
     LearnRule.TIMEOUT_BOUND}
)
_BOUND_RULES = frozenset(
    {LearnRule.LOWER_BOUND, LearnRule.BOUND_MET, LearnRule.TIMEOUT_BOUND,
     LearnRule.TIMEOUT_BOUND_MET}
)
TIMEOUT_STATE = "TIMEOUT"  # SLURM's state of a job killed at its time limit


def killed_at_limit(final_state: str, run_s: int, requested_s: int) -> bool:
    """Did the job end killed at its own limit? SLURM says TIMEOUT; a log only shows a runtime
    that reached the request (what the simulator's learner reads, docs/method.md §1)."""
    return final_state.upper() == TIMEOUT_STATE or run_s >= requested_s


def decide(
    *,
    run_s: int,
    requested_s: int,
    observed: bool,
    killed_at_lowered_limit: bool,
    first_prediction_s: int | None,
    current_prediction_s: int | None,
    censored_at_limit: bool = False,
) -> LearnRule:
    """The rule of the module doc for one ended job (pure: the tests call it directly).

    `current_prediction_s` is what the model predicts now from the job's submission features;
    it is read only for a job observed and killed at a lowered limit, or censored at its own
    limit (`censored_at_limit`: killed there, and the learner censors such jobs).
    """
    if run_s <= 0:
        return LearnRule.NEVER_RAN
    if not observed:
        killed = killed_at_lowered_limit or censored_at_limit
        return LearnRule.UNSEEN_KILLED if killed else LearnRule.UNSEEN
    if not killed_at_lowered_limit:
        if not censored_at_limit:
            return LearnRule.TRUE_RUNTIME
        if current_prediction_s is None:
            raise ValueError("a censored job needs the model's current prediction")
        if current_prediction_s < min(run_s, requested_s):
            return LearnRule.TIMEOUT_BOUND
        return LearnRule.TIMEOUT_BOUND_MET
    if first_prediction_s is not None and run_s < first_prediction_s:
        return LearnRule.BELOW_PREDICTION
    if current_prediction_s is None:
        raise ValueError("a job killed at a lowered limit needs the model's current prediction")
    if current_prediction_s < min(run_s, requested_s):
        return LearnRule.LOWER_BOUND
    return LearnRule.BOUND_MET


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying an event produced: a prediction (submitted) or a learning rule (ended)."""

    prediction_s: int | None = None
    rule: LearnRule | None = None
    learned: bool = False


def apply_event(predictor: LearnedPredictor, kind: EventKind, payload: dict[str, Any]) -> Applied:
    """Apply one event to `predictor`, from its payload alone (see events.py for the fields)."""
    request = request_from_json(payload["job"])
    if kind is EventKind.SUBMITTED:
        features = payload.get("features")  # those of the served prediction (feature_tokens.py)
        prediction = predictor.predict(
            request, payload["now_s"], features=None if features is None else np.asarray(features)
        )
        # The learner already clips; a guard here keeps the promise whatever the factory built.
        return Applied(prediction_s=clip_prediction(prediction, request.requested_s))
    if kind is EventKind.STARTED:
        predictor.job_started(request, payload["now_s"])
        return Applied()
    if kind is EventKind.ENDED:
        return _apply_end(predictor, request, payload)
    if kind is EventKind.LIMIT_CHANGED:
        return Applied()  # the learner does not read limits; the store records the change
    raise ValueError(f"unknown event kind {kind!r}")


def observe_event(
    correction: CorrectionPolicy, kind: EventKind, payload: dict[str, Any], applied: Applied
) -> None:
    """Tell the correction policy a job started or ended, from the event's payload alone (so a
    replay tells it again exactly): SURVIVAL's runtime history (hpcpredict/corrections/survival.py), the
    one the simulator feeds at its own events. A job killed at a limit hpcpredict lowered ran at
    least `run_s` (a lower bound); one that never ran leaves the running set and says nothing."""
    request = request_from_json(payload["job"])
    if kind is EventKind.STARTED:
        correction.job_started(request, payload["now_s"])
    elif kind is EventKind.ENDED:
        run_s = min(payload["run_s"], request.requested_s)
        censored = bool(payload["killed_at_lowered_limit"]) or applied.rule is LearnRule.NEVER_RAN \
            or run_s <= 0
        correction.job_ended(request, run_s, payload["end_s"], censored=censored)


def _apply_end(
    predictor: LearnedPredictor, request: JobRequest, payload: dict[str, Any]
) -> Applied:
    run_s: int = payload["run_s"]
    end_s: int = payload["end_s"]
    observed: bool = payload["observed"]
    killed: bool = payload["killed_at_lowered_limit"]
    censored = predictor.censor_at_limit and killed_at_limit(
        payload["final_state"], run_s, request.requested_s
    )
    current = None
    if observed and (killed or censored) and run_s > 0:
        # Read-only for a job the learner holds: its features as submitted, today's weights;
        # the model's own answer (not the calibrated one), the one learn_lower_bound checks.
        current = predictor.model_prediction_s(request, end_s)
    rule = decide(
        run_s=run_s,
        requested_s=request.requested_s,
        observed=observed,
        killed_at_lowered_limit=killed,
        first_prediction_s=payload["first_prediction_s"],
        current_prediction_s=current,
        censored_at_limit=censored,
    )
    learned_run_s = min(run_s, request.requested_s)  # docs/method.md §10, cleaning rule 7
    end_s -= run_s - learned_run_s  # as it would have ended at its limit (learn/predictor.py)
    if rule.lower_bound:
        # The learner compares the same prediction with the same bound: it steps exactly for
        # LOWER_BOUND and TIMEOUT_BOUND, and enters the job in the user's history either way.
        stepped = predictor.learn_lower_bound(request, learned_run_s, end_s)
        return Applied(rule=rule, learned=stepped)
    if rule.trains:  # a true runtime: the rule above has already judged any kill
        # False for an outlier the learner refuses (bounded influence, learn/predictor.py)
        learned = predictor.job_ended(request, learned_run_s, end_s, killed_at_limit=False)
        return Applied(rule=rule, learned=learned)
    if rule is LearnRule.NEVER_RAN:
        _leave_running_set(predictor, request)
    else:  # UNSEEN_KILLED: into the history, no step
        predictor.features.job_ended(request, learned_run_s, end_s)
    if observed:
        forget_pending(predictor, request.job_id)
    return Applied(rule=rule, learned=False)


def _leave_running_set(predictor: LearnedPredictor, request: JobRequest) -> None:
    """Take a job out of its user's running jobs (features 11-15) without a completion."""
    predictor.features.leave_running(request)


def forget_pending(predictor: LearnedPredictor, job_id: int) -> None:
    """Drop the submission features the learner keeps for `job_id`, without learning."""
    predictor.discard(job_id)
