"""What one event of the daemon's log holds, and the key that makes it idempotent.

An event's payload carries everything needed to apply it to the learner again — the job's full
request included, even for ``started`` and ``ended`` — so that a replay reads the event log and
the checkpoint only, never the ``jobs`` table. That table holds the *latest* state of each job
(a job replayed from its submission is already "ended" there); the log holds the state each
event saw. Facts the service looked up when the event arrived (did the learner see the
submission? which prediction was given?) are written into the payload for the same reason.

JSON keeps integers exact and Python floats round-trip exactly through ``repr``, so what is
replayed is bit for bit what was applied.
"""

from __future__ import annotations

import json
from dataclasses import fields
from enum import StrEnum
from typing import Any

from hpcpredict.jobs import JobRequest


class EventKind(StrEnum):
    SUBMITTED = "submitted"
    STARTED = "started"
    ENDED = "ended"
    LIMIT_CHANGED = "limit_changed"


def idempotency_key(
    kind: EventKind, job_id: int, new_limit_s: int | None = None, change: int = 0
) -> str:
    """The key under which an event is stored once.

    A job is submitted, starts and ends once: its id and the kind identify the event (a second
    ``ended`` for a job is the same event resent, and must not train twice). A limit is set
    absolutely (``scontrol update TimeLimit=...``), and may return to a value it had
    (the starvation guard gives a pending job its request, then its lowered limit again): a
    limit change is the job's `change`-th (0-based) to `new_limit_s`. A resent change finds the
    job at that limit already and is refused before any key is made. SLURM recycles job ids only
    after MaxJobId (67,043,328 by default) jobs: a site that wraps around must purge old jobs
    first.
    """
    if kind is EventKind.LIMIT_CHANGED:
        if new_limit_s is None:
            raise ValueError("a limit_changed event needs its new limit")
        return f"{kind.value}:{job_id}:{change}:{new_limit_s}"
    return f"{kind.value}:{job_id}"


# JobRequest's fields, read once: `dataclasses.asdict` would find them and deep-copy every value
# (a recursive walk) at each event, for a flat record of ints.
REQUEST_FIELDS: tuple[str, ...] = tuple(field.name for field in fields(JobRequest))


def request_to_json(request: JobRequest) -> dict[str, int]:
    """The request as the event payload's ``job`` object (`dataclasses.asdict`'s result)."""
    return {name: getattr(request, name) for name in REQUEST_FIELDS}


def request_from_json(data: dict[str, Any]) -> JobRequest:
    return JobRequest(**data)


def dump_payload(payload: dict[str, Any]) -> str:
    """Canonical JSON (sorted keys, no spaces): equal payloads give equal text."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
