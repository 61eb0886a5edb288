"""The socket's answer at accept (issue 17, item 7): a client that sends one PING or PREDICT and
half-closes, as the plugin does, is answered as its connection is accepted, without a transport;
everything else still goes through `LineProtocol`, with what was read first."""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hpcpredict.daemon.fronts import socket_server
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.socket_server import one_line

from testbed.daemon_thread import Running


@pytest.fixture
def config(short_dir: Path) -> DaemonConfig:
    return DaemonConfig(db=f"sqlite:///{short_dir / 'd.db'}", socket=str(short_dir / "d.sock"), http="",
                        spool=str(short_dir / "jobcomp.spool"), min_trained_jobs=0)


@contextmanager
def loop_held(running: Running) -> Iterator[None]:
    """The daemon's loop blocked inside the block: connections wait in the listen queue, so that
    what a client sends meanwhile is all there when the daemon accepts."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(10)

    assert running.daemon._loop is not None
    running.daemon._loop.call_soon_threadsafe(hold)
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()


def sent_before_accept(running: Running, payload: bytes, *, half_close: bool = True) -> socket.socket:
    """A connection whose `payload` (and half-close) the daemon finds when it accepts it."""
    with loop_held(running):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(10)
        client.connect(running.config.socket)
        client.sendall(payload)
        if half_close:
            client.shutdown(socket.SHUT_WR)
    return client


def read_all(client: socket.socket) -> bytes:
    answer = b""
    while chunk := client.recv(65536):
        answer += chunk
    client.close()
    return answer


def fields(answer: bytes) -> dict[str, str]:
    status, *pairs = answer.decode().split()
    assert status == "OK", answer
    return dict(pair.split("=", 1) for pair in pairs)


def test_a_half_closed_predict_is_answered_at_accept_as_a_kept_connection_would_be(running: Running) -> None:
    metrics = running.daemon.handlers.metrics
    request = b"PREDICT uid=1000 procs=8 time_limit=3600\n"
    at_accept = fields(read_all(sent_before_accept(running, request)))
    assert metrics.answered_at_accept == 1
    with running.client() as kept:
        over_a_kept_connection = kept.request("PREDICT", uid=1000, procs=8, time_limit=3600)
    assert metrics.answered_at_accept == 1
    at_accept.pop("token"), over_a_kept_connection.pop("token")  # a new one per PREDICT
    assert at_accept == over_a_kept_connection
    assert metrics.requests[("PREDICT", "ok")] == 2
    assert metrics.connections == 2
    assert fields(read_all(sent_before_accept(running, b"PING\r\n")))["version"] == "1"
    assert metrics.answered_at_accept == 2


def test_a_malformed_line_is_refused_at_accept_as_on_a_transport(running: Running) -> None:
    metrics = running.daemon.handlers.metrics
    assert read_all(sent_before_accept(running, b"PREDICT uid=1\n")).startswith(b"ERR missing_field")
    assert metrics.requests[("PREDICT", "missing_field")] == 1
    assert read_all(sent_before_accept(running, b"\x00\xff garbage\n")).startswith(b"ERR bad_request")
    assert metrics.requests[("?", "bad_request")] == 1
    assert metrics.answered_at_accept == 2


@pytest.mark.parametrize(
    ("payload", "half_close", "answers"),
    [
        # an event is committed by the store writer first: answered after its commit
        (b"SUBMIT job=7 uid=1000 procs=8 time_limit=3600 submit=1000\n", True, [b"OK prediction="]),
        # two requests: both, in order
        (b"PING\nPREDICT uid=1000 procs=8 time_limit=3600\n", True, [b"OK version=1", b"OK prediction="]),
        # a last line without its newline, then the half-close
        (b"PREDICT uid=1000 procs=8 time_limit=3600", True, [b"OK prediction="]),
        # the line is not complete when accepted: the rest comes through the transport
        (b"PREDICT uid=1000 pro", False, None),
    ],
)
def test_anything_else_is_served_by_a_line_protocol_from_the_bytes_already_read(
    running: Running, payload: bytes, half_close: bool, answers: list[bytes] | None
) -> None:
    client = sent_before_accept(running, payload, half_close=half_close)
    if answers is None:  # finish the line once the daemon has read its start (and handed it over)
        deadline = time.monotonic() + 10
        while running.daemon.handlers.metrics.connections < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        client.sendall(b"cs=8 time_limit=3600\n")
        client.shutdown(socket.SHUT_WR)
        answers = [b"OK prediction="]
    lines = read_all(client).splitlines()
    assert len(lines) == len(answers)
    assert all(line.startswith(start) for line, start in zip(lines, answers)), lines
    assert running.daemon.handlers.metrics.answered_at_accept == 0


def test_a_kept_connection_can_ask_again_after_its_first_answer(running: Running) -> None:
    client = sent_before_accept(running, b"PING\n", half_close=False)
    reader = client.makefile("rb")
    assert reader.readline().startswith(b"OK version=1")
    client.sendall(b"PREDICT uid=1000 procs=8 time_limit=3600\n")
    assert reader.readline().startswith(b"OK prediction=")
    reader.close()
    client.close()


def test_an_answer_the_kernel_takes_in_part_is_finished_by_a_transport(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket_server, "send_now", lambda connection, data: connection.send(data[:5]))
    answer = read_all(sent_before_accept(running, b"PING\n"))
    assert answer.startswith(b"OK version=1") and answer.endswith(b"\n") and answer.count(b"\n") == 1


class RefusingListener:
    """The daemon's listening socket, whose next accept fails as when file descriptors run out."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.failures = 1

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self.listener.accept()

    def fileno(self) -> int:
        return self.listener.fileno()

    def close(self) -> None:
        self.listener.close()


