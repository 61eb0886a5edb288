"""Crash test (issue 6): kill -9 the daemon while it ingests a replayed log, restart it, finish
the replay; the final model, the stored jobs and the event log equal an uninterrupted run's.

The daemon runs as a real process (`hpcpredict serve`), fed over its socket by a client that, like
the SLURM side, resends what it has no answer for — here from a few events before the last
answered one, so that the idempotency of every event kind is exercised as well.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from testbed.daemon_thread import wait_until_answering
from sqlalchemy import select

from hpcpredict.daemon.fronts.client import DaemonClient
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import EventRow, JobRow, Store
from hpcpredict.instants import Instant
from hpcpredict.learn.history import HistoryEvent, history_events
from hpcpredict.logs.workload import load_workload

SUBMITTED, STARTED, ENDED = Instant.SUBMISSION, Instant.START, Instant.TERMINATION

JOBS = 500  # 1,500 events: long enough to kill in the middle, short enough for every CI run
KILL_AFTER_ACKS = 700
RESEND_BACK = 3


def event_request(event: HistoryEvent) -> tuple[str, dict[str, object]]:
    job = event.request
    if event.kind == SUBMITTED:
        return "SUBMIT", {"job": job.job_id, "uid": job.user_id, "gid": job.group_id, "procs": job.procs,
                          "time_limit": job.requested_s, "submit": job.submit_s}
    if event.kind == STARTED:
        return "START", {"job": job.job_id, "start": event.time_s}
    assert event.kind == ENDED
    return "END", {"job": job.job_id, "run": event.run_s, "end": event.time_s, "state": "COMPLETED"}


class DaemonProcess:
    def __init__(self, directory: Path) -> None:
        self.socket = str(directory / "d.sock")
        self.db = f"sqlite:///{directory / 'state.db'}"
        self.log = (directory / "daemon.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", self.db, "--create-db", "--socket", self.socket,
             "--http", "", "--spool", str(directory / "jobcomp.spool"), "--checkpoint-every", "100", "--log-level", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_until_answering(self.socket, self.process, lambda: (directory / "daemon.log").read_text(errors="replace"))

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(30) == 0
        self.log.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self.log.close()


def send(socket_path: str, events: list[HistoryEvent], first: int, acked: list[int]) -> None:
    """Send events[first:] in order; `acked` gets the index of each answered event."""
    with DaemonClient(socket_path, timeout_s=30) as client:
        for index in range(first, len(events)):
            verb, fields = event_request(events[index])
            client.request(verb, **fields)
            acked.append(index)


def stored(db: str) -> tuple[dict[str, np.ndarray], list[tuple], list[tuple]]:
    store = Store(db)
    try:
        service = PredictionService.open(store, DaemonConfig(db=db).predictor_factory)
        with store.session() as session:
            jobs = [
                tuple(getattr(row, column.key) for column in JobRow.__table__.columns)
                for row in session.scalars(select(JobRow).order_by(JobRow.job_id))
            ]
            events = [
                (row.kind, row.job_id, row.payload_json)
                for row in session.scalars(select(EventRow).order_by(EventRow.seq))
            ]
        return service.state_dict(), jobs, events
    finally:
        store.close()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hpcrash"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_kill_9_mid_replay_loses_nothing(sample_log: Path, work_dir: Path) -> None:
    workload = load_workload(sample_log)
    events, _ = history_events(workload.jobs[:JOBS], offset_s=workload.header.unix_start_time or 0)

    (work_dir / "calm").mkdir()
    calm = DaemonProcess(work_dir / "calm")
    send(calm.socket, events, 0, [])
    calm.terminate()

    (work_dir / "crash").mkdir()
    victim = DaemonProcess(work_dir / "crash")
    acked: list[int] = []
    failure: list[BaseException] = []

    def sender() -> None:
        try:
            send(victim.socket, events, 0, acked)
        except (OSError, ConnectionError) as error:
            failure.append(error)

    thread = threading.Thread(target=sender)
    thread.start()
    while len(acked) < KILL_AFTER_ACKS and thread.is_alive():
        time.sleep(0.001)
    victim.kill()
    thread.join(30)
    assert failure, "the daemon was killed before the replay ended: the sender must have seen it"
    last = acked[-1]
    assert KILL_AFTER_ACKS <= last + 1 < len(events)

    revived = DaemonProcess(work_dir / "crash")
    send(revived.socket, events, max(0, last + 1 - RESEND_BACK), [])
    revived.terminate()

    calm_state, calm_jobs, calm_events = stored(calm.db)
    state, jobs, logged = stored(revived.db)
    assert state.keys() == calm_state.keys()
    different = [key for key in state if not np.array_equal(state[key], calm_state[key])]
    assert different == []
    assert jobs == calm_jobs
    assert logged == calm_events
    assert len(jobs) == JOBS and all(job[JobRow.__table__.columns.keys().index("status")] == "ended" for job in jobs)
