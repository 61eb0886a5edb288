"""Damaged checkpoints (hpcpredict/daemon/core/checkpoints.py): each is recognised for what it is, said
in words, removed, and the model restored from the previous checkpoint, the bootstrap one or a
replay of the whole log, bit for bit the model of an uninterrupted run. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import logging
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from testbed.daemon_thread import wait_until_answering
from hpcpredict.cli import main
from hpcpredict.daemon.core.checkpoints import state_to_npz
from hpcpredict.daemon.fronts.client import DaemonClient
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import CheckpointRow, Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn import LearnedPredictor

T0 = 1_700_000_000


def lifecycle(service: PredictionService, job_id: int) -> None:
    request = JobRequest(job_id=job_id, submit_s=T0 + 1000 * job_id, procs=4, requested_s=3600,
                         user_id=job_id % 3)
    service.submitted(request, request.submit_s)
    service.started(job_id, request.submit_s + 10)
    service.ended(job_id, 300 + 20 * job_id, request.submit_s + 310 + 20 * job_id, "COMPLETED")


def assert_same_state(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert sorted(actual) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=key)


def checkpoint_seqs(store: Store) -> list[int]:
    with store.session() as session:
        return sorted(session.scalars(select(CheckpointRow.last_event_seq)))


def damage(store: Store, seq: int, change: Callable[[bytes], bytes]) -> None:
    with store.session() as session, session.begin():
        row = session.scalars(select(CheckpointRow).where(CheckpointRow.last_event_seq == seq)).one()
        row.state_npz = change(row.state_npz)


def without(*names: str) -> Callable[[bytes], bytes]:
    def change(blob: bytes) -> bytes:
        with np.load(io.BytesIO(blob)) as data:
            state = {key: data[key] for key in data.files if key not in names}
        return state_to_npz(state)
    return change


def nan_weight(blob: bytes) -> bytes:
    with np.load(io.BytesIO(blob)) as data:
        state = {key: data[key] for key in data.files}
    state["nag/w"][3] = np.nan
    return state_to_npz(state)


def flipped_inside(blob: bytes) -> bytes:
    """16 bytes changed inside the weights' data (past the member's header and the .npy header)."""
    at = blob.find(b"nag/w.npy") + len("nag/w.npy") + 160
    return blob[:at] + bytes(b ^ 0xFF for b in blob[at:at + 16]) + blob[at + 16:]


DAMAGE = {
    "random bytes": (lambda blob: random.Random(1).randbytes(len(blob)), "it is not an .npz archive ("),
    "empty": (lambda blob: b"", "it is empty (0 bytes)"),
    "truncated": (lambda blob: blob[: len(blob) // 2], "its .npz archive is damaged (BadZipFile"),
    "bytes flipped inside": (flipped_inside, "its array 'nag/w' is damaged (BadZipFile: Bad CRC-32"),
    "an array missing": (without("nag/w"), "it is incomplete (no array 'nag/w')"),
    "NaN weights": (nan_weight, "its array 'nag/w' holds non-finite values (1 NaN, 0 infinite)"),
}


@pytest.fixture
def uninterrupted(store: Store) -> dict[str, np.ndarray]:
    """36 events checkpointed every 10 (checkpoints at 20 and 30 kept), then dropped uncleanly."""
    service = PredictionService(store, checkpoint_every=10, keep_checkpoints=2)
    for job_id in range(1, 13):
        lifecycle(service, job_id)
    assert checkpoint_seqs(store) == [20, 30]
    return service.state_dict()


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(
    store: Store, uninterrupted: dict[str, np.ndarray], kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    change, found = DAMAGE[kind]
    damage(store, 30, change)
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    restarted = PredictionService(store, checkpoint_every=10)
    assert_same_state(restarted.state_dict(), uninterrupted)
    assert restarted.replayed_events == 36 - 20 and restarted.last_event_seq == 36
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("the checkpoint at event 30 (id") and found in m for m in messages), messages
    assert not any("pickled" in m for m in messages)
    assert any("restored from the checkpoint at event 20 and replayed the 16 events" in m for m in messages)
    assert checkpoint_seqs(store) == [20]  # the damaged one removed


def test_a_checkpoint_beyond_the_log_is_not_trusted(store: Store, uninterrupted: dict[str, np.ndarray],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """Restored from an older backup than its checkpoints: the events the checkpoint claims to
    include are not in the log; it must not be taken as valid once the log grows past it."""
    with store.session() as session, session.begin():
        session.execute(update(CheckpointRow).where(CheckpointRow.last_event_seq == 30).values(last_event_seq=999))
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    restarted = PredictionService(store, checkpoint_every=10)
    assert_same_state(restarted.state_dict(), uninterrupted)
    assert any("includes events up to number 999 but the event log ends at 36" in r.getMessage()
               for r in caplog.records)
    assert checkpoint_seqs(store) == [20]


def test_with_every_checkpoint_damaged_the_whole_log_is_replayed(
    store: Store, uninterrupted: dict[str, np.ndarray], caplog: pytest.LogCaptureFixture
) -> None:
    for seq in (20, 30):
        damage(store, seq, DAMAGE["random bytes"][0])
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    restarted = PredictionService(store, checkpoint_every=10)
    assert_same_state(restarted.state_dict(), uninterrupted)  # the log reproduces the model
    assert restarted.replayed_events == 36
    assert any("replaying the whole event log (36 events) from an untrained model, which gives the same model"
               in r.getMessage() for r in caplog.records)
    assert checkpoint_seqs(store) == []
    restarted.close()  # and the next checkpoint is written where the damaged ones were
    assert checkpoint_seqs(store) == [36]


def test_the_bootstrap_checkpoint_is_kept_and_used_when_the_later_ones_are_damaged(store: Store) -> None:
    warmed = LearnedPredictor()
    for job_id in range(1000, 1040):  # a small "history"
        request = JobRequest(job_id, T0 - 10**6 + 500 * job_id, 2, 7200, user_id=job_id % 4)
        warmed.predict(request, request.submit_s)
        warmed.job_started(request, request.submit_s)
        warmed.job_ended(request, 900, request.submit_s + 900)
    service = PredictionService(store, checkpoint_every=10, keep_checkpoints=2)
    service.bootstrap(warmed)
    for job_id in range(1, 15):  # 42 events: checkpoints at 10 ... 40, the last two kept
        lifecycle(service, job_id)
    assert checkpoint_seqs(store) == [0, 30, 40]  # the bootstrap is never pruned
    expected = service.state_dict()
    for seq in (30, 40):
        damage(store, seq, DAMAGE["truncated"][0])
    restarted = PredictionService(store, checkpoint_every=10)
    assert_same_state(restarted.state_dict(), expected)
    assert restarted.replayed_events == 42


def test_a_checkpoint_made_with_other_constants_is_still_refused(store: Store) -> None:
    service = PredictionService(store, checkpoint_every=1)
    lifecycle(service, 1)
    with pytest.raises(ValueError, match="other hyperparameters"):
        PredictionService(store, lambda: LearnedPredictor(eta=1.0))
    assert checkpoint_seqs(store) == [2, 3]  # not damage: nothing removed


# ---------------------------------------------------------------------------- what serve says
def test_serve_starts_and_says_what_it_found_when_the_trained_model_is_damaged(
    short_dir: Path, sample_log: Path
) -> None:
    """Was: "Aborted!" for a truncated checkpoint, raw BadZipFile/KeyError tracebacks, or
    numpy's "contains pickled data" for random bytes; the daemon did not start."""
    db = f"sqlite:///{short_dir / 'state.db'}"
    assert CliRunner().invoke(main, ["train", str(sample_log), "--db", db]).exit_code == 0
    store = Store(db)
    try:
        damage(store, 0, lambda blob: blob[: len(blob) // 3])
    finally:
        store.close()
    log = short_dir / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", str(short_dir / "d.sock"),
             "--http", "", "--spool", str(short_dir / "s.spool")],
            stdout=output, stderr=subprocess.STDOUT,
        )
        try:
            wait_until_answering(str(short_dir / "d.sock"), process, lambda: log.read_text())
            with DaemonClient(str(short_dir / "d.sock")) as client:
                ping = client.request("PING")
            assert (ping["ready"], ping["reason"], ping["trained_jobs"]) == ("0", "untrained", "0")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    text = log.read_text()
    assert "the checkpoint at event 0 (id 1) is unusable: its .npz archive is damaged" in text
    assert "the history `hpcpredict train` taught this model (4,997 jobs) is not in it" in text
    assert "hpcpredict train --replace" in text
    assert "Aborted!" not in text and "Traceback" not in text and "pickled" not in text


