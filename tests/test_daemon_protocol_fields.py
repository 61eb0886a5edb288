"""The protocol's field readers and typed events (hpcpredict/daemon/fronts/protocol.py), field by field.

The expected events and refusals are written out by hand from docs/protocol.md: which keys each
verb reads, their defaults (the time the daemon read the line), their lower bounds (ids and times
>= 0, sizes and limits >= 1, a group id >= -1) and upper bounds (the store's columns), and the
exact error a sysadmin or the plugin reads (its machine code and its message naming the field
and what was expected). Added for the mutation run (docs/mutation.md): these pin the boundaries
and the error texts that the round-trip and daemon-level tests left free.
"""

from __future__ import annotations

import pytest

from hpcpredict.daemon.fronts.protocol import (
    INT32_MAX,
    MAX_DURATION_S,
    MAX_LINE_BYTES,
    MAX_UNIX_S,
    ProtocolError,
    check_event,
    ended_event,
    format_error,
    format_request,
    get_flag,
    get_int,
    get_state,
    limit_event,
    parse_request,
    resolve_uid,
    started_event,
    submitted_event,
)
from hpcpredict.job_events import Ended, LimitChanged, Started, Submitted
from hpcpredict.jobs import JobRequest, label_id

NOW = 1_700_000_000
BUILDERS = {"SUBMIT": submitted_event, "START": started_event, "END": ended_event,
            "LIMIT": limit_event}


def event(line: str) -> object:
    request = parse_request(line.encode())
    return BUILDERS[request.verb](request.fields, now_s=NOW)


def refusal(line: str) -> tuple[str, str]:
    with pytest.raises(ProtocolError) as error:
        event(line)
    return error.value.code, str(error.value)


JOB = "uid=1001 procs=4 time_limit=3600"


@pytest.mark.parametrize("line, expected", [
    (f"SUBMIT job=7 {JOB} submit=50 gid=20 name=a.sh partition=batch predicted=600 limit=660 "
     "token=ab12-3",
     Submitted(JobRequest(7, 50, 4, 3600, 1001, 20, label_id("a.sh"), -1, label_id("batch")),
               600, 660, "ab12-3")),
    ("SUBMIT job=0 uid=0 procs=1 time_limit=1",  # every lower bound, every default
     Submitted(JobRequest(0, NOW, 1, 1, 0, -1, -1, -1, -1), None, None, None)),
    (f"SUBMIT job=1 {JOB} submit=0 gid=-1 name= partition= predicted= limit= token=",
     Submitted(JobRequest(1, 0, 4, 3600, 1001, -1, -1, -1, -1), None, None, None)),
    ("START job=7 start=0", Started(7, 0, None)),
    ("START job=0", Started(0, NOW, None)),
    (f"START job=7 start=90 {JOB}", Started(7, 90, JobRequest(7, NOW, 4, 3600, 1001))),
    ("START job=7 time_limit=60 procs=2 uid=1", Started(7, NOW, JobRequest(7, NOW, 2, 60, 1))),
    ("END job=7 run=0 end=0", Ended(7, 0, 0)),
    ("END job=0 run=5", Ended(0, 5, NOW)),
    ("END job=7 start=100 end=160", Ended(7, 60, 160)),
    ("END job=7 start=0 end=160", Ended(7, 160, 160)),
    ("END job=7 start=200 end=160", Ended(7, 0, 160)),  # a clock step: never negative
    ("END job=7 run=5 start=100 end=160", Ended(7, 5, 160)),  # run, when given, wins
    ("END job=7 run=5 start= end=160", Ended(7, 5, 160)),
    ("END job=7 run= start=100 end=160", Ended(7, 60, 160)),  # an empty run is no run
    ("START job=7 procs= time_limit=", Started(7, NOW, None)),  # empty: no job description
    # a job SLURM runs with no limit (no --time, no DefaultTime): acknowledged, not described
    # (protocol.lacks_time_limit; docs/protocol.md, "Jobs without a time limit")
    ("START job=7 procs=2 uid=1", Started(7, NOW, None)),
    (f"END job=7 run=5 end=9 state=TIMEOUT lowered_kill=1 predicted=1 token=ff {JOB}",
     Ended(7, 5, 9, "TIMEOUT", True, JobRequest(7, NOW, 4, 3600, 1001), 1, "ff")),
    ("END job=7 run=5 state= lowered_kill=0", Ended(7, 5, NOW, "COMPLETED", False)),
    ("LIMIT job=0 time_limit=1 at=0", LimitChanged(0, 1, 0)),
    ("LIMIT job=3 time_limit=60", LimitChanged(3, 60, NOW)),
])
def test_each_verb_builds_the_event_its_fields_describe(line: str, expected: object) -> None:
    assert event(line) == expected


