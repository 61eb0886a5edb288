"""The daemon's event records (hpcpredict/daemon/core/events.py): the idempotency keys and the
canonical payload text, pinned exactly (they are stored: a change would let a resent event train
twice, or make equal payloads compare unequal). Added for the mutation run (docs/mutation.md)."""

from __future__ import annotations

import math

import pytest

from hpcpredict.daemon.core.events import (
    EventKind,
    dump_payload,
    idempotency_key,
    request_from_json,
    request_to_json,
)
from hpcpredict.jobs import JobRequest


def test_the_kinds_are_stored_under_these_names() -> None:
    assert [kind.value for kind in EventKind] == ["submitted", "started", "ended", "limit_changed"]


@pytest.mark.parametrize("kind, key", [
    (EventKind.SUBMITTED, "submitted:42"),
    (EventKind.STARTED, "started:42"),
    (EventKind.ENDED, "ended:42"),
])
def test_a_job_event_is_keyed_by_its_kind_and_job_alone(kind: EventKind, key: str) -> None:
    assert idempotency_key(kind, 42) == key
    assert idempotency_key(kind, 42, 600, 3) == key  # a limit and a count do not enter


def test_a_limit_change_is_keyed_by_its_rank_and_its_value() -> None:
    assert idempotency_key(EventKind.LIMIT_CHANGED, 42, 600) == "limit_changed:42:0:600"
    assert idempotency_key(EventKind.LIMIT_CHANGED, 42, 600, 2) == "limit_changed:42:2:600"
    with pytest.raises(ValueError) as raised:
        idempotency_key(EventKind.LIMIT_CHANGED, 42)
    assert str(raised.value) == "a limit_changed event needs its new limit"


def test_a_request_goes_to_json_and_back_unchanged() -> None:
    request = JobRequest(7, 100, 4, 3600, 12, group_id=3, executable_id=5, queue_id=1,
                         partition_id=2)
    data = request_to_json(request)
    assert data == {"job_id": 7, "submit_s": 100, "procs": 4, "requested_s": 3600, "user_id": 12,
                    "group_id": 3, "executable_id": 5, "queue_id": 1, "partition_id": 2}
    assert request_from_json(data) == request


def test_a_payload_is_written_canonically() -> None:
    """Sorted keys and no spaces: equal payloads give equal text, whatever their key order."""
    assert dump_payload({"b": 1, "a": [1, 2], "c": {"y": 0.5, "x": None}}) == (
        '{"a":[1,2],"b":1,"c":{"x":null,"y":0.5}}'
    )


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_payload_with_a_non_finite_number_is_refused(value: float) -> None:
    """JSON has no NaN or infinity: such a payload could not be read back by a strict reader."""
    with pytest.raises(ValueError):
        dump_payload({"run_s": value})
