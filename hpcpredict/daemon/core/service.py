"""`PredictionService`: the daemon's core, one learner kept in step with its store.

The four events of a job (submitted, started, ended, limit changed) each go through one
transaction that, in this order:

1. appends the event to the log (write-ahead; its unique idempotency key makes a resent event a
   no-op before anything else happens),
2. applies it to the in-memory learner (`hpcpredict.daemon.core.learning.apply_event`),
3. updates the projections (``jobs``, ``predictions``, ``corrections``, ``user_errors``),
4. every ``checkpoint_every`` events, stores the learner's state with the sequence number of
   that event,

and commits. A crash before the commit loses the event whole (the sender retries it; ingestion is
idempotent); after it, the event is in the log and will be replayed. So at any instant the
learner equals "last checkpoint + events after it", which is exactly what `PredictionService`
rebuilds when it is constructed: restart loses nothing learned, and replay is bit for bit.

If an event's transaction fails after the learner was touched, the learner is put back as it
was before the event (a savepoint of the little one event can change: NAG's arrays, one user's
history, one job's features), so it equals the store again without a replay: a store that fails
every event (a damaged file, a full disk) costs each event its transaction, never a rebuild of
the model. Only a failed *commit* is in doubt (PostgreSQL may have committed before the connection
broke): the log is read back for the event; if even that read fails, the learner is rebuilt from
the store before the next event, once the store answers again. The failures are counted
(`event_failures`, `failing_events`) for ``/health`` and PING.

Restoring reads the newest checkpoint that passes `checkpoints.load_checkpoint`'s checks; a damaged
one is reported, removed, and the previous one (or the bootstrap checkpoint `train` stored, which
is never pruned, or an untrained model) is used with the events logged after it: the same model,
at the cost of a longer replay.

Answers are given from memory. Threads: the event methods (`submitted`, `started`,
`ended`, `limit_changed`, `checkpoint`, `close`) do database work and are called from one thread
at a time, the daemon's store writer (writer.py), never from the asyncio loop that answers
PREDICT. The learner and the correction policy, though, are touched only through `on_learner`,
which the daemon points at its event loop: every change to the model (an event's learning step,
the undo of a failed one) and every copy of it (a checkpoint's state) runs on the loop thread,
between two PREDICTs, never beside one. Why there rather than on the writer: PREDICT reads the
per-user histories and NAG's arrays on the loop, and a step taken on another thread meanwhile
would let it read a half-updated model (or a dict changing size under its iteration); a lock
would make PREDICT wait for the writer. The writer waits for the loop instead, for the few
microseconds a step takes. Learning stays in log order: the writer runs one event at a time and
applies it (on the loop) after appending it and before committing it, exactly as before, so a
PREDICT may see an event's step a moment before its commit, and sees it undone if the commit
fails. Without a daemon, `on_learner` calls in place (tests, `hpcpredict train`, tools).
One exception: the rebuild after a commit in doubt (`_rebuild`, rare) replays the log on the
writer into a *new* learner, which one assignment then puts in place of the old (a PREDICT reads
one or the other, whole); it reloads the correction policy there too, which the loop never reads
(the SLURM watcher's thread does).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import numpy as np
from sqlalchemy import Select, delete, func, select
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from hpcpredict.daemon.core import user_errors
from hpcpredict.daemon.core.feature_tokens import FeatureTokens
from hpcpredict.daemon.core.checkpoints import CheckpointError, load_checkpoint, state_from_npz, state_to_npz
from hpcpredict.daemon.core.readiness import DEFAULT_MIN_TRAINED_JOBS, Readiness, assess
from hpcpredict.daemon.core.staleness import HistoryAge, NewestEnd, age_at
from hpcpredict.daemon.core.events import (
    REQUEST_FIELDS,
    EventKind,
    dump_payload,
    idempotency_key,
    request_from_json,
    request_to_json,
)
from hpcpredict.daemon.core.learning import Applied, LearnRule, apply_event, observe_event
from hpcpredict.daemon.core.statements import (
    COUNT_CORRECTIONS,
    DELETE_CHECKPOINTS,
    ENDING_JOB,
    FIRST_PREDICTION,
    INSERT_CHECKPOINT,
    INSERT_CORRECTION,
    INSERT_EVENT,
    INSERT_JOB,
    INSERT_PREDICTION,
    SELECT_JOB,
    STALE_CHECKPOINTS,
    UPDATE_JOB,
)
from hpcpredict.daemon.core.store import (
    CheckpointRow,
    HistoryJudgementRow,
    JobRow,
    Store,
    job_values,
    now_wall_s,
    request_from_row,
)
from hpcpredict.job_events import Ended, JobEvent, LimitChanged, Started, Submitted
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.learn.baselines import clip_prediction
from hpcpredict.corrections.policies import CorrectionPolicy, IncrementalCorrection

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

DEFAULT_CHECKPOINT_EVERY = 1000  # events; a restart replays at most this many (~25 µs each)
DEFAULT_KEEP_CHECKPOINTS = 2  # the newest, and the one before for an operator to inspect


class UnknownJobError(LookupError):
    """An event for a job id the daemon never recorded, without the request needed to record it.

    The front end should answer with this message: the sender (the SLURM adapter) knows the
    job's user, processors and limit, and can resend the event with ``request=``.
    """


class ServiceBrokenError(RuntimeError):
    """The in-memory learner could not be rebuilt from the store after a failed event."""


class StoreDamagedError(RuntimeError):
    """The store's file is damaged (SQLite's quick_check, or a statement that met a malformed
    page): every event is refused until the database is restored and the daemon restarted."""


class StoreUnavailableError(RuntimeError):
    """The learner must be rebuilt from the store before the next event, and the store does not
    answer yet (the event is refused; the sender retries, and the next event tries again)."""


class ReplayError(RuntimeError):
    """A logged event cannot be applied again: the log itself is damaged."""


@dataclass(frozen=True, slots=True)
class EventOutcome:
    """What an event did. ``applied`` is False for a duplicate or a stale event (``note`` says
    which): nothing was stored and the learner did not change."""

    applied: bool
    note: str
    seq: int | None = None
    rule: LearnRule | None = None
    learned: bool = False


class _DuplicateEvent(Exception):
    """Raised inside a transaction when the log already holds the event's idempotency key."""