@pytest.mark.parametrize("line, message", [
    (f"SUBMIT job=-1 {JOB}", "job: must be >= 0, got -1"),
    ("START job=-1", "job: must be >= 0, got -1"),
    ("END job=-1 run=1", "job: must be >= 0, got -1"),
    ("LIMIT job=-1 time_limit=60", "job: must be >= 0, got -1"),
    (f"SUBMIT job=1 {JOB} submit=-1", "submit: must be >= 0, got -1"),
    ("SUBMIT job=1 uid=1 procs=0 time_limit=60", "procs: must be >= 1, got 0"),
    ("SUBMIT job=1 uid=1 procs=1 time_limit=0", "time_limit: must be >= 1, got 0"),
    ("SUBMIT job=1 uid=-1 procs=1 time_limit=60", "uid: must be >= 0, got -1"),
    (f"SUBMIT job=1 {JOB} gid=-2", "gid: must be >= -1, got -2"),
    (f"SUBMIT job=1 {JOB} predicted=0", "predicted: must be >= 1, got 0"),
    (f"SUBMIT job=1 {JOB} limit=0", "limit: must be >= 1, got 0"),
    ("START job=1 start=-1", "start: must be >= 0, got -1"),
    ("START job=1 procs=1 time_limit=0 uid=1", "time_limit: must be >= 1, got 0"),
    ("END job=1 run=-1", "run: must be >= 0, got -1"),
    ("END job=1 run=1 end=-1", "end: must be >= 0, got -1"),
    ("END job=1 start=-1 end=5", "start: must be >= 0, got -1"),
    ("END job=1 run=1 predicted=0", "predicted: must be >= 1, got 0"),
    ("LIMIT job=1 time_limit=0", "time_limit: must be >= 1, got 0"),
    ("LIMIT job=1 time_limit=60 at=-1", "at: must be >= 0, got -1"),
    ("END job=1 run=1 lowered_kill=2", "lowered_kill: expected 0 or 1, got '2'"),
    ("END job=1 run=1 state=NOT-A-STATE",
     "state: expected a SLURM state name (letters, digits, _; at most 32), got 'NOT-A-STATE'"),
    ("END job=1 run=1 token=zz", "token: expected a token PREDICT gave, got 'zz'"),
    ("END job=1 run=1 token=" + "z" * 50, "token: expected a token PREDICT gave, got '" + "z" * 40 + "'"),
    ("SUBMIT job=1 uid=1 procs=2147483648 time_limit=60",
     "procs: 2147483648 is out of range (at most 2147483647)"),
    ("SUBMIT job=1 uid=1 procs=1x time_limit=60",
     "procs: expected a decimal integer (ASCII digits), got '1x'"),
])
def test_bad_fields_are_refused_naming_the_field_and_what_was_expected(line: str, message: str) -> None:
    assert refusal(line) == ("bad_request", message)


@pytest.mark.parametrize("line, message", [
    ("START job=7 time_limit=60 uid=1", "missing field 'procs'"),
    ("SUBMIT uid=1 procs=1 time_limit=60", "missing field 'job'"),
    ("SUBMIT job=1 uid=1 time_limit=60", "missing field 'procs'"),
    ("SUBMIT job=1 procs=1 time_limit=60", "missing field 'uid' (or 'user')"),
    ("SUBMIT job=1 uid= user= procs=1 time_limit=60", "missing field 'uid' (or 'user')"),
    ("END job=1", "missing field 'run'"),
    ("END job=1 start=", "missing field 'run'"),
    ("LIMIT job=1", "missing field 'time_limit'"),
])
def test_missing_fields_are_named(line: str, message: str) -> None:
    assert refusal(line) == ("missing_field", message)


