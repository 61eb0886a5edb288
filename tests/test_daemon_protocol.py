"""The socket protocol's parser and the verb handlers, without a socket (docs/protocol.md)."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.daemon.fronts.client import DaemonReplyError, parse_answer
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.fronts.protocol import (
    MAX_LINE_BYTES,
    ProtocolError,
    format_ok,
    format_request,
    job_request,
    label_id,
    parse_request,
)
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.predictor import LearnedPredictor


@pytest.fixture
def handlers(tmp_path) -> Handlers:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    service = PredictionService.open(store)
    yield Handlers(service, clock=lambda: 1_000_000)
    store.close()


def ask(handlers: Handlers, line: str) -> dict[str, str]:
    return parse_answer(handlers.handle_line(line.encode()))


# ---------------------------------------------------------------------------- parsing
def test_request_round_trips_through_percent_encoding() -> None:
    fields = {"name": "my job = 100% sûr", "uid": 7, "lowered_kill": True, "job": 3}
    request = parse_request(format_request("end", fields).rstrip(b"\n"))
    assert request.verb == "END"
    assert request.fields == {"name": "my job = 100% sûr", "uid": "7", "lowered_kill": "1", "job": "3"}


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"", "bad_request"),
        (b"   ", "bad_request"),
        (b"HELLO uid=1", "unknown_verb"),
        (b"PREDICT uid", "bad_request"),
        (b"PREDICT Uid=1", "bad_request"),
        (b"PREDICT uid=1 uid=2", "bad_request"),
        (b"PREDICT uid=1 procs=1 time_limt=60", "bad_request"),  # misspelt: not a default taken
        (b"LIMIT job=1 time_limit=60 procs=2", "bad_request"),  # a key of another verb
        (b"PREDICT name=%ff", "bad_request"),
        (b"PREDICT uid=\xe9", "bad_request"),
        (b"PREDICT " + b"x" * MAX_LINE_BYTES, "too_long"),
    ],
)
def test_malformed_requests_name_what_is_wrong(line: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_request(line)
    assert caught.value.code == code
    assert str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_request_or_a_protocol_error(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ProtocolError:
        return
    assert request.verb in {"PING", "PREDICT", "SUBMIT", "START", "END", "LIMIT"}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text(max_size=30), max_size=6))
def test_answers_round_trip(values: dict[str, str]) -> None:
    assert parse_answer(format_ok(values)) == values


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30) | st.integers() | st.booleans())
def test_answer_values_are_encoded_as_quote_encodes_them(value: str | int | bool) -> None:
    """The shortcuts of `format_request` (ints as they are, text with nothing to encode left
    alone) write the bytes `urllib.parse.quote` always wrote: the plugins read them."""
    text = str(int(value)) if isinstance(value, bool) else str(value)
    expected = quote(text, safe="!$&'()*+,;/:?@[]^_`{|}~-.") if text else ""
    assert format_ok({"v": value}) == f"OK v={expected}\n".encode("ascii")


def test_job_fields_become_a_request() -> None:
    job = job_request(
        {"uid": "1001", "procs": "32", "time_limit": "7200", "gid": "100", "partition": "batch"},
        job_id=5,
        now_s=123,
    )
    assert job == JobRequest(
        job_id=5, submit_s=123, procs=32, requested_s=7200, user_id=1001, group_id=100,
        partition_id=label_id("batch"),
    )
    assert label_id("batch") == label_id("batch") >= 0


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"procs": "1", "time_limit": "60"}, "missing_field"),
        ({"uid": "1", "time_limit": "60"}, "missing_field"),
        ({"uid": "1", "procs": "0", "time_limit": "60"}, "bad_request"),
        ({"uid": "1", "procs": "2", "time_limit": "-5"}, "bad_request"),
        ({"uid": "1", "procs": "2", "time_limit": "1e3"}, "bad_request"),
        ({"uid": "1", "procs": "2", "time_limit": str(2**70)}, "bad_request"),
        # loose numbers Python's int() would take (issue: "1_000", "+1001", other scripts' digits)
        ({"uid": "1", "procs": "1_000", "time_limit": "60"}, "bad_request"),
        ({"uid": "+1001", "procs": "2", "time_limit": "60"}, "bad_request"),
        ({"uid": "1", "procs": "2", "time_limit": "\u0661\u0662"}, "bad_request"),  # Arabic-Indic 12
        ({"uid": "1", "procs": " 2", "time_limit": "60"}, "bad_request"),
        # beyond the store's columns or any sane limit: refused alike on SQLite and PostgreSQL
        ({"uid": "1", "procs": "2", "time_limit": "9223372036854775807"}, "bad_request"),
        ({"uid": str(2**31), "procs": "2", "time_limit": "60"}, "bad_request"),
        ({"uid": "1", "procs": str(2**31), "time_limit": "60"}, "bad_request"),
        ({"uid": "1", "gid": str(2**31), "procs": "2", "time_limit": "60"}, "bad_request"),
        ({"user": "no-such-user-hpcpredict", "procs": "2", "time_limit": "60"}, "unknown_user"),
    ],
)
def test_bad_job_fields(fields: dict[str, str], code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        job_request(fields, job_id=1, now_s=0)
    assert caught.value.code == code


def test_end_carries_the_marks_prediction_and_token_and_refuses_a_bad_token() -> None:
    from hpcpredict.daemon.fronts.protocol import ended_event

    fields = {"job": "7", "uid": "1000", "procs": "4", "time_limit": "3600", "run": "85", "end": "990"}
    assert ended_event(fields, now_s=1_000).feature_token is None
    event = ended_event(fields | {"predicted": "540", "token": "0123abcd-1f"}, now_s=1_000)
    assert (event.given_prediction_s, event.feature_token) == (540, "0123abcd-1f")
    for token in ("0123ABCD-1f", "a-b-c", "x" * 10):
        with pytest.raises(ProtocolError) as caught:
            ended_event(fields | {"token": token}, now_s=1_000)
        assert caught.value.code == "bad_request"


def test_the_largest_accepted_values_pass() -> None:
    from hpcpredict.daemon.fronts.protocol import INT32_MAX, MAX_DURATION_S

    job = job_request({"uid": str(INT32_MAX), "gid": str(INT32_MAX), "procs": str(INT32_MAX),
                       "time_limit": str(MAX_DURATION_S)}, job_id=1, now_s=0)
    assert (job.user_id, job.procs, job.requested_s) == (INT32_MAX, INT32_MAX, MAX_DURATION_S)


@pytest.mark.parametrize("state", ["x" * 33, "COMPLETED;DROP", "CANCELLED by 0", "\u00c9TAT"])
def test_a_state_that_the_store_could_not_hold_the_same_way_is_refused(state: str) -> None:
    from hpcpredict.daemon.fronts.protocol import get_state

    with pytest.raises(ProtocolError) as caught:
        get_state({"state": state})
    assert caught.value.code == "bad_request"
    assert get_state({"state": "OUT_OF_MEMORY"}) == "OUT_OF_MEMORY" and get_state({}) == "COMPLETED"


def test_user_name_is_resolved_to_its_uid() -> None:
    assert job_request({"user": "root", "procs": 1, "time_limit": 60}, job_id=1, now_s=0).user_id == 0


# ---------------------------------------------------------------------------- handlers
def test_predict_records_nothing_and_never_exceeds_the_request(handlers: Handlers) -> None:
    before = handlers.service.state_dict()
    answer = ask(handlers, "PREDICT uid=7 procs=4 time_limit=600")
    assert 1 <= int(answer["prediction"]) <= 600
    assert answer["time_limit"] == "600"
    after = handlers.service.state_dict()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[key], after[key]) for key in before)
    assert handlers.service.store.last_event_seq() == 0


def test_a_job_lifecycle_is_learned_once(handlers: Handlers) -> None:
    assert ask(handlers, "SUBMIT job=1 uid=7 procs=4 time_limit=600 submit=100 predicted=120") == {
        "prediction": "120"
    }
    assert ask(handlers, "START job=1 start=110")["applied"] == "1"
    assert ask(handlers, "LIMIT job=1 time_limit=180 at=230")["applied"] == "1"
    first = ask(handlers, "END job=1 start=110 end=400 state=COMPLETED")
    assert first == {"applied": "1", "learned": "1", "rule": "true_runtime", "note": "ended"}
    assert handlers.service.model_updates == 1
    again = ask(handlers, "END job=1 run=290 end=400")
    assert again["applied"] == "0" and "not learned twice" in again["note"]
    assert handlers.service.model_updates == 1


def test_events_for_unknown_jobs_ask_for_the_request(handlers: Handlers) -> None:
    with pytest.raises(DaemonReplyError) as caught:
        ask(handlers, "END job=9 run=50 end=500")
    assert caught.value.code == "unknown_job"
    answer = ask(handlers, "END job=9 run=50 end=500 uid=3 procs=1 time_limit=60 submit=400")
    assert answer["applied"] == "1" and answer["rule"] == "unseen"


def test_lowered_kill_flag_reaches_the_learning_rule(handlers: Handlers) -> None:
    ask(handlers, "SUBMIT job=2 uid=7 procs=4 time_limit=3600 submit=100 predicted=300")
    ask(handlers, "START job=2 start=100")
    answer = ask(handlers, "END job=2 run=300 end=400 state=TIMEOUT lowered_kill=1")
    assert answer["rule"] in {"lower_bound", "bound_met"}
    with pytest.raises(DaemonReplyError) as caught:
        ask(handlers, "END job=3 run=1 end=400 lowered_kill=yes uid=1 procs=1 time_limit=60")
    assert caught.value.code == "bad_request"


def test_every_error_is_one_answer_line_and_counted(handlers: Handlers) -> None:
    for line in (b"\x00\x01garbage", b"PREDICT", b"LIMIT job=x", b"PING extra=1", b"PING"):
        answer = handlers.handle_line(line)
        assert answer.endswith(b"\n") and answer.count(b"\n") == 1
    outcomes = {outcome for (_, outcome) in handlers.metrics.requests}
    assert {"ok", "bad_request", "missing_field"} <= outcomes


def test_peek_equals_predict_without_changing_the_learner() -> None:
    learner = LearnedPredictor()
    for job_id in range(1, 30):
        job = JobRequest(job_id, job_id * 100, 1 + job_id % 4, 3600, user_id=job_id % 3)
        learner.predict(job, job.submit_s)
        learner.job_started(job, job.submit_s)
        learner.job_ended(job, 50 * job_id, job.submit_s + 50 * job_id)
    new = JobRequest(99, 5000, 2, 3600, user_id=1)
    before = learner.state_dict()
    peeked = learner.peek(new, 5000)
    after = learner.state_dict()
    assert all(np.array_equal(before[key], after[key]) for key in before)
    assert peeked == learner.predict(new, 5000)
