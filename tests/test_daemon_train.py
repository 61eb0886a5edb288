"""`hpcpredict train`: a history replayed as it happened bootstraps the daemon's model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.config import DaemonConfig, LearnerConfig
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.store import Store
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.history import ENDED, STARTED, SUBMITTED, history_events, replay_history
from hpcpredict.workload import load_workload


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
        other = DaemonConfig(learner=LearnerConfig(eta=10.0)).predictor_factory()
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