def test_a_user_name_is_looked_up_and_an_unknown_one_refused() -> None:
    assert resolve_uid({"user": "root"}) == 0
    assert resolve_uid({"uid": "", "user": "root"}) == 0
    assert resolve_uid({"uid": "5", "user": "root"}) == 5  # uid, when given, wins
    assert refusal("SUBMIT job=1 user=no-such-user-hp procs=1 time_limit=60") == (
        "unknown_user", "no such user 'no-such-user-hp'; send 'uid' instead")


@pytest.mark.parametrize("raw", [0, 1, "0", "1", False, True])
def test_flags_take_0_and_1_as_numbers_text_or_booleans(raw: object) -> None:
    assert get_flag({"f": raw}, "f") is bool(int(raw))  # type: ignore[call-overload]


def test_a_missing_flag_is_false() -> None:
    assert get_flag({}, "f") is False


def test_get_int_reads_json_numbers_and_text_and_refuses_the_rest() -> None:
    # JSON values (the HTTP API): integers within range, never booleans or fractions.
    assert get_int({"k": -(2**63 - 1)}, "k") == -(2**63 - 1)  # the lowest allowed
    assert get_int({"k": 2**63 - 1}, "k") == 2**63 - 1
    assert get_int({"k": "-12"}, "k") == -12
    assert get_int({"k": "007"}, "k") == 7
    assert get_int({"k": ""}, "k", default=3) == 3
    cases = {
        True: "k: expected an integer, got True",
        1.5: "k: expected an integer, got '1.5'",
        "x" * 50: "k: expected a decimal integer (ASCII digits), got '" + "x" * 40 + "'",
        -(2**63): f"k: {-(2**63)} is out of range (at most {2**63 - 1})",
        "-9223372036854775808": f"k: {-(2**63)} is out of range (at most {2**63 - 1})",
    }
    for raw, message in cases.items():
        with pytest.raises(ProtocolError) as error:
            get_int({"k": raw}, "k")
        assert (error.value.code, str(error.value)) == ("bad_request", message)
    with pytest.raises(ProtocolError) as error:
        get_int({"k": list(range(30))}, "k")  # a JSON array: its text cut at 40 characters
    assert str(error.value) == f"k: expected an integer, got {str(list(range(30)))[:40]!r}"
    with pytest.raises(ProtocolError) as error:
        get_int({"k": 1.5e30}, "k")  # a float's text is not a decimal integer
    assert error.value.code == "bad_request" and str(error.value).startswith("k: expected an integer, got")


def test_an_empty_state_is_the_default() -> None:
    assert get_state({"state": ""}) == "COMPLETED"
    assert get_state({}, default="FAILED") == "FAILED"
    assert get_state({"state": "X" * 32}) == "X" * 32
    with pytest.raises(ProtocolError) as error:
        get_state({"state": "X" * 50})
    assert str(error.value).endswith("got '" + "X" * 40 + "'")


@pytest.mark.parametrize("line, code, message", [
    (b"", "bad_request", "empty request; expected VERB key=value ..."),
    (b"FOO a=1", "unknown_verb", "unknown verb 'FOO'; known: PING PREDICT SUBMIT START END LIMIT"),
    (b"PREDICT a", "bad_request", "expected key=value, got 'a'"),
    (b"PREDICT uid=1 uid=2", "bad_request", "key 'uid' given twice"),
    (b"PING x=1", "bad_request", "PING takes no key 'x'; known: none"),
    (b"LIMIT uid=1", "bad_request", "LIMIT takes no key 'uid'; known: at job time_limit"),
    (b"PREDICT name=%FF", "bad_request", "name: percent-encoding is not UTF-8"),
    ("PREDICT name=é".encode(), "bad_request", "requests are ASCII; percent-encode other characters"),
])
def test_malformed_lines_get_the_exact_error(line: bytes, code: str, message: str) -> None:
    with pytest.raises(ProtocolError) as error:
        parse_request(line)
    assert (error.value.code, str(error.value)) == (code, message)


def test_the_longest_line_allowed_is_max_line_bytes() -> None:
    head = b"PREDICT uid=1 procs=1 time_limit=60 name="
    line = head + b"a" * (MAX_LINE_BYTES - len(head))
    assert len(line) == MAX_LINE_BYTES and parse_request(line).fields["name"].startswith("a")
    with pytest.raises(ProtocolError) as error:
        parse_request(line + b"a")
    assert (error.value.code, str(error.value)) == ("too_long", f"request longer than {MAX_LINE_BYTES} bytes")


