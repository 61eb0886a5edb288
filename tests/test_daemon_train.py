"""`hpcpredict train`: a history replayed as it happened bootstraps the daemon's model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.instants import Instant
from hpcpredict.learn.history import history_events, replay_history
from hpcpredict.logs.workload import load_workload

SUBMITTED, STARTED, ENDED = Instant.SUBMISSION, Instant.START, Instant.TERMINATION


def job(job_id: int, submit_s: int, wait_s: int, run_s: int, user_id: int = 1) -> Job:
    return Job(JobRequest(job_id, submit_s, 2, 3600, user_id), run_s, wait_s=wait_s)


def test_history_events_follow_the_log_with_the_reference_order() -> None:
    jobs = [job(1, 0, 10, 90), job(2, 100, 0, 50), job(3, 100, -1, 5)]
    events, unknown = history_events(jobs, offset_s=1000)
    assert unknown == 1
    got = [(e.time_s, e.kind, e.request.job_id) for e in events]
    assert got == [
        (1000, SUBMITTED, 1),
        (1010, STARTED, 1),
        # at 1100: job 1 ends, jobs 2 and 3 are submitted and start: submissions, end, starts
        (1100, SUBMITTED, 2),
        (1100, SUBMITTED, 3),
        (1100, ENDED, 1),
        (1100, STARTED, 2),
        (1100, STARTED, 3),
        (1105, ENDED, 3),
        (1150, ENDED, 2),
    ]
    assert all(e.request.submit_s == jobs[e.request.job_id - 1].submit_s + 1000 for e in events)


def test_replay_trains_once_per_job_and_empties_the_running_sets(sample_log: Path) -> None:
    workload = load_workload(sample_log)
    learner = DaemonConfig().predictor_factory()
    replay = replay_history(workload.jobs, learner, offset_s=workload.header.unix_start_time or 0)
    assert replay.jobs == len(workload.jobs) == learner.nag.state.t
    assert all(not user.running for user in learner.features.users.values())
    assert learner.state_dict()["pending/job_id"].size == 0


def test_train_command_bootstraps_the_daemon(sample_log: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    result = CliRunner().invoke(main, ["train", str(sample_log), "--db", db])
    assert result.exit_code == 0, result.output
    assert "4,997 learning steps" in result.output

    workload = load_workload(sample_log)
    expected = DaemonConfig().predictor_factory()
    replay_history(workload.jobs, expected, offset_s=workload.header.unix_start_time or 0)
    store = Store(db)
    try:
        service = PredictionService.open(store, DaemonConfig().predictor_factory)
        state = service.state_dict()
        assert all(np.array_equal(state[key], value) for key, value in expected.state_dict().items())
        assert service.last_event_seq == 0
    finally:
        store.close()

    again = CliRunner().invoke(main, ["train", str(sample_log), "--db", db])
    assert again.exit_code == 1 and "--replace" in again.output
    replaced = CliRunner().invoke(main, ["train", str(sample_log), "--db", db, "--replace"])
    assert replaced.exit_code == 0, replaced.output


def test_a_live_daemon_cannot_be_bootstrapped_again(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        service = PredictionService.open(store, DaemonConfig().predictor_factory)
        service.submitted(JobRequest(1, 10, 1, 60, 5), 10)
        with pytest.raises(ValueError, match="live events"):
            service.bootstrap(DaemonConfig().predictor_factory(), replace=True)
    finally:
        store.close()


def test_a_model_with_other_learner_constants_is_refused(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        service = PredictionService.open(store, DaemonConfig().predictor_factory)
        other = DaemonConfig(learner=LearnerSettings(eta=10.0)).predictor_factory()
        with pytest.raises(ValueError, match="eta"):
            service.bootstrap(other)
        assert store.latest_checkpoint() is None  # refused before anything was written
    finally:
        store.close()


def test_train_with_a_config_file(sample_log: Path, tmp_path: Path) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text(f'[daemon]\ndb = "sqlite:///{tmp_path / "x.db"}"\ntime_zone = "Europe/Stockholm"\n'
                      '[learner]\neta = 2000.0\n')
    result = CliRunner().invoke(main, ["train", str(sample_log), "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "x.db").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text("[learner]\netta = 1\n")
    result = CliRunner().invoke(main, ["train", str(sample_log), "--config", str(bad)])
    assert result.exit_code == 1 and "unknown key(s) ['etta'] in [learner]" in result.output


def _moved_to(sample_log: Path, tmp_path: Path, unix_start_s: int) -> Path:
    """The sample with its UnixStartTime moved (every job keeps its offset from it)."""
    text = sample_log.read_text()
    lines = [f"; UnixStartTime: {unix_start_s}" if line.startswith("; UnixStartTime:") else line
             for line in text.splitlines()]
    moved = tmp_path / "moved.swf"
    moved.write_text("\n".join(lines) + "\n")
    return moved


def test_a_history_years_old_is_flagged_by_train_ping_and_health(sample_log: Path, tmp_path: Path) -> None:
    """The bundled sample is from 1996: every user's time since last job extrapolates."""
    from hpcpredict.daemon.fronts.handlers import Handlers

    db = f"sqlite:///{tmp_path / 'old.db'}"
    result = CliRunner().invoke(main, ["train", str(sample_log), "--db", db])
    assert result.exit_code == 0, result.output
    assert "warning: the newest job the model learned ended" in result.output
    assert "fall back to their requests" in result.output
    store = Store(db)
    try:
        service = PredictionService.open(store, DaemonConfig().predictor_factory)
        ping = Handlers(service).ping({})
        assert ping["stale"] == 1 and ping["history_age_d"] > 365 * 25
    finally:
        store.close()


def test_a_recent_history_is_not_flagged(sample_log: Path, tmp_path: Path) -> None:
    import time as clock

    from hpcpredict.daemon.fronts.handlers import Handlers

    # the last job ends about 84 days after the start: 100 days ago leaves it ~16 days old
    recent = _moved_to(sample_log, tmp_path, int(clock.time()) - 100 * 86_400)
    db = f"sqlite:///{tmp_path / 'recent.db'}"
    result = CliRunner().invoke(main, ["train", str(recent), "--db", db])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    store = Store(db)
    try:
        service = PredictionService.open(store, DaemonConfig().predictor_factory)
        ping = Handlers(service).ping({})
        assert ping["stale"] == 0 and 0 <= ping["history_age_d"] <= 30
    finally:
        store.close()


def test_an_untrained_model_is_flagged() -> None:
    from hpcpredict.daemon.core.staleness import history_age
    from hpcpredict.learn.features import FeatureState

    age = history_age(FeatureState(), now_s=1e9)
    assert age.stale and age.age_days is None and "no job yet" in age.warning()
