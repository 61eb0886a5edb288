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
(design.md: lowering the limit is only safe because the corrector raises it in time). The rule,
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

The issue's draft said "not trained on, unless run_s < the prediction"; rules 4-6 are that,
made precise: below the prediction given at submission the runtime is true (4); above it, the
bound is used only in the direction it is informative (5, 6).

As the simulator's cleaning does (docs/method.md §10, rule 7), a runtime above the request (SLURM's
``OverTimeLimit`` grace) is learned as the request; the store keeps the reported value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from hpcpredict.daemon.events import EventKind, request_from_json
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.predictors import clip_prediction


class LearnRule(StrEnum):
    """Which rule of the module doc applied to an ended job (stored in ``jobs.learn_rule``)."""

    NEVER_RAN = "never_ran"
    UNSEEN = "unseen"
    UNSEEN_KILLED = "unseen_killed"
    TRUE_RUNTIME = "true_runtime"
    BELOW_PREDICTION = "below_prediction"
    LOWER_BOUND = "lower_bound"
    BOUND_MET = "bound_met"

    @property
    def trains(self) -> bool:
        """True when the job is handed to the learner's `job_ended` (it takes a NAG step)."""
        return self in _TRAINING_RULES


_TRAINING_RULES = frozenset(
    {LearnRule.UNSEEN, LearnRule.TRUE_RUNTIME, LearnRule.BELOW_PREDICTION, LearnRule.LOWER_BOUND}
)


def decide(
    *,
    run_s: int,
    requested_s: int,
    observed: bool,
    killed_at_lowered_limit: bool,
    first_prediction_s: int | None,
    current_prediction_s: int | None,
) -> LearnRule:
    """The rule of the module doc for one ended job (pure: the tests call it directly).

    `current_prediction_s` is what the model predicts now from the job's submission features;
    it is read only for a job observed and killed at a lowered limit.
    """
    if run_s <= 0:
        return LearnRule.NEVER_RAN
    if not observed:
        return LearnRule.UNSEEN_KILLED if killed_at_lowered_limit else LearnRule.UNSEEN
    if not killed_at_lowered_limit:
        return LearnRule.TRUE_RUNTIME
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
        prediction = predictor.predict(request, payload["now_s"])
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


def _apply_end(
    predictor: LearnedPredictor, request: JobRequest, payload: dict[str, Any]
) -> Applied:
    run_s: int = payload["run_s"]
    end_s: int = payload["end_s"]
    observed: bool = payload["observed"]
    killed: bool = payload["killed_at_lowered_limit"]
    current = None
    if observed and killed and run_s > 0:
        # Read-only for a job the learner holds: its features as submitted, today's weights.
        current = predictor.predict(request, end_s)
    rule = decide(
        run_s=run_s,
        requested_s=request.requested_s,
        observed=observed,
        killed_at_lowered_limit=killed,
        first_prediction_s=payload["first_prediction_s"],
        current_prediction_s=current,
    )
    learned_run_s = min(run_s, request.requested_s)  # docs/method.md §10, cleaning rule 7
    if rule.trains:
        predictor.job_ended(request, learned_run_s, end_s)
        learned = rule is not LearnRule.UNSEEN or predictor.learn_unseen
        return Applied(rule=rule, learned=learned)
    if rule is LearnRule.NEVER_RAN:
        _leave_running_set(predictor, request)
    else:  # BOUND_MET, UNSEEN_KILLED: into the history, no step
        predictor.features.job_ended(request, learned_run_s, end_s)
    if observed:
        forget_pending(predictor, request.job_id)
    return Applied(rule=rule, learned=False)


def _leave_running_set(predictor: LearnedPredictor, request: JobRequest) -> None:
    """Take a job out of its user's running jobs (features 11-15) without a completion."""
    user = predictor.features.users.get(request.user_id)
    if user is not None:
        user.remove_running(request.job_id)


def forget_pending(predictor: LearnedPredictor, job_id: int) -> None:
    """Drop the submission features the learner keeps for `job_id`, without learning."""
    predictor.discard(job_id)
