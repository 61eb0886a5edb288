"""The admin HTTP API as an attacker and an unlucky operator would probe it (issue 17, item 2):
a 4xx for every malformed input, a token for per-user data, bounded connections and requests,
and neither idle clients nor slow reads of the store keeping /health or PREDICT waiting."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from testbed.daemon_thread import Running, metric_sample, write_token_file
from hpcpredict.cli import main
from hpcpredict.daemon.views import queries
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.http_api import HttpLimits
from hpcpredict.daemon.fronts.http_auth import (
    BearerAuth,
    TokenFileError,
    is_loopback,
    load_token,
    require_token_off_loopback,
)
from hpcpredict.daemon.fronts.server import Daemon, DaemonError
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store

PER_USER_GETS = ("/errors", "/users", "/users/4/errors", "/predictions")


@pytest.fixture
def config(short_dir: Path) -> DaemonConfig:
    return DaemonConfig(
        db=f"sqlite:///{short_dir / 'd.db'}",
        socket=str(short_dir / "d.sock"),
        http="127.0.0.1:0",
        http_token_file=write_token_file(short_dir),
        spool=str(short_dir / "jobcomp.spool"),
    )


def call(running: Running, path: str, body: bytes | None = None, *, method: str | None = None,
         headers: dict[str, str] | None = None, token: bool = True) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; with the daemon's token unless `token` is False."""
    headers = dict(headers or {})
    if token and running.token:
        headers.setdefault("Authorization", f"Bearer {running.token}")
    request = urllib.request.Request(running.url + path, data=body, headers=headers,
                                     method=method or ("POST" if body is not None else "GET"))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def raw_exchange(running: Running, request: bytes) -> bytes:
    """Bytes in, whatever the server answers until it closes (or 64 KiB), for requests
    urllib refuses to send."""
    host, port = running.daemon.http_address
    with socket.create_connection((host, port), timeout=30) as connection:
        connection.sendall(request)
        answer = b""
        while len(answer) < 65536 and (chunk := connection.recv(65536)):
            answer += chunk
            if b"\r\n\r\n" in answer and _complete(answer):
                break
    return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# ---------------------------------------------------------------------------- malformed input
HUGE_NUMBER = b"9" * 5000


