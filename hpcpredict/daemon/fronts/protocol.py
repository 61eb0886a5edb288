"""The line protocol of the daemon's Unix socket (docs/protocol.md), as pure functions.

One request is one line, ``VERB key=value key=value ...``; one answer is one line, ``OK
key=value ...`` or ``ERR code message``. Values are percent-encoded (RFC 3986) only where they
hold a space, ``=``, ``%`` or a control character, so a Lua client builds a request with
``string.format`` and reads the answer with one ``string.match``. Everything here is pure (bytes
in, values out) so that the socket server, the HTTP API and the tests share one parser.
"""

from __future__ import annotations

import operator
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from hpcpredict.job_events import Ended, JobEvent, LimitChanged, Started, Submitted
from hpcpredict.jobs import JobRequest, label_id

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 4096  # a request longer than this is refused (and the connection closed)
VERBS = ("PING", "PREDICT", "SUBMIT", "START", "END", "LIMIT")

_KEY = re.compile(r"[a-z_][a-z0-9_]*\Z")
# Largest value an integer field may take: SQL BIGINT, and far beyond any real time or count.
_MAX_INT = 2**63 - 1
# The largest value each numeric field may take: the store's column limits (32-bit Integer columns
# for ids and counts), so that SQLite, which would store anything, and PostgreSQL, which would
# refuse it inside the event's transaction, accept and refuse the same requests; and bounds that
# keep a time limit a time limit (a century) and a date a date (year 9999).
INT32_MAX = 2**31 - 1
MAX_DURATION_S = 100 * 366 * 86_400
MAX_UNIX_S = 253_402_300_799  # 9999-12-31 23:59:59 UTC
FIELD_MAXIMUM: dict[str, int] = {
    "uid": INT32_MAX, "gid": INT32_MAX, "procs": INT32_MAX,
    "time_limit": MAX_DURATION_S, "limit": MAX_DURATION_S, "predicted": MAX_DURATION_S,
    "run": MAX_DURATION_S,
    "submit": MAX_UNIX_S, "start": MAX_UNIX_S, "end": MAX_UNIX_S, "at": MAX_UNIX_S,
}
# Decimal integers as the plugin writes them: ASCII digits, an optional minus, nothing else
# (Python's int() would also take "1_000", "+1", " 12 " and other scripts' digits).
_DECIMAL = re.compile(r"-?[0-9]{1,19}")
STATE_MAX_CHARS = 32  # jobs.final_state is String(32)
_STATE = re.compile(r"[A-Za-z0-9_]{1,%d}" % STATE_MAX_CHARS)
# A feature token as PREDICT gives it (PredictionService: a per-start prefix, a counter).
TOKEN = re.compile(r"[0-9a-f]{1,16}(?:-[0-9a-f]{1,16})?")

# The keys each verb reads; any other is refused, so a misspelt key ("time_limt") is an error
# instead of a default silently taken.
JOB_KEYS = frozenset({"uid", "user", "procs", "time_limit", "submit", "gid", "partition", "name"})
VERB_KEYS: dict[str, frozenset[str]] = {
    "PING": frozenset(),
    "PREDICT": JOB_KEYS,
    "SUBMIT": JOB_KEYS | {"job", "predicted", "limit", "token"},
    "START": JOB_KEYS | {"job", "start"},
    "END": JOB_KEYS | {"job", "run", "start", "end", "state", "lowered_kill", "predicted", "token"},
    "LIMIT": frozenset({"job", "time_limit", "at"}),
}


class ProtocolError(ValueError):
    """A request that cannot be served; `code` is the machine-readable part of the answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Request:
    verb: str
    fields: dict[str, str]


def parse_request(line: bytes) -> Request:
    """``VERB k=v ...`` (without its newline) -> `Request`; `ProtocolError` says what is wrong."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("too_long", f"request longer than {MAX_LINE_BYTES} bytes")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(
            "bad_request", "requests are ASCII; percent-encode other characters"
        ) from None
    words = text.split()
    if not words:
        raise ProtocolError("bad_request", "empty request; expected VERB key=value ...")
    verb = words[0].upper()
    if verb not in VERBS:
        raise ProtocolError("unknown_verb", f"unknown verb {words[0]!r}; known: {' '.join(VERBS)}")
    fields: dict[str, str] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or not _KEY.match(key):
            raise ProtocolError("bad_request", f"expected key=value, got {word!r}")
        if key in fields:
            raise ProtocolError("bad_request", f"key {key!r} given twice")
        if key not in VERB_KEYS[verb]:
            known = " ".join(sorted(VERB_KEYS[verb])) or "none"
            raise ProtocolError("bad_request", f"{verb} takes no key {key!r}; known: {known}")
        try:
            fields[key] = unquote(value, errors="strict") if "%" in value else value
        except UnicodeDecodeError:
            raise ProtocolError("bad_request", f"{key}: percent-encoding is not UTF-8") from None
    return Request(verb, fields)