def test_out_of_file_descriptors_pauses_accepting_then_serves_the_waiting_client(
    running: Running, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(socket_server, "ACCEPT_RETRY_S", 0.2)
    server = running.daemon.socket_server
    assert server is not None
    refusing = RefusingListener(server.listener)
    server.listener = refusing  # type: ignore[assignment]
    answer = read_all(sent_before_accept(running, b"PING\n"))
    assert answer.startswith(b"OK version=1")
    assert refusing.failures == 0
    assert "cannot accept connections" in caplog.text


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"PING\n", b"PING"),
        (b"PING\r\n", b"PING"),
        (b"\n", b""),
        (b"PING", None),  # not complete
        (b"PING\nPING\n", None),  # two
        (b"PING\nPIN", None),
        (b"P" * socket_server.MAX_LINE_BYTES + b"\n", b"P" * socket_server.MAX_LINE_BYTES),
        (b"P" * (socket_server.MAX_LINE_BYTES + 2) + b"\n", None),  # too long: LineProtocol refuses it
    ],
)
def test_one_line_takes_exactly_one_complete_line_within_the_limit(data: bytes, line: bytes | None) -> None:
    assert one_line(data) == line


def test_a_burst_of_connections_leaves_the_loop_to_its_other_work_between_batches(running: Running) -> None:
    """At most ACCEPT_BATCH connections are served per turn of the loop, so that an event's
    read, learning step and answer (a turn each) are not held behind a storm of PREDICTs."""
    loop = running.daemon._loop
    assert loop is not None
    metrics = running.daemon.handlers.metrics
    seen: list[int] = []
    done = threading.Event()

    def record(turns_left: int) -> None:  # one call per turn of the loop
        seen.append(metrics.answered_at_accept)
        if turns_left:
            loop.call_soon(record, turns_left - 1)
        else:
            done.set()

    burst = 3 * socket_server.ACCEPT_BATCH + 1
    with loop_held(running):
        clients = []
        for _ in range(burst):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect(running.config.socket)
            client.sendall(b"PING\n")
            client.shutdown(socket.SHUT_WR)
            clients.append(client)
        loop.call_soon_threadsafe(record, 6)
    assert done.wait(10)
    assert all(read_all(client).startswith(b"OK version=1") for client in clients)
    served_per_turn = [after - before for before, after in zip(seen, seen[1:])]
    assert max(served_per_turn) <= socket_server.ACCEPT_BATCH
    assert sum(served_per_turn) == burst  # all served within the turns recorded


def test_a_client_gone_before_its_answer_costs_nothing_but_its_connection(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    with loop_held(running):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(running.config.socket)
        client.sendall(b"PREDICT uid=1000 procs=8 time_limit=3600\n")
        client.close()  # sent, half-closed and gone: the answer meets a closed socket
    with running.client() as daemon:
        assert daemon.request("PING")["version"] == "1"
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