@pytest.mark.parametrize(
    ("path", "body", "method", "status", "code"),
    [
        ("/users/123456789012345678901234567890/errors", None, "GET", 400, "bad_request"),
        ("/users/2147483648/errors", None, "GET", 400, "bad_request"),  # past the uid column
        ("/users/%00/errors", None, "GET", 400, "bad_request"),
        ("/users/-1/errors", None, "GET", 400, "bad_request"),
        ("/users/%D9%A1%D9%A2/errors", None, "GET", 400, "bad_request"),  # Arabic-Indic digits
        ("/errors?since=123456789012345678901234567890", None, "GET", 400, "bad_request"),
        ("/errors?since=1_000", None, "GET", 400, "bad_request"),
        ("/predictions?limit=abc", None, "GET", 400, "bad_request"),
        ("/predictions?limit=1001", None, "GET", 400, "bad_request"),
        ("/predict", b'{"uid": 1, "procs": 1, "time_limit": ' + HUGE_NUMBER + b"}", "POST", 400, "bad_request"),
        ("/predict", b'{"uid": 1, "procs": 1, "time_limit": ' + b"9" * 4000 + b"}", "POST", 400, "bad_request"),
        ("/predict", b'{"uid": 1, "procs": 1, "time_limit": 1e400}', "POST", 400, "bad_request"),
        ("/predict", b'{"uid": 1, "procs": 1, "time_limit": NaN}', "POST", 400, "bad_request"),
        ("/predict", json.dumps({"user": "ro\x00ot", "procs": 1, "time_limit": 60}).encode(), "POST", 400, "bad_request"),
        ("/predict", json.dumps({"uid": {"a": 1}, "procs": 1, "time_limit": 60}).encode(), "POST", 400, "bad_request"),
        ("/predict", b"[" * 20_000 + b"]" * 20_000, "POST", 400, "bad_request"),
        ("/predict", b"\xff\xfe not utf-8", "POST", 400, "bad_request"),
        ("/predict", b"", "POST", 400, "bad_request"),
        ("/predict", b"{not json", "POST", 400, "bad_request"),
        ("/predict", b" " * (65 * 1024), "POST", 413, "too_long"),
        ("/nowhere", None, "GET", 404, "not_found"),
        ("/users/4/errors/more", None, "GET", 404, "not_found"),
        ("/health", b"{}", "POST", 405, "method_not_allowed"),
        ("/predict", None, "GET", 405, "method_not_allowed"),
        ("/metrics", None, "DELETE", 405, "method_not_allowed"),
    ],
)
def test_malformed_requests_get_a_4xx_in_json(running: Running, path: str, body: bytes | None, method: str,
                                              status: int, code: str) -> None:
    got, _, raw = call(running, path, body, method=method)
    answer = json.loads(raw)
    assert (got, answer["code"]) == (status, code), answer
    assert answer["error"] and "Traceback" not in answer["error"]
    assert call(running, "/health")[0] == 200  # still serving


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: " + HUGE_NUMBER + b"\r\n\r\n",
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\xff\xfe garbage\r\n\r\n",
        b"GET /health HTTP/9.9\r\n\r\n",
    ],
    ids=["negative-length", "huge-length", "two-lengths", "nul-in-header", "long-line", "garbage", "bad-version"],
)
def test_malformed_http_is_a_4xx(running: Running, request_bytes: bytes) -> None:
    answer = raw_exchange(running, request_bytes)
    assert 400 <= status_of(answer) < 500, answer[:300]
    assert call(running, "/health")[0] == 200