def test_a_checkpoint_from_before_the_learner_options_is_still_used(
    store: Store, uninterrupted: dict[str, np.ndarray], caplog: pytest.LogCaptureFixture
) -> None:
    """Checkpoints written before censor_at_limit and feature_scaling existed lack those arrays
    (and those written since per-user experts were retired lack that one); the learner reads
    them as the defaults: not damage."""
    damage(store, 30, without("hyper/censor_at_limit", "hyper/feature_scaling", "hyper/per_user_experts"))
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    restarted = PredictionService(store, checkpoint_every=10)
    assert_same_state(restarted.state_dict(), uninterrupted)
    assert restarted.replayed_events == 36 - 30
    assert not any("unusable" in r.getMessage() for r in caplog.records)
    assert checkpoint_seqs(store) == [20, 30]


def test_a_checkpoint_of_a_learner_with_the_retired_experts_is_refused(store: Store) -> None:
    """A model trained with per-user experts (retired: hpcpredict.retired) is not continued as if
    it had been trained without them: a refusal that says why, not damage to fall back past."""
    service = PredictionService(store, checkpoint_every=1)
    lifecycle(service, 1)
    damage(store, 3, with_experts)
    with pytest.raises(ValueError, match="per-user experts, an option retired"):
        PredictionService(store)
    assert checkpoint_seqs(store) == [2, 3]


def with_experts(blob: bytes) -> bytes:
    with np.load(io.BytesIO(blob)) as data:
        state = {key: data[key] for key in data.files}
    state["hyper/per_user_experts"] = np.array(True)
    return state_to_npz(state)
