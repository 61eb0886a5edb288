"""Why the daemon predicted what it did, from its store alone.

A sysadmin asked "why did my job get 4 minutes?" needs the terms of the model that made the
prediction, with the model as it was then. The store has what it takes: the checkpoints (the
learner's whole state) and the event log after them. `restore_model` rebuilds the learner the
daemon had just before any event, in memory (the newest checkpoint before it, then the logged
events up to it, applied by `learning.apply_event`, the daemon's own restart path), and
`LearnedPredictor.explain` splits the prediction into its terms. Nothing is written: the views
read the store while the daemon runs.

* One live job (`explain_job`): the model just before the job's submission event, and the
  features that event logged (those of the prediction served), so the explanation's answer is
  the prediction the daemon gave, and is checked against the one recorded.
* A user (`explain_user`): what the model, as it stands after the last logged event, predicts
  for a job like the user's last one submitted then, beside the user's recent runtimes.

Jobs judged in `hpcpredict train`'s replay have no logged event and their features are not
kept: they are explained through their user.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from sqlalchemy import select

from hpcpredict.daemon.core.checkpoints import CheckpointError, state_from_npz
from hpcpredict.daemon.core.events import EventKind, request_from_json
from hpcpredict.daemon.core.learning import apply_event
from hpcpredict.daemon.core.store import EventRow, HistoryJudgementRow, JobRow, PredictionRow, Store
from hpcpredict.history_keys import history_key
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.explanation import PredictionExplanation
from hpcpredict.learn.predictor import HyperparameterMismatchError, LearnedPredictor

RECENT_JOBS = 5  # the user's last judged jobs shown beside an explanation
TOP_TERMS = 5


class ExplainError(LookupError):
    """Nothing to explain (unknown job or user); the message says what to ask instead."""


@dataclass(frozen=True)
class StoredModel:
    """A learner rebuilt from the store, and which events it includes."""

    predictor: LearnedPredictor
    through_seq: int  # the last event applied (0: none)
    checkpoint_seq: int | None  # the checkpoint it started from; None: an untrained learner


def restore_model(
    store: Store, factory: Callable[[], LearnedPredictor] = LearnedPredictor, *, before_seq: int | None = None
) -> StoredModel:
    """The learner as the daemon had it just before event `before_seq` (None: after the last).

    Starts from the newest readable checkpoint that includes no event from `before_seq` on,
    else from `factory()` (the daemon's untrained learner), then applies the events after it.
    Exact for any event: `train`'s bootstrap checkpoint (event 0) is never pruned, nor is the
    log. The cost is the replay: up to `checkpoint_every` events for a recent job, every event
    since the bootstrap for a job older than the two newest checkpoints.
    """
    stop = store.last_event_seq() + 1 if before_seq is None else before_seq
    predictor, start_seq = None, None
    for checkpoint in store.checkpoints():  # the newest first
        if checkpoint.last_event_seq >= stop:
            continue
        try:
            predictor = LearnedPredictor.from_state(state_from_npz(checkpoint.state_npz))
        except (CheckpointError, HyperparameterMismatchError, KeyError, ValueError, TypeError):
            continue  # the daemon skips an unusable checkpoint the same way
        start_seq = checkpoint.last_event_seq
        break
    if predictor is None:
        predictor = factory()
    through = start_seq or 0
    for event in store.events_after(through):
        if event.seq >= stop:
            break
        try:
            apply_event(predictor, EventKind(event.kind), event.payload)
        except (KeyError, TypeError, ValueError) as error:  # as the daemon's restore words it
            raise ExplainError(f"event {event.seq} of the log ({event.kind}, job {event.job_id}) cannot be "
                               f"replayed ({type(error).__name__}: {error}): the event log is damaged") from None
        through = event.seq
    return StoredModel(predictor, through, start_seq)


@dataclass(frozen=True)
class Why:
    """An explanation of one prediction, with what it was checked against and the user's
    recent runtimes to compare with."""

    subject: str  # "job 123" or "user 7's next job"
    request: JobRequest
    at_s: int  # the moment of the prediction (Unix seconds)
    explanation: PredictionExplanation
    model: str  # which model, in words
    recorded_s: int | None = None  # the prediction the daemon gave (a job), None for a user
    recent: list[dict[str, int]] = field(default_factory=list)  # the user's last judged jobs
    history: dict[str, float] = field(default_factory=dict)  # the user's runtimes as the model knows them

    def to_dict(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "job_id": self.request.job_id if self.recorded_s is not None else None,
            "user_id": self.request.user_id,
            "requested_s": self.request.requested_s,
            "procs": self.request.procs,
            "at_s": self.at_s,
            "model": self.model,
            "recorded_prediction_s": self.recorded_s,
            **self.explanation.to_dict(TOP_TERMS),
            "user_history": self.history,
            "recent_jobs": self.recent,
        }


def explain_job(store: Store, job_id: int, factory: Callable[[], LearnedPredictor] = LearnedPredictor) -> Why:
    """Why the daemon predicted what it did for live job `job_id`, at its submission."""
    with store.session() as session:
        row = session.get(JobRow, job_id)
        event = session.scalars(
            select(EventRow).where(EventRow.job_id == job_id, EventRow.kind == EventKind.SUBMITTED.value)
            .order_by(EventRow.seq).limit(1)
        ).first()
        recorded = session.scalars(
            select(PredictionRow.predicted_s).where(PredictionRow.job_id == job_id)
            .order_by(PredictionRow.id).limit(1)
        ).first()
        history_user = session.scalar(select(HistoryJudgementRow.user_id).where(HistoryJudgementRow.job_id == job_id))
    if event is None or row is None:
        if history_user is not None:
            raise ExplainError(
                f"job {job_id} was judged in `hpcpredict train`'s replay of the history, whose features are not "
                f"kept: `hpcpredict errors --user {history_user}` explains this user's predictions")
        raise ExplainError(f"job {job_id}: no such job in the store (or it was never submitted through the "
                           f"daemon); `hpcpredict errors` lists the judged jobs' users")
    payload = _payload(event)
    request = request_from_json(payload["job"])
    stored = restore_model(store, factory, before_seq=event.seq)
    features = payload.get("features")
    explanation = stored.predictor.explain(request, payload["now_s"], features=features)
    model = _describe(stored, f"just before the job's submission (event {event.seq:,})")
    return Why(f"job {job_id}", request, int(payload["now_s"]), explanation, model, recorded,
               _recent_jobs(store, request.user_id, ended_by_s=int(payload["now_s"])),
               _history(stored.predictor, request))


def explain_user(store: Store, user_id: int, factory: Callable[[], LearnedPredictor] = LearnedPredictor) -> Why:
    """Why the model predicts what it does for `user_id`: see `explain_users`."""
    answer = explain_users(store, [user_id], factory)[user_id]
    if isinstance(answer, ExplainError):
        raise answer
    return answer


def explain_users(
    store: Store, user_ids: Iterable[int], factory: Callable[[], LearnedPredictor] = LearnedPredictor
) -> dict[int, Why | ExplainError]:
    """For each user, the model after the last logged event on a job like the user's last one
    (its request and processors), submitted at the newest moment the store knows; one restore
    for them all. An `ExplainError` (not raised) for a user the model has never seen."""
    stored = restore_model(store)
    predictor = stored.predictor
    at_s = _newest_moment(store, predictor)
    answers: dict[int, Why | ExplainError] = {}
    for user_id in dict.fromkeys(user_ids):
        try:
            template = _last_request(store, predictor, user_id)
        except ExplainError as error:
            answers[user_id] = error
            continue
        request = replace(template, job_id=-1, submit_s=at_s)  # -1: never a pending job's id
        explanation = predictor.explain(request, at_s)
        model = _describe(stored, "after the last logged event")
        answers[user_id] = Why(f"user {user_id}'s next job", request, at_s, explanation, model, None,
                               _recent_jobs(store, user_id), _history(predictor, request))
    return answers


def _payload(event: EventRow) -> dict:
    import json

    return json.loads(event.payload_json)


def _describe(stored: StoredModel, when: str) -> str:
    start = ("an untrained model" if stored.checkpoint_seq is None
             else f"the checkpoint at event {stored.checkpoint_seq:,}")
    return (f"the model {when}: {start} + the events up to {stored.through_seq:,} "
            f"({int(stored.predictor.nag.state.t):,} learning steps)")


def _newest_moment(store: Store, predictor: LearnedPredictor) -> int:
    """The newest time the store knows: its last event's, or the newest end the model learned."""
    with store.session() as session:
        last_event_s = session.scalar(select(EventRow.occurred_at_s).order_by(EventRow.seq.desc()).limit(1))
    features = predictor.features
    newest_end_s = max(map(features.last_end_s, features.users), default=0.0)
    return int(max(last_event_s or 0, newest_end_s))


def _last_request(store: Store, predictor: LearnedPredictor, user_id: int) -> JobRequest:
    """The user's newest live job as submitted; else, for a user known from `train`'s history
    only, their last judged request with their mean processor count."""
    with store.session() as session:
        row = session.scalars(select(JobRow).where(JobRow.user_id == user_id)
                              .order_by(JobRow.submit_s.desc(), JobRow.job_id.desc()).limit(1)).first()
        if row is not None:
            return row.to_request()
        requested_s = session.scalar(select(HistoryJudgementRow.requested_s)
                                     .where(HistoryJudgementRow.user_id == user_id)
                                     .order_by(HistoryJudgementRow.end_s.desc()).limit(1))
    history = predictor.features.users.get(user_id)
    if requested_s is None or history is None:
        raise ExplainError(f"user {user_id}: no job of this user is known to the model; "
                           f"`hpcpredict errors` lists the users there are")
    procs = round(history.sum_submitted_procs / history.n_submitted) if history.n_submitted else 1
    return JobRequest(job_id=-1, submit_s=0, procs=max(int(procs), 1), requested_s=int(requested_s),
                      user_id=user_id)


def _history(predictor: LearnedPredictor, request: JobRequest) -> dict[str, float]:
    """The user's completed runtimes as the model knows them (its features 2-7): the history
    `request` is predicted from (the user's, or with `history_by` its kind's)."""
    user = predictor.features.users.get(history_key(request, predictor.history_by))
    if user is None or not user.n_completed:
        return {"completed_jobs": 0}
    return {
        "completed_jobs": user.n_completed,
        "last_run_s": user.last_run_s,
        "second_last_run_s": user.second_last_run_s,
        "third_last_run_s": user.third_last_run_s,
        "mean_run_s": user.sum_run_s / user.n_completed,
    }


def _recent_jobs(store: Store, user_id: int, ended_by_s: int | None = None) -> list[dict[str, int]]:
    """The user's last judged jobs (history and live) that ended by `ended_by_s` (a job's
    submission: what the model knew then), newest first."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs  # pandas: only when asked

    judged = judged_jobs(store, user_id=user_id, source="both")
    if ended_by_s is not None:
        judged = judged[judged["end_s"] <= ended_by_s]
    newest = judged.sort_values(["end_s", "job_id"]).tail(RECENT_JOBS).iloc[::-1]
    return [
        {"job_id": int(job.job_id), "end_s": int(job.end_s), "run_s": int(job.run_s),
         "predicted_s": int(job.predicted_s), "requested_s": int(job.requested_s), "source": str(job.source)}
        for job in newest.itertuples(index=False)
    ]


def format_why(why: Why) -> str:
    """The explanation as text for a terminal."""
    request, explanation = why.request, why.explanation
    lines = [f"Why {why.subject} is predicted {_duration(explanation.published_s)} "
             f"(request {_duration(request.requested_s)}, {request.procs:,} processors):"]
    if why.recorded_s is not None:
        same = ("the same" if why.recorded_s == explanation.published_s else
                "DIFFERENT: the store does not rebuild that model exactly (a checkpoint made with other "
                "learner options?)")
        lines.append(f"  the daemon gave {_duration(why.recorded_s)} at submission ({same})")
    if explanation.published_s != explanation.model_s:
        lines.append(f"  the learned model says {_duration(explanation.model_s)}; the calibration "
                     f"published {_duration(explanation.published_s)}")
    lines.append(f"  model: {why.model}")
    lines.append(f"  {explanation.transform}")
    lines.append("  largest terms of f = sum of w_i * phi_i (share of the terms' total size):")
    for term in explanation.top_terms(TOP_TERMS):
        value = f"{term.contribution_s:+,.1f}" if abs(term.contribution_s) < 100 else f"{term.contribution_s:+,.0f}"
        lines.append(f"    {value:>14} s  {100 * term.share:5.1f}%  {term.term}")
    history = why.history
    if history.get("completed_jobs"):
        lines.append(
            f"  the user's runtimes the model knows: last {_duration(history['last_run_s'])}, "
            f"{_duration(history['second_last_run_s'])}, {_duration(history['third_last_run_s'])}; "
            f"mean {_duration(history['mean_run_s'])} over {int(history['completed_jobs']):,} jobs")
    else:
        lines.append("  the model knows no completed job of this user")
    if why.recent:
        lines.append("  recent judged jobs (newest first): " + "; ".join(
            f"{job['job_id']}: ran {_duration(job['run_s'])}, predicted {_duration(job['predicted_s'])}, "
            f"asked {_duration(job['requested_s'])}" for job in why.recent))
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: 45 s, 12 min, 3.5 h."""
    seconds = float(seconds)
    if abs(seconds) < 120:
        return f"{seconds:,.0f} s"
    if abs(seconds) < 7200:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds / 3600:,.1f} h"
