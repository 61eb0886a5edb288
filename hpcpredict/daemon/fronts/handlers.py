"""What each protocol verb does to the `PredictionService`: shared by the socket and HTTP fronts.

Every answer is built here, errors included, so that whatever arrives — garbage, a huge line, an
unknown user, a missing field, an event for a job never seen — the front end writes one answer
line and goes on serving. Only `ServiceBrokenError` (the learner could not be rebuilt from the
store) makes the service refuse work; it answers ``unavailable`` until restarted.

A failure nobody planned for (a bug, a database error) is answered ``ERR internal`` with a short
error id and nothing else: the exception's text may hold SQL and its parameters, other users'
values included. The traceback goes to the daemon's log under that id.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from hpcpredict.daemon.views.metrics import ServiceCounters
from hpcpredict.daemon.fronts.protocol import (
    PROTOCOL_VERSION,
    ProtocolError,
    Request,
    format_error,
    ended_event,
    format_ok,
    job_request,
    lacks_time_limit,
    limit_event,
    parse_request,
    started_event,
    submitted_event,
)
from hpcpredict.daemon.core.service import (
    PredictionService,
    ServiceBrokenError,
    StoreDamagedError,
    StoreUnavailableError,
    UnknownJobError,
)

logger = logging.getLogger(__name__)

ANONYMOUS_JOB_ID = -1  # PREDICT: SLURM has not numbered the job yet
# The verbs that write to the store: run by the daemon's store writer, never on its event loop.
EVENT_VERBS = frozenset({"SUBMIT", "START", "END", "LIMIT"})


class Handlers:
    """Verb -> service call; `clock` gives Unix seconds (injectable for replayed streams)."""

    def __init__(
        self,
        service: PredictionService,
        *,
        metrics: ServiceCounters | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.service = service
        self.metrics = ServiceCounters() if metrics is None else metrics
        self.clock = clock
        # Why the plugin must not lower limits now (None: it may), asked at every PREDICT: the
        # daemon points it at the SLURM watcher's starvation guard.
        self.lowering_hold: Callable[[], str | None] = lambda: None
        # The shortest limit a job may be lowered to (the watcher's `least_lowered_s`; 0: any).
        self.least_lowered_s: Callable[[], int] = lambda: 0
        self._verbs: dict[str, Callable[[Mapping[str, Any]], dict[str, object]]] = {
            "PING": self.ping,
            "PREDICT": self.predict,
            "SUBMIT": self.submit,
            "START": self.start,
            "END": self.end,
            "LIMIT": self.limit,
        }

    # ------------------------------------------------------------------ front doors
    def handle_line(self, line: bytes) -> bytes:
        """One request line (no newline) -> one answer line, all on the calling thread; never
        raises. The daemon splits this in two (`parse`, then `answer` on the loop or the store
        writer: server.py); tools and tests without a daemon use it whole."""
        began = time.perf_counter()
        request = self.parse(line)
        if isinstance(request, bytes):
            return request
        answer, outcome = self.answer(request)
        self.metrics.observe(request.verb, outcome, time.perf_counter() - began)
        return answer

    def parse(self, line: bytes) -> Request | bytes:
        """The request on `line`, or the answer refusing it (counted in the metrics)."""
        try:
            return parse_request(line)
        except ProtocolError as error:
            answer, outcome = format_error(error.code, str(error)), error.code
        except Exception:  # noqa: BLE001 - a parser bug must not cost the connection
            answer = format_error("internal", internal_error(f"parsing {line[:200]!r}"))
            outcome = "internal"
        self.metrics.observe("?", outcome, 0.0)
        return answer

    def answer(self, request: Request) -> tuple[bytes, str]:
        """The answer line to a parsed request and its outcome for the metrics ("ok" or the
        error's code); never raises. Counts nothing itself: the daemon runs events on its store
        writer, and the metrics are updated on the loop only."""
        try:
            return format_ok(self.call(request)), "ok"
        except ProtocolError as error:
            return format_error(error.code, str(error)), error.code
        except Exception:  # noqa: BLE001 - an answer that cannot be formatted: a bug, logged
            return format_error("internal", internal_error(f"answering {request.verb}")), "internal"

    def call(self, request: Request) -> dict[str, object]:
        """Run a parsed request; every failure becomes a `ProtocolError` with a clear code."""
        try:
            return self._verbs[request.verb](request.fields)
        except ProtocolError:
            raise
        except UnknownJobError as error:
            raise ProtocolError("unknown_job", str(error)) from error
        except StoreDamagedError as error:
            raise ProtocolError("store_damaged", str(error)) from error
        except (ServiceBrokenError, StoreUnavailableError) as error:
            raise ProtocolError("unavailable", str(error)) from error
        except (ValueError, TypeError, OverflowError) as error:
            raise ProtocolError("bad_request", str(error)) from error
        except Exception as error:  # noqa: BLE001 - the daemon must outlive any one request
            raise ProtocolError("internal", internal_error(request.verb)) from error

    # ------------------------------------------------------------------ verbs
    def ping(self, fields: Mapping[str, Any]) -> dict[str, object]:
        readiness = self.service.readiness(self._now())
        age = readiness.history
        return {
            "version": PROTOCOL_VERSION,
            "model_t": self.service.model_updates,
            "last_event": self.service.last_event_seq,
            "history_age_d": -1 if age.age_days is None else age.age_days,
            "stale": int(age.stale),  # the history is old, or empty (staleness.py)
            "ready": readiness.ready,  # 0: PREDICT answers the request (readiness.py)
            "reason": readiness.reason_text or None,
            "trained_jobs": readiness.trained_jobs,
            "min_trained_jobs": readiness.min_trained_jobs,
            "lower": int(self.lowering_hold() is None),
            "healthy": self.service.healthy,  # 0: events fail (the last one did)
            "failing_events": self.service.failing_events,
        }

    def predict(self, fields: Mapping[str, Any]) -> dict[str, object]:
        now_s = self._now()
        job = job_request(fields, job_id=ANONYMOUS_JOB_ID, now_s=now_s)
        readiness = self.service.readiness(now_s)
        prediction_s, token = self.service.serve(job, now_s, readiness=readiness)
        least_s = self.least_lowered_s()
        floored = readiness.ready and prediction_s < least_s
        if floored:  # a large queue's watcher sees a new job only at its next full look
            prediction_s = min(least_s, job.requested_s)  # (a request below the floor: kept)
        answer: dict[str, object] = {
            "prediction": prediction_s,  # the request while not ready
            "time_limit": job.requested_s,
            "ready": readiness.ready,
            # the plugin keeps it in the job's mark: SUBMIT token=... learns from these features
            "token": token,
        }
        if floored:
            answer["least_s"] = least_s
        if not readiness.ready:
            answer["reason"] = readiness.reason_text
            self.metrics.fallbacks[readiness.reason_text] += 1
        hold = self.lowering_hold()
        if hold is not None:  # the plugin keeps the request; the mark lets the watcher lower later
            answer.update(lower=0, hold=hold)
        return answer

    def submit(self, fields: Mapping[str, Any]) -> dict[str, object]:
        return {"prediction": self.service.record(submitted_event(fields, now_s=self._now()))}

    def start(self, fields: Mapping[str, Any]) -> dict[str, object]:
        try:
            outcome = self.service.record(started_event(fields, now_s=self._now()))
        except UnknownJobError:
            if not lacks_time_limit(fields):
                raise
            return {"applied": False, "note": _no_time_limit_note(fields)}
        return {"applied": outcome.applied, "note": outcome.note}

    def end(self, fields: Mapping[str, Any]) -> dict[str, object]:
        try:
            outcome = self.service.record(ended_event(fields, now_s=self._now()))
        except UnknownJobError:
            if not lacks_time_limit(fields):
                raise
            # acknowledged, so jobcomp.lua neither spools nor logs it as refused
            return {"applied": False, "learned": False, "rule": "", "note": _no_time_limit_note(fields)}
        return {
            "applied": outcome.applied,
            "learned": outcome.learned,
            "rule": "" if outcome.rule is None else outcome.rule.value,
            "note": outcome.note,
        }

    def limit(self, fields: Mapping[str, Any]) -> dict[str, object]:
        outcome = self.service.record(limit_event(fields, now_s=self._now()))
        return {"applied": outcome.applied, "note": outcome.note}

    # ------------------------------------------------------------------ helpers
    def _now(self) -> int:
        return int(self.clock())


def _no_time_limit_note(fields: Mapping[str, Any]) -> str:
    return f"job {fields.get('job')} has no time limit: not recorded (hpcpredict describes a job by its request)"


def internal_error(context: str) -> str:
    """Log the exception being handled under a short new id; the message to answer with."""
    error_id = secrets.token_hex(4)
    logger.exception("internal error %s (%s)", error_id, context)
    return f"error id {error_id}; details in the daemon's log"
