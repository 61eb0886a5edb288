"""The hand-off between the daemon's event loop and its store writer (writer.py, issue 17 item 8):
socket events are plain jobs of the writer, and their answers come back through a `LoopInbox`
that wakes the loop once for every answer ready by then.

What must hold whatever the batching: every event acknowledged, in the order of its connection's
requests, each only once committed (another connection to the database sees it when its answer
arrives), and learned in the log's order (the live model equals the log replayed from scratch).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from testbed.daemon_thread import Running
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.core.events import EventKind
from hpcpredict.daemon.core.learning import apply_event, observe_event
from hpcpredict.daemon.core.writer import LoopInbox

RECENT_S = int(time.time()) - 10 * 86_400  # recent jobs: the model is ready (staleness.py)
JOBS_PER_CONNECTION = 15  # 45 events each: under MAX_EVENTS_IN_FLIGHT, all sent before any answer


# ---------------------------------------------------------------------------- LoopInbox


def test_results_put_while_the_loop_is_busy_are_run_in_order_with_one_wake_up() -> None:
    async def scenario() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        wake_ups = 0
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counting(callback, *args):  # type: ignore[no-untyped-def]
            nonlocal wake_ups
            wake_ups += 1
            return call_soon_threadsafe(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        inbox = LoopInbox(loop)
        delivered: list[int] = []
        all_put = threading.Event()

        def writer() -> None:
            for i in range(50):
                inbox.put(delivered.append, i)
            all_put.set()

        # The loop is held (as by a burst of PREDICTs) while the writer puts 50 results.
        loop.call_soon(all_put.wait, 30)
        thread = threading.Thread(target=writer)
        thread.start()
        while len(delivered) < 50:
            await asyncio.sleep(0.01)
        thread.join()
        return delivered, wake_ups

    delivered, wake_ups = asyncio.run(scenario())
    assert delivered == list(range(50))
    assert wake_ups == 1


def test_no_result_is_left_behind_when_puts_race_the_drain() -> None:
    """The flag is cleared before the drain: a result put meanwhile is drained or wakes again."""

    async def scenario() -> list[int]:
        loop = asyncio.get_running_loop()
        inbox = LoopInbox(loop)
        delivered: list[int] = []
        rng = np.random.default_rng(17)
        pauses = rng.random(5_000) < 0.01  # now and then, let the loop drain mid-stream

        def writer() -> None:
            for i in range(5_000):
                inbox.put(delivered.append, i)
                if pauses[i]:
                    time.sleep(0.0005)

        thread = threading.Thread(target=writer)
        thread.start()
        deadline = time.monotonic() + 60
        while len(delivered) < 5_000 and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        thread.join()
        return delivered

    assert asyncio.run(scenario()) == list(range(5_000))


# ---------------------------------------------------------------------------- the daemon


@pytest.fixture
def config(short_dir: Path, store_url: str) -> DaemonConfig:
    return DaemonConfig(
        db=store_url,
        socket=str(short_dir / "d.sock"),
        http="",
        spool=str(short_dir / "jobcomp.spool"),
        min_trained_jobs=0,
    )


def job_lines(first_job_id: int) -> list[tuple[bytes, int, EventKind]]:
    """SUBMIT, START, END for `JOBS_PER_CONNECTION` new jobs: (line, job id, logged kind)."""
    lines = []
    for i in range(JOBS_PER_CONNECTION):
        job_id, submit_s = first_job_id + i, RECENT_S + 100 * i
        uid, run_s = 1000 + i % 4, 60 + 37 * i
        lines += [
            (f"SUBMIT job={job_id} uid={uid} procs={1 + i % 8} time_limit=3600 submit={submit_s}\n".encode(),
             job_id, EventKind.SUBMITTED),
            (f"START job={job_id} start={submit_s + 10}\n".encode(), job_id, EventKind.STARTED),
            (f"END job={job_id} run={run_s} end={submit_s + 10 + run_s} state=COMPLETED\n".encode(),
             job_id, EventKind.ENDED),
        ]
    return lines


def test_pipelined_events_queued_behind_a_busy_writer_are_answered_in_order_once_committed(
    config: DaemonConfig, store_url: str
) -> None:
    running = Running(config)
    gate = threading.Event()
    observer = create_engine(store_url)  # another connection: it sees committed rows only
    connections: dict[int, socket.socket] = {}
    try:
        blocker = running.daemon.writer.submit(gate.wait)  # the writer is busy: a batch queues up
        streams = {first_job_id: job_lines(first_job_id) for first_job_id in (100, 200)}
        for first_job_id, lines in streams.items():
            connection = socket.socket(socket.AF_UNIX)
            connection.connect(config.socket)
            connection.settimeout(60)
            connection.sendall(b"".join(line for line, _, _ in lines))
            connections[first_job_id] = connection
        total = sum(len(lines) for lines in streams.values())
        deadline = time.monotonic() + 60
        while running.daemon.writer.backlog < total and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.daemon.writer.backlog == total  # every event was waiting at once
        gate.set()
        blocker.result(30)

        for first_job_id, lines in streams.items():
            with connections[first_job_id].makefile("rb") as reader:
                for line, job_id, kind in lines:
                    answer = reader.readline()
                    verb = line.split()[0]
                    expected = {b"SUBMIT": b"OK prediction=", b"START": b"OK applied=1 note=started",
                                b"END": b"OK applied=1 learned=1"}[verb]
                    assert answer.startswith(expected), (line, answer)
                    with observer.connect() as connection:
                        logged = connection.execute(
                            text("SELECT count(*) FROM events WHERE job_id = :job_id AND kind = :kind"),
                            {"job_id": job_id, "kind": kind.value},
                        ).scalar()
                    assert logged == 1, f"{line!r} was answered before its commit"
            connections[first_job_id].close()

        with observer.connect() as connection:
            logged = connection.execute(text("SELECT seq, kind, job_id FROM events ORDER BY seq")).all()
        assert len(logged) == total
        for first_job_id, lines in streams.items():  # each connection's events in its order
            assert [(job_id, kind) for _, kind, job_id in logged if first_job_id <= job_id < first_job_id + 100] \
                == [(job_id, kind.value) for _, job_id, kind in lines]

        # Learned in the log's order: the live model is the log replayed from an untrained one.
        replayed = config.predictor_factory()
        correction = type(running.service.correction)()
        for stored in running.store.events_after(0):
            kind = EventKind(stored.kind)
            observe_event(correction, kind, stored.payload, apply_event(replayed, kind, stored.payload))
        live = running.daemon.on_loop(running.service.state_dict)
        expected_state = replayed.state_dict()
        for key, value in correction.to_state().items():
            expected_state[f"correction/{key}"] = value
        assert live.keys() == expected_state.keys()
        for key in live:
            np.testing.assert_array_equal(live[key], expected_state[key], err_msg=key)
        assert running.service.model_updates == 2 * JOBS_PER_CONNECTION
    finally:
        gate.set()
        observer.dispose()
        for connection in connections.values():
            connection.close()
        running.stop()