class _SubmitFirst(Exception):
    """Raised inside `ended`'s transaction, before it writes anything, for a job never seen
    whose end carries its mark's prediction: its submission is recorded first."""

    def __init__(self, request: JobRequest) -> None:
        super().__init__(request.job_id)
        self.request = request


class PredictionService:
    """Predictions at submission, learning at completion, with a store that survives restarts.

    Constructing the service restores the newest checkpoint and replays the events logged after
    it, so a service is always in step with its store (a fresh store gives a fresh learner).
    `open` also upgrades the schema first: what the daemon calls on start.

    `predictor_factory` builds an untrained learner with the site's hyperparameters (the daemon
    passes ``FeatureContext(0, site_time_zone)``, its times being Unix seconds); a checkpoint
    made with other hyperparameters is refused by `LearnedPredictor.load_state_dict`.
    """

    def __init__(
        self,
        store: Store,
        predictor_factory: Callable[[], LearnedPredictor] = LearnedPredictor,
        *,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
        min_trained_jobs: int = DEFAULT_MIN_TRAINED_JOBS,
        correction: CorrectionPolicy | None = None,
    ) -> None:
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1 event, got {checkpoint_every}")
        if keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {keep_checkpoints}")
        if min_trained_jobs < 0:
            raise ValueError(f"min_trained_jobs must be >= 0, got {min_trained_jobs}")
        self.store = store
        self.checkpoint_every = checkpoint_every
        self.keep_checkpoints = keep_checkpoints
        self.min_trained_jobs = min_trained_jobs
        self._factory = predictor_factory
        # The SLURM corrector's policy: it hears every start and end the learner does (SURVIVAL
        # keeps its users' runtimes from them), and its state is checkpointed with the learner's.
        self.correction: CorrectionPolicy = IncrementalCorrection() if correction is None else correction
        self._broken: BaseException | None = None
        # Why the store's file is known to be damaged (None: not known to be); set once, by
        # `mark_damaged`, from the writer's thread or the integrity watch's (integrity_watch.py).
        self.store_damage: str | None = None
        self._needs_rebuild = False  # a failed commit left the learner possibly ahead of the log
        self._touched = False
        self._undo: Callable[[], None] | None = None
        self._ingested_seq: int | None = None
        self.event_failures = 0  # events whose transaction failed, since start
        self.failing_events = 0  # ... in a row: 0 once an event commits again
        self.rebuilds = 0  # learner rebuilt from the store since start (after a commit in doubt)
        self._announced: tuple[object, ...] | None = None
        # Runs a function touching the learner where the learner lives (module doc); the daemon
        # replaces it with a call on its event loop.
        self.on_learner: Callable[[Callable[[], _T]], _T] = _call_here
        # The features of served predictions, until their jobs are reported (feature_tokens.py);
        # on the learner's thread, like the learner.
        self.feature_tokens = FeatureTokens()
        self._restore()

    @classmethod
    def open(cls, store: Store, *args: Any, **kwargs: Any) -> PredictionService:
        """Upgrade the store's schema, restore the last checkpoint, replay what follows it: the
        service `PredictionService(store, *args, **kwargs)` on an up-to-date store (the
        constructor's arguments, passed on as they are)."""
        store.upgrade()
        if user_errors.missing(store):
            logger.info("counting users' error totals of the jobs already judged")
            user_errors.rebuild(store)
        return cls(store, *args, **kwargs)

    # ------------------------------------------------------------------ state
    @property
    def last_event_seq(self) -> int:
        """Sequence number of the last event the learner includes (0: none)."""
        return self._last_seq

    @property
    def model_updates(self) -> int:
        """How many learning steps the model has taken (NAG's t)."""
        return int(self._predictor.nag.state.t)

    def history_age(self, now_s: float) -> HistoryAge:
        """How old the newest job the model learned is, at `now_s` (staleness.py says why).

        PREDICT asks this at every request: the newest end is kept event by event (`NewestEnd`),
        not searched for among every user.
        """
        return age_at(self._newest_end.end_s, now_s,
                      extrapolates=self._predictor.feature_scaling == "raw")

    def readiness(self, now_s: float) -> Readiness:
        """Whether predictions may be acted on now (readiness.py); a change is logged once."""
        readiness = assess(
            trained_jobs=self.model_updates,
            min_trained_jobs=self.min_trained_jobs,
            history=self.history_age(now_s),
        )
        if readiness.reasons != self._announced:
            self._announced = readiness.reasons
            log = logger.info if readiness.ready else logger.warning
            log("%s", readiness.describe())
        return readiness

    @property
    def healthy(self) -> bool:
        """False while events fail (the last one did) or the learner awaits a rebuild."""
        return (self.failing_events == 0 and not self._needs_rebuild and self._broken is None
                and self.store_damage is None)

    def mark_damaged(self, reason: str) -> None:
        """The store is damaged: unhealthy, and every later event refused (`StoreDamagedError`)
        so that nothing more is written into a damaged file; PREDICT answers from memory. Said
        once in the log."""
        if self.store_damage is not None:
            return
        self.store_damage = reason
        logger.error(
            "the store is damaged (%s): every event is refused from now on (jobcomp.lua spools "
            "completion reports; PREDICT answers from memory). Stop the daemon, restore the "
            "database from a backup (or move it aside for a new store) and start it again", reason)

    @property
    def replayed_events(self) -> int:
        """How many logged events the last restore replayed after its checkpoint."""
        return self._replayed

    def job_status(self, job_id: int) -> str | None:
        """How far the store has `job_id` ("submitted", "running", "ended"), None if unknown.

        Reads the store only (its own session), so another thread may call it: the SLURM
        watcher asks it once per job after a restart, instead of resending what is recorded.
        """
        with self.store.session() as session:
            return session.scalar(select(JobRow.status).where(JobRow.job_id == operator.index(job_id)))

    def state_dict(self) -> dict[str, np.ndarray]:
        """The learner's `state_dict()` (a copy) and the correction policy's state (under
        ``correction/``, empty for the pure policies): what checkpoints hold and tests compare."""
        state = self._predictor.state_dict()
        for key, value in self.correction.to_state().items():
            state[f"correction/{key}"] = value
        return state

    def _restore(self) -> None:
        """Learner = newest usable checkpoint + the events logged after it, applied in order."""
        last_logged = self.store.last_event_seq()
        predictor = None
        after_seq = 0
        restored_from = "an untrained model"
        correction_state: dict[str, np.ndarray] = {}
        unusable: list[tuple[int, int, str]] = []  # (id, last_event_seq, what was found)
        for checkpoint in self.store.checkpoints():
            try:
                predictor = load_checkpoint(checkpoint, self._factory, last_logged)
                state = state_from_npz(checkpoint.state_npz)
                correction_state = {key[len("correction/"):]: value for key, value in state.items()
                                    if key.startswith("correction/")}
            except CheckpointError as error:
                unusable.append((checkpoint.id, checkpoint.last_event_seq, str(error)))
                logger.error(
                    "the checkpoint at event %d (id %d) is unusable: %s", checkpoint.last_event_seq,
                    checkpoint.id, error,
                )
                continue
            after_seq = checkpoint.last_event_seq
            restored_from = f"the checkpoint at event {after_seq}"
            break
        if predictor is None:
            predictor = self._factory()
            if unusable:
                self._warn_untrained_restart(last_logged)
        self.correction.load_state(correction_state)
        replayed = 0
        last_seq = after_seq
        for stored in self.store.events_after(after_seq):
            try:
                kind = EventKind(stored.kind)
                observe_event(self.correction, kind, stored.payload,
                              apply_event(predictor, kind, stored.payload))
            except (KeyError, TypeError, ValueError) as error:
                raise ReplayError(
                    f"event {stored.seq} of the log ({stored.kind}, job {stored.job_id}) cannot be "
                    f"replayed ({type(error).__name__}: {error}): the event log is damaged. Restore "
                    "the database from a backup (the log is the model's source of truth: the "
                    "daemon does not skip an event)"
                ) from None
            replayed += 1
            last_seq = stored.seq
        self._predictor = predictor
        self._newest_end = NewestEnd(predictor.features)  # with its learner, one assignment later
        self._checkpoint_seq = after_seq
        self._last_seq = last_seq
        self._replayed = replayed
        self._since_checkpoint = replayed
        if unusable:
            # Removed, not kept: one claiming events beyond the log would be taken as valid once
            # the log grows past it, and the next checkpoint may need its sequence number.
            self.store.delete_checkpoints([checkpoint_id for checkpoint_id, _, _ in unusable])
            logger.warning(
                "restored from %s and replayed the %d events logged after it; removed the "
                "unusable checkpoint(s) at event %s",
                restored_from, replayed, ", ".join(str(seq) for _, seq, _ in unusable),
            )
        elif replayed:
            logger.info("restored checkpoint at event %d, replayed %d events", after_seq, replayed)

    def _warn_untrained_restart(self, last_logged: int) -> None:
        """No usable checkpoint: the whole log is replayed from an untrained model, which is the
        model exactly unless `train` had bootstrapped it (its checkpoint was the start)."""
        with self.store.session() as session:
            trained_history = session.scalar(select(func.count()).select_from(HistoryJudgementRow))
        if trained_history:
            logger.error(
                "no usable checkpoint: replaying the whole event log (%d events) from an untrained "
                "model; the history `hpcpredict train` taught this model (%s jobs) is not in it%s",
                last_logged, f"{trained_history:,}",
                "" if last_logged else " (stop the daemon and run `hpcpredict train --replace "
                "HISTORY.swf` again)",
            )
        else:
            logger.warning(
                "no usable checkpoint: replaying the whole event log (%d events) from an untrained "
                "model, which gives the same model", last_logged,
            )

    # ------------------------------------------------------------------ the four events
    def peek(self, job: JobRequest, now_s: int) -> int:
        """The prediction `submitted` would give now, recording nothing (no event, no row).

        What SLURM's ``job_submit`` plugin asks: the job has no id yet. The submission is
        recorded when the job is reported with its id (`submitted` with ``given_prediction_s``).
        While the model is not ready (`readiness`), the answer is the request. Answered from
        memory: a learner waiting for a rebuild after a commit in doubt still answers.
        """
        if self._broken is not None:
            self._check_usable()
        job = _whole_request(job)
        if not self.readiness(now_s).ready:
            return job.requested_s  # readiness.py: never act on a model that is not ready
        return clip_prediction(self._predictor.peek(job, operator.index(now_s)), job.requested_s)

    def serve(self, job: JobRequest, now_s: int, *, readiness: Readiness | None = None) -> tuple[int, str]:
        """`peek`, and the token under which the features it used are kept for the job's
        submission (`submitted`'s `feature_token`): PREDICT's answer, for SLURM's plugin.

        `readiness`: the caller's `readiness(now_s)`, when it has one already (PREDICT answers
        with it too): not assessed twice per request."""
        if self._broken is not None:
            self._check_usable()
        job = _whole_request(job)
        ready = (self.readiness(now_s) if readiness is None else readiness).ready
        model_s, features = self._predictor.peek_features(job, operator.index(now_s))
        token = self.feature_tokens.issue(job, features)
        # readiness.py: never act on a model that is not ready (its features are kept all the same)
        return (clip_prediction(model_s, job.requested_s) if ready else job.requested_s), token

    @overload
    def record(self, event: Submitted) -> int: ...

    @overload
    def record(self, event: Started | Ended | LimitChanged) -> EventOutcome: ...

    def record(self, event: JobEvent) -> int | EventOutcome:
        """Record one typed event (hpcpredict/job_events.py), whichever front built it: the
        prediction for `Submitted`, the outcome for the others."""
        if isinstance(event, Submitted):
            return self.submitted(event.request, event.request.submit_s,
                                  given_prediction_s=event.given_prediction_s, limit_s=event.limit_s,
                                  feature_token=event.feature_token)
        if isinstance(event, Started):
            return self.started(event.job_id, event.start_s, request=event.request)
        if isinstance(event, Ended):
            return self.ended(event.job_id, event.run_s, event.end_s, event.final_state,
                              event.killed_at_lowered_limit, request=event.request,
                              given_prediction_s=event.given_prediction_s,
                              feature_token=event.feature_token)
        if isinstance(event, LimitChanged):
            return self.limit_changed(event.job_id, event.new_limit_s, event.at_s)
        raise TypeError(f"not a job event: {event!r}")

    def submitted(
        self,
        job: JobRequest,
        now_s: int,
        *,
        given_prediction_s: int | None = None,
        limit_s: int | None = None,
        feature_token: str | None = None,
    ) -> int:
        """The prediction for `job`, in whole seconds in [1, job.requested_s].

        `given_prediction_s` is the prediction the scheduler already acted on, when it was
        served before the job had an id (`peek`): it is the one recorded and returned, while
        the learner observes the submission as usual (its features, kept for learning at the
        end, are the same either way). `limit_s` is the time limit the scheduler set (the
        plugin's lowered limit), when it differs from the request: later corrections start
        from it.

        Asking again for a job already recorded logs nothing and counts nothing twice: a job the
        learner still holds is predicted again from its features as first submitted (with
        today's weights); a job that has ended gets its first prediction back; a job first
        seen at its start (no prediction on record) gets its request.

        `feature_token`: the token `serve` answered with when the prediction was served; the
        features kept under it (if they were for this request) are logged with the event and
        learned from, instead of features computed now (feature_tokens.py).
        """
        job = _whole_request(job)
        now_s = operator.index(now_s)
        if given_prediction_s is not None:
            given_prediction_s = clip_prediction(
                operator.index(given_prediction_s), job.requested_s
            )
        try:
            with self._transaction() as connection:
                row = connection.execute(SELECT_JOB, {"job_id": job.job_id}).first()
                if row is not None:
                    return self._repeat_prediction(connection, row, job, now_s)
                payload: dict[str, Any] = {"job": request_to_json(job), "now_s": now_s}
                if feature_token is not None:
                    features = self.on_learner(lambda: self.feature_tokens.features_for(feature_token, job))
                    if features is not None:
                        payload["features"] = [float(value) for value in features]
                seq, applied = self._ingest(
                    connection, EventKind.SUBMITTED, job.job_id, payload, now_s
                )
                values = job_values(job, status="submitted", observed=True)
                if limit_s is not None and limit_s != job.requested_s:
                    values["limit_s"] = operator.index(limit_s)
                connection.execute(INSERT_JOB, values)  # the job before its prediction (foreign key)
                assert applied.prediction_s is not None
                prediction_s = (
                    applied.prediction_s if given_prediction_s is None else given_prediction_s
                )
                self._record_prediction(connection, job.job_id, prediction_s, now_s)
                self._after_event(connection, seq)
        except _DuplicateEvent:  # logged but no job row: only if someone deleted it by hand
            return job.requested_s
        self._committed(seq)
        return prediction_s

    def started(
        self, job_id: int, now_s: int, *, request: JobRequest | None = None
    ) -> EventOutcome:
        """A job began running (the learner's running-jobs features need it).

        A job the daemon never saw is recorded from `request` (without one: `UnknownJobError`);
        its submission features are then approximated at its end (the learner's
        ``learn_unseen``). A second start, or a start after the end, changes nothing.
        """
        job_id = operator.index(job_id)
        now_s = operator.index(now_s)
        try:
            with self._transaction() as connection:
                row, new = self._job_or_new(connection, job_id, request, "started")
                if new is None:
                    if row.status == "running":
                        return EventOutcome(False, f"job {job_id} already started: ignored")
                    if row.status == "ended":
                        return EventOutcome(False, f"job {job_id} already ended: start ignored")
                    request = request_from_row(row)
                else:
                    request = new
                payload = {"job": request_to_json(request), "now_s": now_s}
                seq, _ = self._ingest(connection, EventKind.STARTED, job_id, payload, now_s)
                self._write_job(connection, job_id, new, status="running", start_s=now_s)
                self._after_event(connection, seq)
        except _DuplicateEvent:
            return EventOutcome(False, f"job {job_id}: start already logged")
        self._committed(seq)
        return EventOutcome(True, "started", seq)

    def ended(
        self,
        job_id: int,
        run_s: int,
        end_s: int,
        final_state: str,
        killed_at_lowered_limit: bool = False,
        *,
        request: JobRequest | None = None,
        given_prediction_s: int | None = None,
        feature_token: str | None = None,
    ) -> EventOutcome:
        """A job ended after `run_s` seconds: learn from it, exactly once.

        `final_state` is the scheduler's word for the end (SLURM: COMPLETED, TIMEOUT, ...);
        `killed_at_lowered_limit` says the job was killed at a time limit hpcpredict had lowered
        below the request: its runtime is then only a lower bound, and
        `hpcpredict.daemon.core.learning` decides whether it is trained on (the outcome's ``rule``
        says which rule applied, ``learned`` whether the learner took a step). A second `ended`
        for the same job is a no-op and says so. A job never seen is recorded from `request`
        (without one: `UnknownJobError`) and learned through the learner's ``learn_unseen``,
        unless the end carries what the plugin's mark says of its prediction
        (`given_prediction_s`, `feature_token`): its submission is then recorded first from
        them, as SUBMIT would have (`submitted`), so that it learns from the features its
        prediction was computed from and its first prediction is the one SLURM acted on. The
        end's transaction finds the job unknown before writing anything (`_SubmitFirst`), so an
        end of a known job reads nothing more; then the submission and the end commit each in
        its own transaction: if the end's fails, the job is left submitted and the end, sent
        again (jobcomp.lua spools it), finds it.
        """
        job_id = operator.index(job_id)
        run_s = operator.index(run_s)
        end_s = operator.index(end_s)
        try:
            with self._transaction() as connection:
                row, new = self._job_or_new(connection, job_id, request, "ended", ENDING_JOB)
                if new is not None and (feature_token is not None or given_prediction_s is not None):
                    raise _SubmitFirst(new)  # nothing written yet: the transaction rolls back
                if new is None and row.status == "ended":
                    return EventOutcome(
                        False,
                        f"job {job_id} already ended: not learned twice",
                        rule=None if row.learn_rule is None else LearnRule(row.learn_rule),
                        learned=bool(row.learned),
                    )
                job = request_from_row(row) if new is None else new
                first_prediction_s = None if new is not None else row.first_prediction_s
                payload = {
                    "job": request_to_json(job),
                    "run_s": run_s,
                    "end_s": end_s,
                    "final_state": final_state,
                    "killed_at_lowered_limit": bool(killed_at_lowered_limit),
                    "observed": new is None and bool(row.observed),
                    "first_prediction_s": first_prediction_s,
                }
                seq, applied = self._ingest(connection, EventKind.ENDED, job_id, payload, end_s)
                self._write_job(
                    connection, job_id, new,
                    status="ended",
                    end_s=end_s,
                    run_s=run_s,
                    final_state=final_state,
                    killed_at_lowered_limit=bool(killed_at_lowered_limit),
                    learned=applied.learned,
                    learn_rule=None if applied.rule is None else applied.rule.value,
                )
                user_errors.count_ended_job(connection, job, run_s, end_s, first_prediction_s,
                                            0 if new is not None else row.corrections)
                self._after_event(connection, seq)
        except _DuplicateEvent:
            return EventOutcome(False, f"job {job_id}: end already logged, not learned twice")
        except _SubmitFirst as never_seen:
            self.submitted(never_seen.request, never_seen.request.submit_s,
                           given_prediction_s=given_prediction_s, feature_token=feature_token)
            return self.ended(job_id, run_s, end_s, final_state, killed_at_lowered_limit, request=request)
        self._committed(seq)
        return EventOutcome(True, "ended", seq, applied.rule, applied.learned)

    def limit_changed(self, job_id: int, new_limit_s: int, now_s: int) -> EventOutcome:
        """A job's time limit was set to `new_limit_s` (the corrector raised it, or an admin).

        Recorded as a correction; the learner does not read limits, but the log keeps the
        event so that the store's history is complete. Setting the limit it already has, or
        changing the limit of a job that has ended, changes nothing.
        """
        job_id = operator.index(job_id)
        new_limit_s = operator.index(new_limit_s)
        now_s = operator.index(now_s)
        try:
            with self._transaction() as connection:
                row, _ = self._job_or_new(connection, job_id, None, "limit_changed")
                if row.status == "ended":
                    return EventOutcome(False, f"job {job_id} already ended: limit change ignored")
                old_limit_s = row.requested_s if row.limit_s is None else row.limit_s
                if new_limit_s == old_limit_s:
                    return EventOutcome(False, f"job {job_id} already has limit {new_limit_s} s")
                payload = {
                    "job": request_to_json(request_from_row(row)),
                    "old_limit_s": old_limit_s,
                    "new_limit_s": new_limit_s,
                    "now_s": now_s,
                    # which change of this job's limit: the starvation guard may set a pending
                    # job's limit back to a value it had (events.idempotency_key)
                    "change": connection.execute(COUNT_CORRECTIONS, {"job_id": job_id}).scalar(),
                }
                seq, _ = self._ingest(connection, EventKind.LIMIT_CHANGED, job_id, payload, now_s)
                connection.execute(INSERT_CORRECTION, {
                    "job_id": job_id,
                    "old_limit_s": old_limit_s,
                    "new_limit_s": new_limit_s,
                    "changed_at_s": now_s,
                    "event_seq": seq,
                })
                connection.execute(UPDATE_JOB, {"key": job_id, "limit_s": new_limit_s})
                self._after_event(connection, seq)
        except _DuplicateEvent:
            return EventOutcome(False, f"job {job_id}: limit {new_limit_s} s already logged")
        self._committed(seq)
        return EventOutcome(True, "limit changed", seq)

    # ------------------------------------------------------------------ bootstrap
    def bootstrap(self, predictor: LearnedPredictor, *, replace: bool = False) -> None:
        """Start the daemon's model from `predictor` (warmed on a history: ``hpcpredict train``).

        Stored as the checkpoint "before event 1". Allowed only while no event has been logged:
        after that, the model is the log's, and replacing it would silently drop what the log
        taught (or, replayed on top, teach those jobs twice). A store that already holds a
        bootstrap checkpoint is refused unless `replace`. The predictor must have the
        hyperparameters of this service's factory (the daemon rebuilds it with them).
        """
        self._check_usable()
        if self.store.last_event_seq() > 0:
            raise ValueError(
                "the store already holds live events (the last is number "
                f"{self.store.last_event_seq()}); a history "
                "can only bootstrap a daemon that has not learned anything live yet "
                "(use a new database)"
            )
        if self.store.latest_checkpoint() is not None and not replace:
            raise ValueError("the store already holds a bootstrapped model (replace it with --replace)")
        state = predictor.state_dict()
        self._factory().load_state_dict(state)  # refuses other hyperparameters, before writing
        with self.store.session() as session, session.begin():
            session.execute(delete(CheckpointRow))
            session.add(
                CheckpointRow(
                    created_at_s=now_wall_s(), last_event_seq=0, state_npz=state_to_npz(state)
                )
            )
        self._restore()

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> int | None:
        """Checkpoint now (a clean shutdown); the event sequence number included, or None when
        the newest checkpoint already includes every event."""
        self._check_usable()
        if self._last_seq == self._checkpoint_seq:
            return None
        with self.store.engine.begin() as connection:
            self._write_checkpoint(connection, self._last_seq)
        self._checkpoint_seq = self._last_seq
        self._since_checkpoint = 0
        return self._last_seq

    def close(self, *, checkpoint: bool = True) -> None:
        """Checkpoint (unless told not to) so that the next start replays nothing. A learner that
        awaits a rebuild is not checkpointed: the next start replays the log instead."""
        if checkpoint and self._broken is None and not self._needs_rebuild and self.store_damage is None:
            self.checkpoint()

    def _after_event(self, connection: Connection, seq: int) -> None:
        """Inside the event's transaction: checkpoint if this event completes a period."""
        if self._since_checkpoint + 1 >= self.checkpoint_every:
            self._write_checkpoint(connection, seq)

    def _committed(self, seq: int) -> None:
        """After the commit: the counters follow what is now durable."""
        self._last_seq = seq
        self.failing_events = 0
        if self._since_checkpoint + 1 >= self.checkpoint_every:
            self._checkpoint_seq = seq
            self._since_checkpoint = 0
        else:
            self._since_checkpoint += 1

    def _write_checkpoint(self, connection: Connection, seq: int) -> None:
        connection.execute(INSERT_CHECKPOINT, {
            "created_at_s": now_wall_s(),
            "last_event_seq": seq,
            "state_npz": state_to_npz(self.on_learner(self.state_dict)),  # a copy, then compressed here
        })
        # The bootstrap checkpoint (event 0, `train`'s) is never pruned: with the log it is the
        # whole model, the start of a full replay when every later checkpoint is unusable.
        stale_ids = list(connection.execute(STALE_CHECKPOINTS, {"keep": self.keep_checkpoints}).scalars())
        if stale_ids:
            connection.execute(DELETE_CHECKPOINTS, {"ids": stale_ids})

    # ------------------------------------------------------------------ helpers
    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One event's transaction. If it fails after the learner was touched, the learner is put
        back as it was (module doc): it always equals checkpoint + logged events."""
        self._check_usable()
        self._touched = False
        self._undo = None
        self._ingested_seq = None
        committing = False
        connection = self.store.engine.connect()
        try:
            with connection.begin():
                yield connection
                committing = True  # the body is done: what fails now is the commit itself
        except BaseException as error:
            if self._touched or isinstance(error, SQLAlchemyError):
                self.event_failures += 1
                self.failing_events += 1
            if self._touched:
                if committing:
                    self._after_failed_commit()
                else:
                    self._put_learner_back()
            damage = store_damage(error)
            if damage is not None:
                self.mark_damaged(damage)
                self._check_usable()  # raises StoreDamagedError: the answer says what happened
            raise
        finally:
            connection.close()

    def _put_learner_back(self) -> None:
        assert self._undo is not None
        self.on_learner(self._undo)
        self._undo = None

    def _after_failed_commit(self) -> None:
        """A commit that raised may still have happened (PostgreSQL: the connection broke after
        the server committed): the log says which."""
        seq = self._ingested_seq
        try:
            committed = seq is not None and self.store.has_event(seq)
        except SQLAlchemyError as error:
            logger.error("cannot tell whether event %s was committed (%s): the learner will be "
                         "rebuilt from the store before the next event", seq, type(error).__name__)
            self._needs_rebuild = True
            return
        if committed:
            assert seq is not None
            logger.warning("event %d was committed although its commit reported an error", seq)
            self._committed(seq)
        else:
            self._put_learner_back()

    def _check_usable(self) -> None:
        if self.store_damage is not None:
            raise StoreDamagedError(
                f"the store is damaged ({self.store_damage}): events are refused; restore the "
                "database from a backup and restart the daemon")
        if self._broken is not None:
            raise ServiceBrokenError(
                "the learner could not be rebuilt from the store after a failed event; restart "
                "the daemon (its log says why)"
            )
        if self._needs_rebuild:
            self._rebuild()

    def _rebuild(self) -> None:
        """The learner from the store, after a commit in doubt. While the store does not answer,
        the event is refused and the next one tries again; damage makes the service broken."""
        try:
            self._restore()
        except DBAPIError as error:
            logger.error("the store does not answer yet (%s): cannot rebuild the learner", type(error).__name__)
            raise StoreUnavailableError(
                "the store does not answer: the daemon cannot record events yet"
            ) from error
        except Exception as error:  # noqa: BLE001 - any other failure: refuse to serve, say why
            self._broken = error
            logger.error("cannot rebuild the learner from the store: %s", error)
            raise ServiceBrokenError(
                "the learner could not be rebuilt from the store; restart the daemon (its log says why)"
            ) from error
        self._needs_rebuild = False
        self.rebuilds += 1
        logger.info("learner rebuilt from the store (event %d)", self._last_seq)

    def _ingest(
        self,
        connection: Connection,
        kind: EventKind,
        job_id: int,
        payload: dict[str, Any],
        occurred_at_s: int,
    ) -> tuple[int, Applied]:
        """Append the event (write-ahead), then apply it to the learner."""
        row = {
            "kind": kind.value,
            "job_id": job_id,
            "payload_json": dump_payload(payload),
            "occurred_at_s": occurred_at_s,
            "recorded_at_s": now_wall_s(),
            "idempotency_key": idempotency_key(
                kind, job_id, payload.get("new_limit_s"), payload.get("change", 0)
            ),
        }
        try:
            seq = connection.execute(INSERT_EVENT, row).inserted_primary_key[0]
        except IntegrityError as error:
            # The unique key, not a lookup first: it also holds against a second writer. Only
            # that key means "sent before"; any other refusal is a failure the sender must see
            # (taken for a duplicate, the event would be answered as done and never resent).
            if "idempotency_key" not in str(error.orig):
                raise
            raise _DuplicateEvent() from error
        self._ingested_seq = seq

        def learn() -> Applied:  # on the learner's thread (module doc)
            request = request_from_json(payload["job"])
            user_id = request.user_id
            put_back = self._predictor.savepoint(request)
            newest_end, saved_newest_end = self._newest_end, self._newest_end.saved()

            def undo() -> None:
                put_back()
                newest_end.restore(saved_newest_end)

            self._undo = undo
            self._touched = True
            applied = apply_event(self._predictor, kind, payload)
            if kind is EventKind.ENDED:
                newest_end.user_ended(user_id)
            observe_event(self.correction, kind, payload, applied)
            return applied

        return seq, self.on_learner(learn)

    def _job_or_new(
        self, connection: Connection, job_id: int, request: JobRequest | None, event: str,
        statement: Select[Any] = SELECT_JOB,
    ) -> tuple[Row[Any], None] | tuple[None, JobRequest]:
        """(the job's row, by `statement`), or (None, `request`) for a job not recorded yet (its
        row is inserted by `_write_job`)."""
        row = connection.execute(statement, {"job_id": job_id}).first()
        if row is not None:
            return row, None
        if request is None:
            raise UnknownJobError(
                f"{event} for job {job_id}, which was never submitted to hpcpredict: "
                "resend it with the job's request to record it"
            )
        request = _whole_request(request)
        if request.job_id != job_id:
            raise ValueError(f"{event} for job {job_id} with the request of job {request.job_id}")
        return None, request

    @staticmethod
    def _write_job(connection: Connection, job_id: int, new: JobRequest | None, **columns: Any) -> None:
        """Set `columns` of the job's row; insert the row of a job first seen now (`new`)."""
        if new is None:
            connection.execute(UPDATE_JOB, {"key": job_id, **columns})
        else:
            connection.execute(INSERT_JOB, {**job_values(new, status="submitted", observed=False), **columns})

    def _repeat_prediction(self, connection: Connection, row: Row[Any], job: JobRequest, now_s: int) -> int:
        if row.observed and row.status != "ended":
            # Read-only for a job the learner holds (LearnedPredictor.predict): not an event.
            request = request_from_row(row)
            prediction_s = clip_prediction(
                self.on_learner(lambda: self._predictor.predict(request, now_s)), job.requested_s
            )
            self._record_prediction(connection, row.job_id, prediction_s, now_s)
            return prediction_s
        first = _first_prediction(connection, row.job_id)
        return clip_prediction(row.requested_s if first is None else first, job.requested_s)

    def _record_prediction(
        self, connection: Connection, job_id: int, prediction_s: int, now_s: int
    ) -> None:
        connection.execute(INSERT_PREDICTION, {
            "job_id": job_id,
            "predicted_s": prediction_s,
            "predicted_at_s": now_s,
            "model_t": int(self._predictor.nag.state.t),
        })


