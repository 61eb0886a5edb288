"""`Type=notify` (deploy/hpcpredict.service): the daemon tells systemd READY=1 once it answers on its
socket, and STOPPING=1 when it stops; sd_notify's protocol spoken to a real datagram socket, as
systemd listens on one (hpcpredict/daemon/core/systemd_notify.py). And ``kill -USR1``, which an admin
(or a test) sends to a daemon that seems stuck: every thread's stack in its log, the daemon going on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcpredict.daemon.fronts.client import DaemonClient
from hpcpredict.daemon.core.systemd_notify import notify, notify_address

REPO_ROOT = Path(__file__).resolve().parent.parent


def listening(address: str) -> socket.socket:
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    channel.bind(address)
    channel.settimeout(0.2)
    return channel


def test_without_notify_socket_nothing_is_sent() -> None:
    assert notify_address({}) is None and notify("READY=1", environ={}) is False
    assert notify_address({"NOTIFY_SOCKET": "vsock:2:1234"}) is None  # not supported: ignored


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_assignments_reach_the_socket_in_one_datagram(kind: str, tmp_path: Path) -> None:
    name = str(tmp_path / "notify") if kind == "path" else f"@hpcpredict-test-{os.getpid()}"
    with listening(notify_address({"NOTIFY_SOCKET": name})) as channel:
        assert notify("READY=1", "STATUS=serving", environ={"NOTIFY_SOCKET": name})
        assert channel.recv(4096) == b"READY=1\nSTATUS=serving"


def test_an_unreachable_socket_is_logged_not_fatal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert notify("READY=1", environ={"NOTIFY_SOCKET": str(tmp_path / "nobody")}) is False
    assert "cannot tell systemd READY=1" in caplog.text


def test_serve_says_ready_once_it_answers_dumps_its_stacks_on_usr1_and_says_stopping(tmp_path: Path) -> None:
    notify_path = str(tmp_path / "notify")
    daemon_socket = str(tmp_path / "d.sock")
    with listening(notify_path) as channel, (tmp_path / "daemon.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{tmp_path / 'state.db'}",
             "--create-db", "--socket", daemon_socket, "--http", "", "--spool", str(tmp_path / "spool"),
             "--log-level", "warning"],
            cwd=REPO_ROOT, env={**os.environ, "NOTIFY_SOCKET": notify_path}, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            messages = []
            deadline = time.monotonic() + 120
            while not messages:
                assert process.poll() is None, (tmp_path / "daemon.log").read_text(errors="replace")
                assert time.monotonic() < deadline, "no READY=1 within 120 s"
                try:
                    messages.append(channel.recv(4096).decode())
                except TimeoutError:
                    pass
            ready = messages[0].split("\n")
            assert ready[0] == "READY=1" and ready[1].startswith(f"STATUS=serving on {daemon_socket}"), ready
            with DaemonClient(daemon_socket, timeout_s=5) as client:  # ready means answering, now
                client.request("PING")
            # kill -USR1: every thread's stack to the log, and the daemon goes on
            process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while "Current thread" not in (tmp_path / "daemon.log").read_text(errors="replace"):
                assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text(errors="replace")
                time.sleep(0.1)
            dump = (tmp_path / "daemon.log").read_text(errors="replace")
            assert "hpcpredict/daemon/core/writer.py" in dump and "asyncio" in dump, dump
            with DaemonClient(daemon_socket, timeout_s=5) as client:
                client.request("PING")
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0
            channel.settimeout(5)
            assert channel.recv(4096) == b"STOPPING=1"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