def format_ok(values: Mapping[str, object]) -> bytes:
    """``OK k=v ...\n``: booleans as 1/0, text percent-encoded where needed."""
    return format_request("OK", values)


def format_request(verb: str, fields: Mapping[str, object]) -> bytes:
    """``VERB k=v ...\n`` (what a client sends; booleans as 1/0, None fields left out)."""
    parts = [verb]
    for key, value in fields.items():
        if value is None:
            continue
        if type(value) is int:  # the usual value: digits, nothing to encode
            parts.append(f"{key}={value}")
            continue
        if isinstance(value, bool):
            value = int(value)
        parts.append(f"{key}={_encode(str(value))}")
    return (" ".join(parts) + "\n").encode("ascii")


def format_error(code: str, message: str) -> bytes:
    """``ERR code message\\n``; the message is plain text on the rest of the line."""
    flat = " ".join(message.split())  # no newline may end the answer early
    return f"ERR {code} {flat}\n".encode("ascii", "replace")


_SAFE = "!$&'()*+,;/:?@[]^_`{|}~-."  # left as they are; quote() also leaves letters and digits
_NOTHING_TO_ENCODE = re.compile(r"[A-Za-z0-9%s]*" % re.escape(_SAFE))


def _encode(value: str) -> str:
    # quote() walks the value byte by byte even when it changes nothing (a token, a reason):
    # one regular expression tells that case apart first.
    return value if _NOTHING_TO_ENCODE.fullmatch(value) else quote(value, safe=_SAFE)


# ---------------------------------------------------------------------------- field readers
def get_int(
    fields: Mapping[str, object], key: str, *, default: int | None = None, minimum: int | None = None
) -> int:
    """An integer field (JSON numbers and decimal text both accepted), within range."""
    raw = fields.get(key)
    if raw is None or raw == "":
        if default is None:
            raise ProtocolError("missing_field", f"missing field {key!r}")
        return default
    if isinstance(raw, bool):
        raise ProtocolError("bad_request", f"{key}: expected an integer, got {raw!r}")
    if isinstance(raw, str) and not _DECIMAL.fullmatch(raw):
        raise ProtocolError(
            "bad_request", f"{key}: expected a decimal integer (ASCII digits), got {raw[:40]!r}"
        )
    try:
        value = operator.index(raw) if isinstance(raw, int) else int(str(raw), 10)
    except (TypeError, ValueError):
        raise ProtocolError("bad_request", f"{key}: expected an integer, got {str(raw)[:40]!r}") from None
    maximum = FIELD_MAXIMUM.get(key, _MAX_INT)
    if value > maximum or value < -_MAX_INT:
        raise ProtocolError("bad_request", f"{key}: {value} is out of range (at most {maximum})")
    if minimum is not None and value < minimum:
        raise ProtocolError("bad_request", f"{key}: must be >= {minimum}, got {value}")
    return value


def get_state(fields: Mapping[str, object], default: str = "COMPLETED") -> str:
    """A job's final state as SLURM names it (letters, digits, _), at most 32 characters."""
    raw = fields.get("state")
    if raw in (None, ""):
        return default
    if not isinstance(raw, str) or not _STATE.fullmatch(raw):
        raise ProtocolError(
            "bad_request",
            f"state: expected a SLURM state name (letters, digits, _; at most {STATE_MAX_CHARS}), "
            f"got {str(raw)[:40]!r}",
        )
    return raw


def get_flag(fields: Mapping[str, object], key: str) -> bool:
    raw = fields.get(key, 0)
    if raw in (0, 1, "0", "1", False, True):
        return bool(int(raw))  # type: ignore[arg-type]
    raise ProtocolError("bad_request", f"{key}: expected 0 or 1, got {raw!r}")


def resolve_uid(fields: Mapping[str, object]) -> int:
    """``uid`` if given, else ``user`` looked up in the password database."""
    if fields.get("uid") not in (None, ""):
        return get_int(fields, "uid", minimum=0)
    name = fields.get("user")
    if not name:
        raise ProtocolError("missing_field", "missing field 'uid' (or 'user')")
    try:
        return pwd.getpwnam(str(name)).pw_uid
    except KeyError:
        raise ProtocolError("unknown_user", f"no such user {name!r}; send 'uid' instead") from None


def job_request(fields: Mapping[str, object], *, job_id: int, now_s: int) -> JobRequest:
    """The `JobRequest` described by PREDICT/SUBMIT fields (docs/protocol.md)."""
    partition = fields.get("partition")
    name = fields.get("name")
    return JobRequest(
        job_id=job_id,
        submit_s=get_int(fields, "submit", default=now_s, minimum=0),
        procs=get_int(fields, "procs", minimum=1),
        requested_s=get_int(fields, "time_limit", minimum=1),
        user_id=resolve_uid(fields),
        group_id=get_int(fields, "gid", default=-1, minimum=-1),
        executable_id=label_id(str(name)) if name else -1,
        partition_id=label_id(str(partition)) if partition else -1,
    )


