"""The SLURM watcher's logic against a scripted SLURM state (the real SLURM runs in
tests/test_slurm_e2e.py): reports each stage once, corrects in time, survives a restart."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from hpcpredict.daemon.handlers import Handlers
from hpcpredict.daemon.protocol import Request
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.store import CorrectionRow, Store
from hpcpredict.slurm.tag import PredictionTag
from hpcpredict.slurm.watcher import SlurmWatcher


@dataclass(frozen=True)
class Job:
    job_id: int
    uid: int = 1000
    gid: int = 1000
    state: str = "PENDING"
    partition: str = "debug"
    name: str = "job"
    cpus: int = 4
    submit_s: int = 1_000
    start_s: int | None = None
    end_s: int | None = None
    time_limit_s: int | None = 600
    admin_comment: str = PredictionTag(3600, 540).format()


class ScriptedSlurm:
    """SLURM as a dict of jobs the test edits; limits set through it are applied to the job."""

    def __init__(self) -> None:
        self.jobs_by_id: dict[int, Job] = {}
        self.limit_updates: list[tuple[int, int]] = []

    def jobs(self) -> list[Job]:
        return list(self.jobs_by_id.values())

    def set_time_limit(self, job_id: int, minutes: int) -> None:
        self.limit_updates.append((job_id, minutes))
        self.jobs_by_id[job_id] = replace(self.jobs_by_id[job_id], time_limit_s=60 * minutes)


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def service(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield PredictionService.open(store)
    store.close()


def watcher_for(service: PredictionService, slurm: ScriptedSlurm, clock: Clock) -> SlurmWatcher:
    handlers = Handlers(service, clock=clock)
    return SlurmWatcher(
        slurm, lambda verb, fields: handlers.call(Request(verb, fields)), service.job_status,
        margin_s=120, clock=clock,
    )


def test_a_job_is_reported_once_per_stage_and_corrected_in_time(service: PredictionService) -> None:
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    watcher = watcher_for(service, slurm, clock)
    slurm.jobs_by_id[1] = Job(1)
    watcher.poll()
    watcher.poll()
    assert service.job_status(1) == "submitted"
    assert service.store.last_event_seq() == 1

    slurm.jobs_by_id[1] = replace(slurm.jobs_by_id[1], state="RUNNING", start_s=1_010)
    clock.now = 1_100
    watcher.poll()
    assert service.job_status(1) == "running" and slurm.limit_updates == []

    clock.now = 1_010 + 600 - 100  # within the 120 s margin of the 600 s limit
    watcher.poll()
    assert slurm.limit_updates == [(1, 14)]  # prediction 540 s + 5 min = 14 min (+1 min = the current limit)
    watcher.poll()  # the new limit is far: nothing more
    assert len(slurm.limit_updates) == 1

    slurm.jobs_by_id[1] = replace(slurm.jobs_by_id[1], state="COMPLETED", end_s=1_700)
    watcher.poll()
    watcher.poll()
    assert service.job_status(1) == "ended" and service.model_updates == 1
    with service.store.session() as session:
        corrections = session.query(CorrectionRow).all()
        assert [(c.job_id, c.new_limit_s) for c in corrections] == [(1, 840)]


def test_a_restarted_watcher_neither_resends_nor_corrects_twice(service: PredictionService) -> None:
    slurm, clock = ScriptedSlurm(), Clock(2_000)
    slurm.jobs_by_id[2] = Job(2, state="RUNNING", start_s=1_500, submit_s=1_400)
    watcher_for(service, slurm, clock).poll()
    events = service.store.last_event_seq()
    assert events == 3 and slurm.limit_updates == [(2, 14)]  # 500 s elapsed, limit 600 s: due

    restarted = watcher_for(service, slurm, clock)
    restarted.poll()
    assert service.store.last_event_seq() == events
    assert slurm.limit_updates == [(2, 14)]


def test_jobs_without_the_mark_are_reported_but_never_corrected(service: PredictionService) -> None:
    slurm, clock = ScriptedSlurm(), Clock(5_000)
    slurm.jobs_by_id[3] = Job(3, state="RUNNING", start_s=4_500, time_limit_s=600, admin_comment="")
    watcher_for(service, slurm, clock).poll()
    assert service.job_status(3) == "running" and slurm.limit_updates == []


def test_a_job_killed_at_a_lowered_limit_is_flagged(service: PredictionService) -> None:
    slurm, clock = ScriptedSlurm(), Clock(9_000)
    slurm.jobs_by_id[4] = Job(4, state="RUNNING", start_s=8_000, submit_s=8_000, time_limit_s=900)
    watcher = watcher_for(service, slurm, clock)
    watcher.poll()  # 1000 s elapsed > limit: the corrector raises it (too late, SLURM killed it)
    slurm.jobs_by_id[4] = replace(slurm.jobs_by_id[4], state="TIMEOUT", end_s=8_930, time_limit_s=900)
    watcher.poll()
    with service.store.session() as session:
        from hpcpredict.daemon.store import JobRow

        row = session.get(JobRow, 4)
        assert row.killed_at_lowered_limit is True
        assert row.learn_rule in {"lower_bound", "bound_met"}


def test_slurm_unreachable_is_counted_not_fatal(service: PredictionService) -> None:
    class Down:
        def jobs(self):
            raise OSError("squeue: Unable to contact slurm controller")

        def set_time_limit(self, job_id: int, minutes: int) -> None:
            raise AssertionError("never called")

    watcher = SlurmWatcher(Down(), lambda verb, fields: {}, service.job_status)
    report = watcher.poll()
    assert report.errors == 1 and "Unable to contact" in report.last_error