def test_internal_errors_say_no_more_than_an_id(config: DaemonConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(store, limit):
        raise RuntimeError("SELECT secret FROM jobs WHERE uid = 424242")

    monkeypatch.setattr(queries, "recent_predictions", broken)
    running = Running(config, http_limits=HttpLimits(read_processes=0))  # threads: the stub is in this process
    try:
        status, _, raw = call(running, "/predictions")
        assert status == 500 and json.loads(raw)["code"] == "internal"
        assert b"424242" not in raw and b"SELECT" not in raw
    finally:
        running.stop()


# ---------------------------------------------------------------------------- authentication
@pytest.mark.parametrize("path", PER_USER_GETS)
def test_per_user_endpoints_need_the_token(running: Running, path: str) -> None:
    status, headers, raw = call(running, path, token=False)
    assert status == 401 and json.loads(raw)["code"] == "unauthorized"
    assert headers["WWW-Authenticate"].startswith("Bearer")
    for wrong in ("Bearer " + "0" * 64, "Bearer", "Basic " + running.token, running.token, "Bearer " + running.token[:-1]):
        assert call(running, path, headers={"Authorization": wrong}, token=False)[0] == 401, wrong
    # the right token, whatever the scheme's case: past authentication (404: user 4 has no jobs)
    assert call(running, path, headers={"Authorization": "bearer " + running.token}, token=False)[0] in (200, 404)


def test_predict_needs_the_token(running: Running) -> None:
    body = json.dumps({"uid": 4, "procs": 2, "time_limit": 900}).encode()
    assert call(running, "/predict", body, token=False)[0] == 401
    status, _, raw = call(running, "/predict", body)
    assert status == 200 and json.loads(raw)["time_limit_s"] == 900


def test_health_and_metrics_stay_open(running: Running) -> None:
    assert call(running, "/health", token=False)[0] == 200
    status, headers, raw = call(running, "/metrics", token=False)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")


def test_without_a_token_file_per_user_endpoints_are_off(config: DaemonConfig) -> None:
    running = Running(replace(config, http_token_file=""))
    try:
        for path in PER_USER_GETS:
            status, _, raw = call(running, path, headers={"Authorization": "Bearer anything-at-all-here"})
            answer = json.loads(raw)
            assert status == 403 and answer["code"] == "auth_not_configured"
            assert "http_token_file" in answer["error"]
        assert call(running, "/health")[0] == 200
    finally:
        running.stop()


def test_bearer_auth_compares_the_whole_token() -> None:
    auth = BearerAuth(b"s3cret-token-of-some-length")
    assert auth.allows("Bearer s3cret-token-of-some-length")
    assert auth.allows("BEARER  s3cret-token-of-some-length ")
    assert not auth.allows("Bearer s3cret-token-of-some-lengthX")
    assert not auth.allows("Bearer s3cret")
    assert not auth.allows("Bearer s3cret-token-of-some-l\udcffngth")  # undecodable bytes
    assert not auth.allows(None) and not auth.allows("")
    assert not BearerAuth(None).allows("Bearer anything")


def test_token_file_must_be_private_and_sound(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("0123456789abcdef0123456789abcdef\n")
    for mode in (0o644, 0o604, 0o602, 0o601):
        os.chmod(path, mode)
        with pytest.raises(TokenFileError, match=f"mode {mode:04o} lets every user"):
            load_token(path)
    for mode in (0o600, 0o640, 0o400):
        os.chmod(path, mode)
        assert load_token(path) == b"0123456789abcdef0123456789abcdef"
    os.chmod(path, 0o600)
    for content, message in (("", "0 characters"), ("short\n", "5 characters"),
                             ("0123456789abcdef 0123456789", "printable ASCII")):
        path.write_text(content)
        with pytest.raises(TokenFileError, match=message):
            load_token(path)
    with pytest.raises(TokenFileError, match="cannot read it"):
        load_token(tmp_path / "missing")
    with pytest.raises(TokenFileError, match="not a regular file"):
        load_token(tmp_path)


def test_a_daemon_refuses_a_readable_token_file(config: DaemonConfig) -> None:
    os.chmod(config.http_token_file, 0o644)
    store = Store(config.db)
    try:
        service = PredictionService.open(store, config.predictor_factory)
        with pytest.raises(DaemonError, match="lets every user"):
            Daemon(config, service).run(install_signal_handlers=False)
        assert not Path(config.socket).exists()  # nothing left behind
    finally:
        store.close()


def test_only_loopback_without_a_token() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "localhost"):
        assert is_loopback(host)
        require_token_off_loopback(host, "")
    for host in ("0.0.0.0", "::", "", "10.1.2.3", "example.org", "127.0.0.1.example.org"):
        assert not is_loopback(host)
        with pytest.raises(TokenFileError, match="not a loopback address"):
            require_token_off_loopback(host, "")
        require_token_off_loopback(host, "/etc/hpcpredict/http-token")


def test_serve_refuses_a_public_bind_without_a_token_and_a_readable_token_file(tmp_path: Path) -> None:
    runner = CliRunner()
    database = tmp_path / "d.db"
    result = runner.invoke(main, ["serve", "--db", f"sqlite:///{database}", "--create-db",
                                  "--http", "0.0.0.0:8765", "--socket", str(tmp_path / "d.sock")])
    assert result.exit_code == 1
    assert "0.0.0.0 is not a loopback address" in result.output and "--http-token-file" in result.output
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123456789abcdef\n")
    os.chmod(token, 0o644)
    result = runner.invoke(main, ["serve", "--db", f"sqlite:///{database}", "--create-db",
                                  "--http", "0.0.0.0:8765", "--http-token-file", str(token),
                                  "--socket", str(tmp_path / "d.sock")])
    assert result.exit_code == 1 and "chmod o-rwx" in result.output
    assert not database.exists()  # refused before the store was touched


def test_the_token_file_is_a_config_key(tmp_path: Path) -> None:
    from hpcpredict.daemon.core.config import load_config

    path = tmp_path / "daemon.toml"
    path.write_text('[daemon]\nhttp = "0.0.0.0:8765"\nhttp_token_file = "/etc/hpcpredict/http-token"\n')
    assert load_config(path).http_token_file == "/etc/hpcpredict/http-token"


# ---------------------------------------------------------------------------- limits
def test_idle_connections_do_not_make_health_unreachable(running: Running) -> None:
    host, port = running.daemon.http_address
    idle = [socket.create_connection((host, port), timeout=30) for _ in range(120)]
    slow = [socket.create_connection((host, port), timeout=30) for _ in range(30)]
    try:
        for connection in slow:  # slowloris: headers begun, never finished
            connection.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        for _ in range(3):
            status, _, raw = call(running, "/health")
            assert status == 200 and json.loads(raw)["protocol_version"] == 1
        with running.client() as daemon:
            assert daemon.request("PING")["version"] == "1"
    finally:
        for connection in idle + slow:
            connection.close()


def test_a_connection_without_a_request_is_closed(config: DaemonConfig) -> None:
    running = Running(config, http_limits=HttpLimits(idle_timeout_s=0.2))
    try:
        host, port = running.daemon.http_address
        with socket.create_connection((host, port), timeout=30) as silent, \
                socket.create_connection((host, port), timeout=30) as trickling:
            trickling.sendall(b"GET /health HTTP/1.1\r\n")
            assert silent.recv(1024) == b""  # closed by the daemon, not by the 30 s timeout
            assert trickling.recv(1024) == b""
        # a keep-alive connection: its requests are answered, then it is closed when idle
        with socket.create_connection((host, port), timeout=30) as kept:
            for _ in range(2):
                kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                head = kept.recv(65536)
                assert head.startswith(b"HTTP/1.1 200")
                while not _complete(head):
                    head += kept.recv(65536)
            assert kept.recv(1024) == b""
    finally:
        running.stop()


def test_at_the_connection_cap_a_new_connection_takes_the_place_of_the_one_idle_longest(
    config: DaemonConfig,
) -> None:
    """Issue 29, item 3: ten idle connections no longer keep /health out."""
    running = Running(config, http_limits=HttpLimits(max_connections=10))
    host, port = running.daemon.http_address
    held = [socket.create_connection((host, port), timeout=30) for _ in range(10)]
    try:
        call(running, "/health")  # let the loop see the ten connections (made, not only accepted)
        answer = raw_exchange(running, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer) == 200
        assert held[0].recv(1024) == b""  # the oldest idle one was closed to make room
        metrics = call(running, "/metrics")[2].decode()
        assert metric_sample(metrics, "hpcpredict_http_requests_total", endpoint="shed_idle", status="503") >= 1
    finally:
        for connection in held:
            connection.close()
        running.stop()


def test_connections_over_the_cap_get_503_at_once_when_every_one_has_a_request_running(
    config: DaemonConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = _BlockedReads()
    monkeypatch.setattr(queries, "user_totals", blocked)
    running = Running(config, http_limits=HttpLimits(max_connections=2, read_processes=0))
    try:
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(call, running, "/users") for _ in range(2)]
            for _ in range(2):
                assert blocked.inside.acquire(timeout=30)
            answer = raw_exchange(running, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status_of(answer) == 503 and b'"code": "busy"' in answer and b"Retry-After: 1" in answer
            blocked.release.set()
            assert [future.result()[0] for future in waiting] == [200, 200]
        # the finished ones are idle (or gone) once the loop sees them: soon, and never a hang
        deadline = time.monotonic() + 30
        while (status := call(running, "/health")[0]) != 200:
            assert time.monotonic() < deadline, f"still {status} 30 s after the requests ended"
            time.sleep(0.05)
        metrics = call(running, "/metrics")[2].decode()
        assert metric_sample(metrics, "hpcpredict_http_requests_total", endpoint="refused", status="503") >= 1
    finally:
        blocked.release.set()
        running.stop()


class _BlockedReads:
    """A store read that waits until released, counting the threads inside it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside = threading.Semaphore(0)

    def __call__(self, store):  # a thread of the test process (read_processes=0)
        self.inside.release()
        assert self.release.wait(60)
        return []


def test_slow_reads_never_delay_predict_and_excess_requests_get_503(
    config: DaemonConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = _BlockedReads()
    monkeypatch.setattr(queries, "user_totals", blocked)
    running = Running(config, http_limits=HttpLimits(max_requests=2, read_processes=0))
    try:
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(call, running, "/users") for _ in range(2)]
            for _ in range(2):
                assert blocked.inside.acquire(timeout=30)
            # Both reads hold their threads: the loop still answers the plugin and /health ...
            with running.client() as daemon:
                for uid in range(50):
                    assert 1 <= int(daemon.request("PREDICT", uid=uid, procs=1, time_limit=600)["prediction"]) <= 600
            assert call(running, "/health")[0] == 200
            # ... and a third request is turned away at once instead of queueing.
            status, headers, raw = call(running, "/users")
            assert status == 503 and json.loads(raw)["code"] == "busy" and headers["Retry-After"] == "1"
            blocked.release.set()
            assert [future.result()[0] for future in waiting] == [200, 200]
        assert call(running, "/users")[0] == 200
    finally:
        blocked.release.set()
        running.stop()


def test_a_request_past_its_timeout_is_answered_503_and_its_read_still_counts(
    config: DaemonConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = _BlockedReads()
    monkeypatch.setattr(queries, "user_totals", blocked)
    running = Running(config, http_limits=HttpLimits(request_timeout_s=0.2, max_requests=1, read_processes=0))
    try:
        status, _, raw = call(running, "/users")
        assert status == 503 and json.loads(raw)["code"] == "timeout"
        # The read it started still runs (a thread cannot be cancelled): it holds the only slot.
        status, _, raw = call(running, "/predictions")
        assert status == 503 and json.loads(raw)["code"] == "busy"
        blocked.release.set()
        status = 503
        while status == 503:  # until the loop hears the read has finished
            status, _, raw = call(running, "/predictions")
        assert status == 200
    finally:
        blocked.release.set()
        running.stop()


# ---------------------------------------------------------------------------- /metrics
def test_metrics_parse_and_negotiate_openmetrics(running: Running) -> None:
    with running.client() as daemon:
        daemon.request("PREDICT", uid=5, procs=1, time_limit=60)
        daemon.request("PING")
        daemon.request("PING")
    text = call(running, "/metrics")[2].decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert {"hpcpredict_requests", "hpcpredict_request_seconds", "hpcpredict_ready", "hpcpredict_judged_jobs",
            "hpcpredict_event_failures", "process_open_fds"} <= names
    # one latency histogram per verb: PREDICT's budget is its own
    assert metric_sample(text, "hpcpredict_request_seconds_count", verb="PREDICT") == 1
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="PREDICT", le="+Inf") == 1
    assert metric_sample(text, "hpcpredict_request_seconds_count", verb="PING") == 2
    status, headers, raw = call(running, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert raw.endswith(b"# EOF\n")


def test_a_dead_read_worker_is_replaced(running: Running) -> None:
    before = {child.pid for child in multiprocessing.active_children()}
    assert call(running, "/users")[0] == 200  # the first read starts the worker processes
    workers = [child for child in multiprocessing.active_children() if child.pid not in before]
    assert workers
    for worker in workers:  # killed, as the kernel's OOM killer would
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(30)
    statuses: list[int] = []
    while not statuses or statuses[-1] != 200:
        status, _, raw = call(running, "/users")
        statuses.append(status)
        assert status == 200 or json.loads(raw)["code"] == "unavailable", raw
        assert len(statuses) < 20, statuses
    with running.client() as daemon:  # the plugin never noticed
        assert daemon.request("PING")["version"] == "1"