def test_a_value_may_hold_an_equals_sign() -> None:
    assert parse_request(b"PREDICT name=a=b").fields == {"name": "a=b"}


def test_error_and_request_lines() -> None:
    assert format_error("bad_request", "two\nlines  here") == b"ERR bad_request two lines here\n"
    assert format_error("x", "caf\u00e9") == b"ERR x caf?\n"
    assert format_request("SUBMIT", {"a": None, "b": 1, "c": True, "d": "x y"}) == b"SUBMIT b=1 c=1 d=x%20y\n"


# ------------------------------------------------------------------ events built elsewhere
# check_event holds the SLURM watcher's typed events to the limits the protocol holds its fields
# to (the store's columns): every field, just within and just beyond.
REQUEST = JobRequest(1, 0, 1, 60, 0)


@pytest.mark.parametrize("within", [
    Submitted(REQUEST),
    Submitted(JobRequest(1, MAX_UNIX_S, INT32_MAX, MAX_DURATION_S, INT32_MAX, -1), MAX_DURATION_S,
              MAX_DURATION_S),
    Started(1, MAX_UNIX_S), Started(1, 0, REQUEST),
    Ended(1, MAX_DURATION_S, MAX_UNIX_S, "TIMEOUT", True, REQUEST, MAX_DURATION_S),
    Ended(1, 0, 0), LimitChanged(1, MAX_DURATION_S, MAX_UNIX_S), LimitChanged(1, 60, -1),
])
def test_events_within_the_limits_pass(within: object) -> None:
    check_event(within)  # type: ignore[arg-type]


@pytest.mark.parametrize("beyond, message", [
    (Submitted(JobRequest(1, 0, 1, 60, INT32_MAX + 1)), f"uid: {INT32_MAX + 1} is out of range"),
    (Submitted(JobRequest(1, 0, 1, 60, 0, INT32_MAX + 1)), f"gid: {INT32_MAX + 1} is out of range"),
    (Submitted(JobRequest(1, 0, 1, 60, 0, -2)), "gid: must be >= -1, got -2"),
    (Submitted(JobRequest(1, 0, INT32_MAX + 1, 60, 0)), f"procs: {INT32_MAX + 1} is out of range"),
    (Submitted(JobRequest(1, 0, 1, MAX_DURATION_S + 1, 0)), f"time_limit: {MAX_DURATION_S + 1} is out"),
    (Submitted(JobRequest(1, MAX_UNIX_S + 1, 1, 60, 0)), f"submit: {MAX_UNIX_S + 1} is out of range"),
    (Submitted(REQUEST, MAX_DURATION_S + 1), f"predicted: {MAX_DURATION_S + 1} is out of range"),
    (Submitted(REQUEST, None, MAX_DURATION_S + 1), f"limit: {MAX_DURATION_S + 1} is out of range"),
    (Started(1, MAX_UNIX_S + 1), f"start: {MAX_UNIX_S + 1} is out of range"),
    (Started(1, 0, JobRequest(1, 0, 1, 60, -2)), "uid: must be >= -1, got -2"),
    (Ended(1, MAX_DURATION_S + 1, 0), f"run: {MAX_DURATION_S + 1} is out of range"),
    (Ended(1, 0, MAX_UNIX_S + 1), f"end: {MAX_UNIX_S + 1} is out of range"),
    (Ended(1, 0, 0, given_prediction_s=MAX_DURATION_S + 1), f"predicted: {MAX_DURATION_S + 1} is out"),
    (Ended(1, 0, 0, "NOT A STATE"), "state: expected a SLURM state name"),
    (Ended(1, 0, 0, request=JobRequest(1, 0, 1, 60, INT32_MAX + 1)), f"uid: {INT32_MAX + 1} is out"),
    (LimitChanged(1, MAX_DURATION_S + 1, 0), f"time_limit: {MAX_DURATION_S + 1} is out of range"),
    (LimitChanged(1, 60, MAX_UNIX_S + 1), f"at: {MAX_UNIX_S + 1} is out of range"),
    (LimitChanged(1, 60, -2), "at: must be >= -1, got -2"),
])
def test_events_beyond_the_limits_are_refused_naming_the_field(beyond: object, message: str) -> None:
    with pytest.raises(ProtocolError) as error:
        check_event(beyond)  # type: ignore[arg-type]
    assert error.value.code == "bad_request" and str(error.value).startswith(message)