def has_request(fields: Mapping[str, object]) -> bool:
    """True when START/END/LIMIT fields carry a job description (for a job never seen)."""
    return any(fields.get(key) not in (None, "") for key in ("procs", "time_limit"))


# ---------------------------------------------------------------------------- typed events
def submitted_event(fields: Mapping[str, object], *, now_s: int) -> Submitted:
    """SUBMIT's fields as the typed event the service records."""
    return Submitted(
        job_request(fields, job_id=get_int(fields, "job", minimum=0), now_s=now_s),
        given_prediction_s=_optional_int(fields, "predicted"),
        limit_s=_optional_int(fields, "limit"),
        feature_token=_optional_token(fields),
    )


def started_event(fields: Mapping[str, object], *, now_s: int) -> Started:
    job_id = get_int(fields, "job", minimum=0)
    return Started(job_id, get_int(fields, "start", default=now_s, minimum=0),
                   _optional_request(fields, job_id, now_s))


def ended_event(fields: Mapping[str, object], *, now_s: int) -> Ended:
    """END's fields: the runtime is `run`, else `end - start`."""
    job_id = get_int(fields, "job", minimum=0)
    end_s = get_int(fields, "end", default=now_s, minimum=0)
    if fields.get("run") in (None, "") and fields.get("start") not in (None, ""):
        run_s = max(0, end_s - get_int(fields, "start", minimum=0))
    else:
        run_s = get_int(fields, "run", minimum=0)
    return Ended(job_id, run_s, end_s, get_state(fields), get_flag(fields, "lowered_kill"),
                 _optional_request(fields, job_id, now_s),
                 given_prediction_s=_optional_int(fields, "predicted"),
                 feature_token=_optional_token(fields))


def limit_event(fields: Mapping[str, object], *, now_s: int) -> LimitChanged:
    return LimitChanged(get_int(fields, "job", minimum=0), get_int(fields, "time_limit", minimum=1),
                        get_int(fields, "at", default=now_s, minimum=0))


def check_event(event: JobEvent) -> None:
    """Hold a typed event built outside the protocol (the SLURM watcher's) to the limits the
    protocol holds its fields to (`FIELD_MAXIMUM`: the store's columns), so both fronts are
    refused the same values on both backends."""
    values: dict[str, int | None] = {}
    request = getattr(event, "request", None)
    if request is not None:
        values |= {"uid": request.user_id, "gid": request.group_id, "procs": request.procs,
                   "time_limit": request.requested_s, "submit": request.submit_s}
    if isinstance(event, Submitted):
        values |= {"predicted": event.given_prediction_s, "limit": event.limit_s}
    elif isinstance(event, Started):
        values |= {"start": event.start_s}
    elif isinstance(event, Ended):
        values |= {"run": event.run_s, "end": event.end_s, "predicted": event.given_prediction_s}
        get_state({"state": event.final_state})
    elif isinstance(event, LimitChanged):
        values |= {"time_limit": event.new_limit_s, "at": event.at_s}
    for key, value in values.items():
        if value is not None:
            get_int({key: value}, key, minimum=-1)


def _optional_int(fields: Mapping[str, object], key: str) -> int | None:
    return None if fields.get(key) in (None, "") else get_int(fields, key, minimum=1)


def _optional_token(fields: Mapping[str, object]) -> str | None:
    """``token``, as PREDICT gives them (`TOKEN`), or None when absent or empty."""
    token = fields.get("token")
    if token in (None, ""):
        return None
    if not (isinstance(token, str) and TOKEN.fullmatch(token)):
        raise ProtocolError("bad_request", f"token: expected a token PREDICT gave, got {str(token)[:40]!r}")
    return token


def _optional_request(fields: Mapping[str, object], job_id: int, now_s: int) -> JobRequest | None:
    if lacks_time_limit(fields):
        return None  # nothing to describe the job by: known jobs go on, unknown ones are left out
    return job_request(fields, job_id=job_id, now_s=now_s) if has_request(fields) else None


def lacks_time_limit(fields: Mapping[str, object]) -> bool:
    """START/END fields describing a job (``procs``) without a ``time_limit``: a job SLURM ran
    with no limit (jobcomp.lua leaves the field out). hpcpredict describes a job by its request,
    so such a job is acknowledged and not recorded (docs/protocol.md, "Jobs without a time
    limit")."""
    return fields.get("time_limit") in (None, "") and fields.get("procs") not in (None, "")