def _call_here(function: Callable[[], _T]) -> _T:
    """`PredictionService.on_learner` without a daemon: the caller's thread owns the learner."""
    return function()


def _first_prediction(connection: Connection, job_id: int) -> int | None:
    """The prediction given at submission (what the scheduler acted on)."""
    return connection.execute(FIRST_PREDICTION, {"job_id": job_id}).scalar()


def _whole_request(request: JobRequest) -> JobRequest:
    """`request` with plain Python ints (numpy ints do not go into JSON or every driver); itself
    when it has them already (every request the protocol parses: PREDICT's path)."""
    values = [getattr(request, name) for name in REQUEST_FIELDS]
    if all(type(value) is int for value in values):
        return request
    return JobRequest(*map(operator.index, values))


# SQLite's result codes for a damaged file (the primary code: the low byte of an extended one).
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def store_damage(error: BaseException) -> str | None:
    """What a failed statement says of damage to the store's file ("database disk image is
    malformed", "file is not a database"), or None for any other failure (a full disk, a lost
    connection: not damage)."""
    orig = getattr(error, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return f"SQLite: {orig}"
    if code is None and any(words in str(orig) for words in ("disk image is malformed", "not a database")):
        return f"SQLite: {orig}"  # a Python before 3.11 gives no sqlite_errorcode
    return None
