"""The SLURM watcher's logic against a scripted SLURM state (the real SLURM runs in
tests/test_slurm_e2e.py): reports each stage once, corrects in time, survives a restart."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from hpcpredict.corrections.starvation import guard_from, xfactor_guard_wait_s
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.fronts.server import Daemon
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import CorrectionRow, EventRow, JobRow, Store
from hpcpredict.jobs import JobRequest
from hpcpredict.slurm import adapter
from hpcpredict.slurm.guard import (
    WAITING_FOR_MACHINE, GuardStatus, guard_limit_s, guard_status, guard_threshold_s, plugin_limit_s,
    slack_limit_s,
)
from hpcpredict.slurm.tag import BACKFILL_NO_LIMIT_S, PredictionTag
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
    eligible_s: int | None = None
    state_reason: str = "Priority"

    @property
    def update_id(self) -> int:  # not an array task (SlurmJob.update_id)
        return self.job_id


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


def watcher_for(
    service: PredictionService, slurm: ScriptedSlurm, clock: Clock, *, guard_s: int | None = 86_400,
    xfactor: float | None = None, slack_s: int | None = None, slack_after_s: int | None = None,
    **options
) -> SlurmWatcher:
    """The guard's settings as the daemon's configuration reads them (`guard_from`)."""
    guard = guard_from(guard_s, rule="wait" if xfactor is None else "xfactor", xfactor=xfactor,
                       slack_s=slack_s, slack_after_s=slack_after_s)
    return SlurmWatcher(slurm, service.record, service.job_status, margin_s=120, clock=clock,
                        guard_settings=guard, **options)


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


def test_an_unchanged_job_is_not_reported_again_but_a_failed_report_is_retried(
    service: PredictionService,
) -> None:
    """A poll skips what its last complete report of a job saw (a large queue's pending jobs,
    poll after poll): the store is not asked again; a report that failed is made at the next
    look though SLURM shows the job unchanged; a marked running job is corrected all the same."""
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    asked: list[int] = []
    recorded: list[object] = []
    failing = {"once": True}

    def record(event: object) -> object:
        job_id = getattr(event, "job_id", None) or event.request.job_id  # type: ignore[attr-defined]
        if job_id == 2 and failing.pop("once", False):
            raise RuntimeError("the store is busy")
        recorded.append(event)
        return service.record(event)

    def job_status(job_id: int) -> str | None:
        asked.append(job_id)
        return service.job_status(job_id)

    watcher = SlurmWatcher(slurm, record, job_status, margin_s=120, clock=clock)
    slurm.jobs_by_id[1] = Job(1, admin_comment="")  # not marked
    slurm.jobs_by_id[2] = Job(2)
    slurm.jobs_by_id[3] = Job(3, state="RUNNING", submit_s=900, start_s=950)
    watcher.poll()
    assert sorted(asked) == [1, 2, 3] and service.job_status(2) is None and watcher.report.errors == 1
    asked.clear()
    clock.now = 950 + 600 - 100  # job 3 within the margin of its lowered limit
    watcher.poll()
    assert asked == [2] and service.job_status(2) == "submitted"  # retried; 1 and 3 skipped
    assert slurm.limit_updates == [(3, 14)]
    asked.clear()
    before = len(recorded)
    watcher.poll()
    assert asked == [] and len(recorded) == before  # nothing new: nothing asked, nothing sent


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


def test_the_mark_gives_the_submission_its_token_its_processors_and_the_users_request(
    service: PredictionService,
) -> None:
    """The watcher hands the service a typed `Submitted` built from SLURM's view and the mark:
    the request and processors the plugin predicted for (SLURM allocated 16 CPUs, the limit was
    lowered to 10 min), and the token under which PREDICT kept its features."""
    _, token = service.serve(JobRequest(-1, 900, 4, 3600, 1000), 900)
    mark = PredictionTag(3600, 540, "lower", 4, token).format()
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    slurm.jobs_by_id[9] = Job(9, cpus=16, submit_s=900, admin_comment=mark)
    watcher_for(service, slurm, clock).poll()
    with service.store.session() as session:
        row = session.get(JobRow, 9)
        payload = json.loads(session.scalar(select(EventRow.payload_json).where(EventRow.job_id == 9)))
    assert (row.procs, row.requested_s, row.limit_s) == (4, 3600, 600)
    assert payload["features"][0] == 3600.0 and payload["features"][7] == 4.0
    assert service.feature_tokens.counts.taken == 1


def test_a_job_first_seen_ended_is_submitted_from_its_mark_before_its_end(
    service: PredictionService,
) -> None:
    """Its whole life fell between two polls: the watcher's END carries the mark's prediction
    and token, so the submission is recorded first, with PREDICT's features and the prediction
    SLURM acted on, and the job is learned as a seen job (not ``unseen``)."""
    _, token = service.serve(JobRequest(-1, 900, 4, 3600, 1000), 900)
    mark = PredictionTag(3600, 540, "lower", 4, token).format()
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    slurm.jobs_by_id[9] = Job(9, state="COMPLETED", submit_s=900, start_s=905, end_s=990, admin_comment=mark)
    watcher_for(service, slurm, clock).poll()
    with service.store.session() as session:
        kinds = session.scalars(select(EventRow.kind).where(EventRow.job_id == 9).order_by(EventRow.seq)).all()
        row = session.get(JobRow, 9)
    assert kinds == ["submitted", "ended"]
    assert row.learn_rule != "unseen" and row.run_s == 85
    assert service.feature_tokens.counts.taken == 1


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
        from hpcpredict.daemon.core.store import JobRow

        row = session.get(JobRow, 4)
        assert row.killed_at_lowered_limit is True
        assert row.learn_rule in {"lower_bound", "bound_met"}


def test_a_job_without_a_time_limit_is_said_once_and_never_an_error(
    service: PredictionService, caplog: pytest.LogCaptureFixture
) -> None:
    """No --time, no DefaultTime (squeue: UNLIMITED): nothing to describe the job by. It is left
    out for its whole life, said once at INFO, never an ERROR at each poll; a job with a limit
    beside it is reported as usual."""
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    watcher = watcher_for(service, slurm, clock)
    slurm.jobs_by_id[5] = Job(5, time_limit_s=None, admin_comment="")
    slurm.jobs_by_id[6] = Job(6, admin_comment="")
    with caplog.at_level("INFO", logger="hpcpredict.slurm.watcher"):
        watcher.poll()
        slurm.jobs_by_id[5] = replace(slurm.jobs_by_id[5], state="RUNNING", start_s=1_010)
        watcher.poll()
        slurm.jobs_by_id[5] = replace(slurm.jobs_by_id[5], state="COMPLETED", end_s=1_100)
        report = watcher.poll()
    assert report.errors == 0 and report.unlimited == 1
    assert [r.levelname for r in caplog.records if "job 5" in r.getMessage()] == ["INFO"]
    assert service.job_status(5) is None and service.job_status(6) == "submitted"


def test_the_year_slurms_backfill_gives_a_job_without_a_limit_is_no_request(
    service: PredictionService, caplog: pytest.LogCaptureFixture
) -> None:
    """SLURM's backfill scheduler starts a job submitted without --time (partition MaxTime=INFINITE)
    with a year's limit, where its main scheduler leaves it UNLIMITED (seen on a real 26.05, where
    such a job was learned as a one-year request). First seen so, it is left out as a job without
    a limit; a job the plugin marked with a year asked for is reported as usual."""
    slurm, clock = ScriptedSlurm(), Clock(1_000)
    watcher = watcher_for(service, slurm, clock)
    slurm.jobs_by_id[7] = Job(7, state="RUNNING", start_s=990, time_limit_s=BACKFILL_NO_LIMIT_S, admin_comment="")
    slurm.jobs_by_id[8] = Job(8, time_limit_s=BACKFILL_NO_LIMIT_S,
                              admin_comment=f"hpcpredict:request_s={BACKFILL_NO_LIMIT_S},prediction_s=600,mode=record")
    with caplog.at_level("INFO", logger="hpcpredict.slurm.watcher"):
        watcher.poll()
        slurm.jobs_by_id[7] = replace(slurm.jobs_by_id[7], state="COMPLETED", end_s=1_100)
        report = watcher.poll()
    assert report.errors == 0 and report.unlimited == 1
    assert any("job 7 has no time limit" in r.getMessage() for r in caplog.records)
    assert service.job_status(7) is None and service.job_status(8) == "submitted"


def test_slurm_unreachable_is_counted_not_fatal(service: PredictionService) -> None:
    class Down:
        def jobs(self):
            raise OSError("squeue: Unable to contact slurm controller")

        def set_time_limit(self, job_id: int, minutes: int) -> None:
            raise AssertionError("never called")

    watcher = SlurmWatcher(Down(), lambda event: None, service.job_status)
    report = watcher.poll()
    assert report.errors == 1 and "Unable to contact" in report.last_error


def test_a_poll_that_raises_outside_any_job_does_not_end_the_watchers_thread(
    service: PredictionService,
) -> None:
    """Its thread is the only one that corrects: a failure outside the per-job handling (here
    the clock, once, at the first poll: its first call is the watcher's creation, from which its
    heartbeat's age counts) is logged and counted, and the next poll comes as usual."""
    slurm = ScriptedSlurm()
    slurm.jobs_by_id[1] = Job(1)
    calls = []

    def flaky_clock() -> float:
        calls.append(None)
        if len(calls) == 2:
            raise RuntimeError("clock went away")
        return 1_000

    watcher = SlurmWatcher(slurm, service.record, service.job_status, interval_s=0.01, clock=flaky_clock)
    watcher.start()
    try:
        deadline = time.monotonic() + 30
        while watcher.report.reported == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        watcher.stop()
    assert watcher.report.errors >= 1 and "clock went away" in watcher.report.last_error
    assert watcher.report.reported == 1 and service.job_status(1) == "submitted"


# ---------------------------------------------------------------------- the starvation guard
DAY = 86_400
LOWERED = PredictionTag(3600, 540, "lower").format()  # the plugin in lower mode: limit 9 min


def starving_machine(now_s: int) -> dict[int, Job]:
    """Job 9 has waited 25 h for processors; 1 runs and 2 pends at the limits the plugin set; 3
    pends at a limit its user lowered since; 4 waits on a dependency for 3 days."""
    return {
        9: Job(9, submit_s=now_s - 25 * 3600, state_reason="Resources", time_limit_s=7200, admin_comment=""),
        1: Job(1, state="RUNNING", submit_s=now_s - 3600, start_s=now_s - 300, admin_comment=LOWERED),
        2: Job(2, submit_s=now_s - 600, time_limit_s=540, admin_comment=LOWERED),
        3: Job(3, submit_s=now_s - 600, time_limit_s=300, admin_comment=LOWERED),
        4: Job(4, submit_s=now_s - 3 * DAY, state_reason="Dependency", admin_comment=""),
    }


def test_the_guard_raises_lowered_limits_to_requests_while_a_job_starves(service: PredictionService) -> None:
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = starving_machine(now)
    watcher = watcher_for(service, slurm, clock, guard_s=DAY)
    watcher.poll()
    assert watcher.guard.active and watcher.guard.job_id == 9 and watcher.guard.waited_s == 25 * 3600
    assert sorted(slurm.limit_updates) == [(1, 60), (2, 60)]  # the requests, 3600 s
    assert watcher.report.guard_changes == 2
    watcher.poll()  # already at their requests: nothing more
    assert len(slurm.limit_updates) == 2
    with service.store.session() as session:
        assert sorted((c.job_id, c.new_limit_s) for c in session.query(CorrectionRow)) == [(1, 3600), (2, 3600)]

    # Job 9 starts: the guard turns off; pending job 2 gets its lowered limit again, running job 1
    # keeps its request (a running job's limit is never lowered), job 3 keeps its user's limit.
    slurm.jobs_by_id[9] = replace(slurm.jobs_by_id[9], state="RUNNING", start_s=now + 10)
    clock.now = now + 20
    watcher.poll()
    assert not watcher.guard.active
    assert slurm.limit_updates[2:] == [(2, 9)]
    assert slurm.jobs_by_id[1].time_limit_s == 3600 and slurm.jobs_by_id[3].time_limit_s == 300


def test_a_running_job_the_guard_gives_its_request_is_not_corrected_below_it_in_the_same_look(
    service: PredictionService,
) -> None:
    """Job 1 is within the margin of its lowered 9 minutes when the guard turns on: the guard
    gives it its hour, and the correction due on the old limit (9 -> 14 minutes) is not applied
    over it, now or at the next look."""
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = starving_machine(now)
    slurm.jobs_by_id[1] = replace(slurm.jobs_by_id[1], start_s=now - 500)
    watcher = watcher_for(service, slurm, clock, guard_s=DAY)
    watcher.poll()
    clock.now += 10
    watcher.poll()
    assert sorted(slurm.limit_updates) == [(1, 60), (2, 60)]
    assert slurm.jobs_by_id[1].time_limit_s == 3600 and watcher.report.corrections == 0


def test_the_guard_ignores_jobs_not_waiting_for_processors_and_can_be_off(service: PredictionService) -> None:
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = starving_machine(now)
    del slurm.jobs_by_id[9]  # only the job waiting on a dependency has waited long
    watcher = watcher_for(service, slurm, clock, guard_s=DAY)
    watcher.poll()
    assert not watcher.guard.active and slurm.limit_updates == []

    slurm.jobs_by_id = starving_machine(now)
    off = watcher_for(service, slurm, clock, guard_s=None)
    off.poll()
    assert not off.guard.active and slurm.limit_updates == []


def test_the_guard_waits_from_eligibility_and_leaves_older_marks_lowered(service: PredictionService) -> None:
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = starving_machine(now)
    # Submitted 25 h ago with --begin: eligible only 1 h ago, so not starving.
    slurm.jobs_by_id[9] = replace(slurm.jobs_by_id[9], eligible_s=now - 3600)
    # A pending job at its request marked by a plugin older than the guard (no mode): a plugin in
    # record mode leaves such marks too, so it is never lowered by the guard.
    slurm.jobs_by_id[5] = Job(5, submit_s=now - 600, time_limit_s=3600,
                              admin_comment=PredictionTag(3600, 540).format())
    watcher = watcher_for(service, slurm, clock, guard_s=DAY)
    watcher.poll()
    assert not watcher.guard.active and watcher.guard.job_id == 9 and watcher.guard.waited_s == 3600
    assert slurm.limit_updates == []


def test_predict_tells_the_plugin_to_hold_lowering_while_the_guard_is_on(service: PredictionService) -> None:
    handlers = Handlers(service, clock=Clock(10 * DAY))
    ask = b"PREDICT uid=1000 procs=4 time_limit=3600"
    assert b"lower=" not in handlers.handle_line(ask)
    assert b" lower=1" in handlers.handle_line(b"PING")
    handlers.lowering_hold = lambda: "starvation_guard"
    answer = handlers.handle_line(ask).decode()
    assert answer.startswith("OK prediction=") and " lower=0 hold=starvation_guard" in answer
    assert b" lower=0" in handlers.handle_line(b"PING")


# ---------------------------------------------------------------------------- the xfactor rule
TEN_MINUTES, TEN_HOURS = 600, 36_000


def waiting(job_id: int, request_s: int, waited_s: int, now_s: int) -> Job:
    """A job pending for processors for `waited_s`, marked by the plugin in lower mode with a
    `request_s` request and a one-minute prediction, so its limit is the lowered minute."""
    return Job(job_id, submit_s=now_s - waited_s, state_reason="Resources", time_limit_s=60,
               admin_comment=PredictionTag(request_s, 60, "lower").format())


def blocked_by_a_lowered_job(now_s: int, *waiters: Job) -> dict[int, Job]:
    """`waiters` pend behind job 1, running on the 9 minutes the plugin lowered its hour to."""
    blocker = Job(1, state="RUNNING", submit_s=now_s - 3600, start_s=now_s - 300, time_limit_s=540,
                  admin_comment=LOWERED)
    return {1: blocker, **{job.job_id: job for job in waiters}}


def test_the_xfactor_rule_protects_a_short_request_long_before_the_cap(service: PredictionService) -> None:
    """X = 2, cap 24 h: a job that asked for 10 minutes has waited its request at 10 minutes
    (expansion factor 2) and turns the guard on, to the second; one that asked for 10 hours has
    not, after the same wait."""
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now - 1)
    slurm.jobs_by_id = blocked_by_a_lowered_job(now, waiting(7, TEN_MINUTES, TEN_MINUTES, now))
    watcher = watcher_for(service, slurm, clock, guard_s=DAY, xfactor=2.0)
    watcher.poll()  # 599 s
    assert not watcher.guard.active and watcher.guard.threshold_s == TEN_MINUTES
    assert slurm.limit_updates == []
    clock.now = now
    watcher.poll()  # 600 s
    assert watcher.guard.active and watcher.guard.job_id == 7 and watcher.guard.waited_s == TEN_MINUTES
    # the blocker gets its hour back, the waiting job its own 10 minutes (it sat at the plugin's)
    assert sorted(slurm.limit_updates) == [(1, 60), (7, 10)]

    slurm = ScriptedSlurm()
    slurm.jobs_by_id = blocked_by_a_lowered_job(now, waiting(7, TEN_HOURS, TEN_MINUTES, now))
    patient = watcher_for(service, slurm, clock, guard_s=DAY, xfactor=2.0)
    patient.poll()
    assert not patient.guard.active and patient.guard.threshold_s == TEN_HOURS
    assert slurm.limit_updates == []


def test_the_xfactor_rule_measures_by_the_request_in_the_mark_not_the_lowered_limit(
    service: PredictionService,
) -> None:
    """A 10-hour request lowered to 10 minutes is still a 10-hour request; a job the plugin did
    not mark is measured by its limit, which is its request; one with neither waits the cap."""
    now = 10 * DAY
    clock = Clock(now)
    lowered = Job(7, submit_s=now - TEN_MINUTES, state_reason="Priority", time_limit_s=TEN_MINUTES,
                  admin_comment=PredictionTag(TEN_HOURS, TEN_MINUTES, "lower").format())
    unmarked = replace(lowered, admin_comment="")
    unlimited = replace(unmarked, time_limit_s=None)
    for job, active, threshold_s in ((lowered, False, TEN_HOURS), (unmarked, True, TEN_MINUTES),
                                     (unlimited, False, DAY)):
        slurm = ScriptedSlurm()
        slurm.jobs_by_id = {job.job_id: job}
        watcher = watcher_for(service, slurm, clock, guard_s=DAY, xfactor=2.0)
        watcher.poll()
        assert (watcher.guard.active, watcher.guard.threshold_s) == (active, threshold_s), job


def test_the_xfactor_rule_is_capped_by_the_guard_and_judges_only_the_longest_waiting_job() -> None:
    now = 10 * DAY
    two_days = waiting(7, 2 * DAY, DAY, now)  # (X - 1) * request = 48 h: the cap, 24 h, first
    assert guard_status([two_days], now, DAY, 2.0) == GuardStatus(True, 7, DAY, DAY)
    assert not guard_status([two_days], now - 1, DAY, 2.0).active
    # The head, waiting 20 min on a 10-hour request, is not due; a one-minute job behind it that
    # has waited 15 times its request is not judged: the simulator judges its head alone.
    head, short = waiting(7, TEN_HOURS, 1200, now), waiting(8, 60, 900, now)
    assert guard_status([short, head], now, DAY, 2.0) == GuardStatus(False, 7, 1200, TEN_HOURS)


@pytest.mark.parametrize("xfactor", [1.5, 2.0, 5.0, 1.0001])
def test_the_live_threshold_is_the_simulators(xfactor: float) -> None:
    """`guard_threshold_s` is `xfactor_guard_wait_s`, the simulator's, job for job (ceil
    included: 1.5 x a 7-s request protects at 4 s)."""
    now = 10 * DAY
    requests_s = np.array([1, 7, 60, 599, TEN_MINUTES, 3601, TEN_HOURS, DAY, 7 * DAY])
    simulator = xfactor_guard_wait_s(requests_s, xfactor, DAY)
    live = [guard_threshold_s(waiting(1, int(r), 0, now), DAY, xfactor) for r in requests_s]
    assert live == simulator.tolist()
    assert guard_threshold_s(waiting(1, 7, 0, now), DAY, 1.5) == 4


def todays_rule(jobs: list[Job], now_s: int, guard_s: int) -> tuple[bool, int | None, int]:
    """The wait rule as it was before the xfactor rule: on when some job pending for the machine
    has waited `guard_s`; the longest-waiting one (the first of equals) and its wait."""
    waits = [(now_s - (job.eligible_s or job.submit_s), job.job_id) for job in jobs
             if job.state == "PENDING" and job.state_reason in WAITING_FOR_MACHINE]
    if not waits:
        return False, None, 0
    waited_s, job_id = max(waits, key=lambda wait: wait[0])
    return any(wait >= guard_s for wait, _ in waits), job_id, max(0, waited_s)


pending_jobs = st.lists(st.builds(
    Job,
    job_id=st.integers(1, 10_000),
    state=st.sampled_from(["PENDING", "RUNNING"]),
    submit_s=st.integers(0, 3 * DAY),
    eligible_s=st.one_of(st.none(), st.integers(0, 3 * DAY)),
    state_reason=st.sampled_from(["Priority", "Resources", "None", "Dependency", "JobHeldUser"]),
    time_limit_s=st.one_of(st.none(), st.integers(0, 3 * DAY)),
    admin_comment=st.one_of(st.just(""), st.builds(lambda r: PredictionTag(r, 60, "lower").format(),
                                                   st.integers(0, 3 * DAY))),
), max_size=8)


@settings(max_examples=300, deadline=None)
@given(jobs=pending_jobs, guard_s=st.integers(60, 2 * DAY))
def test_without_an_xfactor_the_guard_decides_as_it_always_has(jobs: list[Job], guard_s: int) -> None:
    now = 3 * DAY
    status = guard_status(jobs, now, guard_s)
    assert (status.active, status.job_id, status.waited_s) == todays_rule(jobs, now, guard_s)
    assert status.threshold_s == (None if status.job_id is None else guard_s)


def test_the_guard_log_says_which_threshold_applied(service: PredictionService,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The wait rule's line as it always was; the xfactor rule's in seconds, with the rule."""
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = starving_machine(now)
    with caplog.at_level(logging.WARNING, logger="hpcpredict.slurm.watcher"):
        watcher_for(service, slurm, clock, guard_s=DAY).poll()
        slurm.jobs_by_id = blocked_by_a_lowered_job(now, waiting(7, TEN_MINUTES, 605, now))
        watcher_for(service, slurm, clock, guard_s=DAY, xfactor=2.0).poll()
    assert [record.getMessage() for record in caplog.records] == [
        "starvation guard on: job 9 has waited 25.0 h (>= 24.0 h): lowered limits go back to the "
        "requests and new jobs are not lowered",
        "starvation guard on: job 7 has waited 605 s (>= 600 s: an expansion factor of 2 by its "
        "request, or 24.0 h, whichever first): lowered limits go back to the requests and new jobs "
        "are not lowered",
    ]


def test_the_daemon_gives_its_watcher_the_xfactor_and_shows_it(
    service: PredictionService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """server.py's wiring: the configured xfactor reaches the watcher and /health's
    ``starvation_guard``, beside the guard's duration and the threshold in force."""
    now = int(time.time())  # the daemon's watcher reads the real clock
    slurm = ScriptedSlurm()
    slurm.name = "scripted"  # type: ignore[attr-defined]
    slurm.jobs_by_id = blocked_by_a_lowered_job(now, waiting(7, TEN_MINUTES, 700, now))
    monkeypatch.setattr(adapter, "select_backend", lambda name: slurm)
    config = DaemonConfig(db=service.store.url, socket=str(tmp_path / "d.sock"), http="",
                          slurm=True, starvation_guard="24h", starvation_guard_xfactor=2.0)
    daemon = Daemon(config, service)
    daemon.writer.start()
    daemon._start_watcher()
    try:
        # Until the first look has judged the guard: `report.polls` counts a look as it begins,
        # before SLURM is read (once, under load, /health was read between the two).
        deadline = time.monotonic() + 30
        while daemon.watcher.guard.job_id is None and time.monotonic() < deadline:
            time.sleep(0.05)
        guard = daemon.health()["starvation_guard"]
    finally:
        daemon.watcher.stop()
        daemon.writer.stop()
    assert daemon.watcher.xfactor == 2.0 and daemon.watcher.report.errors == 0, daemon.watcher.report
    assert guard["waited_s"] >= 700, guard
    assert guard == {"after_s": DAY, "xfactor": 2.0, "slack_s": None, "slack_after_s": None,
                     "active": True, "job_id": 7, "waited_s": guard["waited_s"],
                     "threshold_s": TEN_MINUTES, "slack": False}


def test_a_stuck_store_writer_costs_the_watcher_no_correction(
    service: PredictionService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """server.py's wiring with the writer held (a task that never ends): the watcher's report of a
    running job it has never seen waits `WATCHER_RECORD_S`, fails, is logged and counted, and the
    job's limit is raised in SLURM all the same; freed, the writer records the queued events and
    the next look sends nothing twice. A watcher blocked on the writer would let SLURM kill the
    job at its lowered limit."""
    from hpcpredict.daemon.fronts import server

    monkeypatch.setattr(server, "WATCHER_RECORD_S", 0.5)
    now = int(time.time())  # the daemon's watcher reads the real clock
    slurm = ScriptedSlurm()
    slurm.name = "scripted"  # type: ignore[attr-defined]
    # running for 500 s under a lowered 600 s limit (request 1 h): due for a correction
    slurm.jobs_by_id[1] = Job(1, state="RUNNING", submit_s=now - 900, start_s=now - 500)
    monkeypatch.setattr(adapter, "select_backend", lambda name: slurm)
    config = DaemonConfig(db=service.store.url, socket=str(tmp_path / "d.sock"), http="", slurm=True,
                          slurm_interval_s=3600, correction_margin_s=120)
    daemon = Daemon(config, service)
    daemon.writer.start()
    held = threading.Event()
    daemon.writer.submit(held.wait)  # the writer is stuck until the test sets it
    daemon._start_watcher()
    try:
        deadline = time.monotonic() + 30
        while not slurm.limit_updates and time.monotonic() < deadline:
            time.sleep(0.05)
        report = daemon.watcher.report
        assert slurm.limit_updates and slurm.limit_updates[0][0] == 1, report
        assert report.errors >= 1 and "has not recorded" in report.last_error, report
    finally:
        held.set()
        daemon.watcher.stop()
        daemon.writer.stop()
    assert service.job_status(1) is not None  # the queued events were recorded once freed


# ---------------------------------------------------------------------------- the slack's stage
TWO_HOURS, FOUR_HOURS = 7_200, 14_400


def slack_stage_machine(now_s: int, waited_s: int) -> dict[int, Job]:
    """Job 9 has waited `waited_s` for processors (a 10 h request lowered to 1 min). Running:
    1 at the 9 minutes its 10 h were lowered to; 2 at 150 minutes of a 3 h request, within the
    2 h slack of it. Pending: 3 at the 9 minutes the plugin set on 10 h, 4 held at its 10 h
    request (the plugin asked to hold lowering), 5 at a limit its user set since."""
    ten_hours = PredictionTag(TEN_HOURS, 540, "lower").format()
    return {
        9: waiting(9, TEN_HOURS, waited_s, now_s),
        1: Job(1, state="RUNNING", submit_s=now_s - 3600, start_s=now_s - 300, time_limit_s=540,
               admin_comment=ten_hours),
        2: Job(2, state="RUNNING", submit_s=now_s - 3600, start_s=now_s - 300, time_limit_s=9_000,
               admin_comment=PredictionTag(10_800, 9_000, "lower").format()),
        3: Job(3, submit_s=now_s - 600, time_limit_s=540, admin_comment=ten_hours),
        4: Job(4, submit_s=now_s - 600, time_limit_s=TEN_HOURS, admin_comment=ten_hours),
        5: Job(5, submit_s=now_s - 600, time_limit_s=300, admin_comment=ten_hours),
    }


def test_the_slack_stage_puts_pending_limits_at_request_less_the_slack_then_the_guard_at_requests(
    service: PredictionService,
) -> None:
    """Slack 2 h from 4 h, guard 24 h. At 4 h of waiting: the pending jobs hpcpredict lowered get
    8 h (10 h less 2 h), the held one too, the user's limit stays; running job 1, below its 8 h,
    gets its 10 h, as the simulator pins it; job 2, already within the slack, keeps its limit;
    PREDICT holds lowering. At 24 h, every lowered limit goes to its request. When the queue is
    calm again, pending jobs get the plugin's limits back; running ones keep theirs."""
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = slack_stage_machine(now, FOUR_HOURS - 1)
    watcher = watcher_for(service, slurm, clock, guard_s=DAY, slack_s=TWO_HOURS, slack_after_s=FOUR_HOURS)
    watcher.poll()  # not yet: the held job gets the plugin's limit, as without a slack
    assert not watcher.guard.slack and watcher.holds_lowering() is None and slurm.limit_updates == [(4, 9)]
    slurm.jobs_by_id[4] = replace(slurm.jobs_by_id[4], time_limit_s=TEN_HOURS)  # held again
    slurm.limit_updates.clear()

    clock.now = now + 1
    watcher.poll()
    assert watcher.guard.slack and not watcher.guard.active
    assert watcher.holds_lowering() == "starvation_guard_slack"
    assert sorted(slurm.limit_updates) == [(1, 600), (3, 480), (4, 480), (9, 480)]
    watcher.poll()  # a second look changes nothing
    assert len(slurm.limit_updates) == 4

    clock.now = now + 1 - FOUR_HOURS + DAY  # 24 h of waiting
    for job_id in (1, 2):  # (jobs that started 5 minutes ago, far from their limits)
        slurm.jobs_by_id[job_id] = replace(slurm.jobs_by_id[job_id], start_s=clock.now - 300)
    watcher.poll()
    assert watcher.guard.active and not watcher.guard.slack and watcher.holds_lowering() == "starvation_guard"
    assert sorted(slurm.limit_updates[4:]) == [(2, 180), (3, 600), (4, 600), (9, 600)]

    for job_id in (9, 3):  # job 9 and job 3 start at their requests; 4 and 5 pend, not for long
        slurm.jobs_by_id[job_id] = replace(slurm.jobs_by_id[job_id], state="RUNNING", start_s=clock.now)
    for job_id in (4, 5):
        slurm.jobs_by_id[job_id] = replace(slurm.jobs_by_id[job_id], submit_s=clock.now - 600)
    clock.now += 10
    watcher.poll()
    assert not watcher.guard.active and not watcher.guard.slack and watcher.holds_lowering() is None
    assert slurm.limit_updates[8:] == [(4, 9)]
    assert slurm.jobs_by_id[5].time_limit_s == 300


def test_a_stage_that_ends_before_the_guard_gives_pending_jobs_their_lowered_limits_back(
    service: PredictionService,
) -> None:
    now = 10 * DAY
    slurm, clock = ScriptedSlurm(), Clock(now)
    slurm.jobs_by_id = slack_stage_machine(now, 5 * 3600)
    watcher = watcher_for(service, slurm, clock, guard_s=DAY, slack_s=TWO_HOURS, slack_after_s=FOUR_HOURS)
    watcher.poll()
    slurm.jobs_by_id[9] = replace(slurm.jobs_by_id[9], state="RUNNING", start_s=now + 5)
    clock.now = now + 10
    slurm.limit_updates.clear()
    watcher.poll()
    assert not watcher.guard.slack
    # 3 and 4 back at the plugin's 9 minutes; 1 keeps its 10 h, 9 its 8 h (both running)
    assert sorted(slurm.limit_updates) == [(3, 9), (4, 9)]
    assert slurm.jobs_by_id[9].time_limit_s == 8 * 3600 and slurm.jobs_by_id[1].time_limit_s == TEN_HOURS


def test_a_job_that_reaches_a_limit_within_the_slack_of_its_request_gets_its_request(
    service: PredictionService,
) -> None:
    """The corrector's policy under a slack (`RequestWithinSlack`): a job started on its 8 h
    estimate of a 10 h request, near it, gets its 10 h; INCREMENTAL alone would give it the next
    step above 8 h (its 7 h prediction + 2 h, then + 5 h...). Without a slack, that step."""
    now = 10 * DAY
    started_on_estimate = Job(1, state="RUNNING", submit_s=now - DAY, start_s=now - 8 * 3600 + 100,
                              time_limit_s=8 * 3600,
                              admin_comment=PredictionTag(TEN_HOURS, 7 * 3600, "lower").format())
    limits = []
    for options in ({"slack_s": TWO_HOURS, "slack_after_s": FOUR_HOURS}, {}):
        slurm = ScriptedSlurm()
        slurm.jobs_by_id = {1: started_on_estimate}
        watcher_for(service, slurm, Clock(now), guard_s=DAY, **options).poll()
        limits.append(slurm.limit_updates)
    assert limits == [[(1, 600)], [(1, 540)]]


tags = st.builds(lambda minutes, prediction_s, mode: PredictionTag(60 * minutes, prediction_s, mode),
                 st.integers(1, 3_000), st.integers(1, 180_000), st.sampled_from(["lower", "record"]))


@settings(max_examples=500, deadline=None)
@given(tag=tags, state=st.sampled_from(["PENDING", "RUNNING"]),
       limit=st.sampled_from(["lowered", "estimate", "request", "other"]), other_min=st.integers(1, 3_000),
       stage=st.sampled_from(["off", "slack", "on"]), slack_min=st.one_of(st.none(), st.integers(1, 3_000)))
def test_the_guard_never_raises_a_limit_above_the_request_never_lowers_a_running_job_and_settles_in_one_look(
    tag: PredictionTag, state: str, limit: str, other_min: int, stage: str, slack_min: int | None
) -> None:
    slack_s = None if slack_min is None else 60 * slack_min
    status = GuardStatus(active=stage == "on", slack=stage == "slack" and slack_s is not None)
    limit_s = {"lowered": plugin_limit_s(tag), "request": tag.request_s, "other": 60 * other_min,
               "estimate": plugin_limit_s(tag) if slack_s is None else slack_limit_s(tag, slack_s)}[limit]
    new_s = guard_limit_s(state, limit_s, tag, status, slack_s)
    if new_s is None:
        return
    assert new_s % 60 == 0 and 0 < new_s <= tag.request_s and new_s != limit_s
    if state == "RUNNING":
        assert new_s == tag.request_s > limit_s
    assert guard_limit_s(state, new_s, tag, status, slack_s) is None


# ---------------------------------------------------------------------------- a large queue
class CountingSlurm(ScriptedSlurm):
    """ScriptedSlurm that reads one job alone too, and counts the whole listings and lone reads."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0
        self.alone: list[int] = []

    def jobs(self) -> list[Job]:
        self.listings += 1
        return super().jobs()

    def job(self, job_id: int) -> Job | None:
        self.alone.append(job_id)
        return self.jobs_by_id.get(job_id)


def test_between_full_looks_only_the_jobs_that_may_need_a_change_are_read(service: PredictionService) -> None:
    """A full look every 60 s, looks every 10 s: between full looks the watcher reads alone the
    running job that comes within its margin (1) and the pending one lowered below what PREDICT
    lowers to now (3), corrects each in time, and sees a job submitted meanwhile (6) at the next
    full look; the others are not read."""
    t0 = 10_000
    slurm, clock = CountingSlurm(), Clock(t0)
    watcher = watcher_for(service, slurm, clock, full_every_s=60)
    assert watcher.least_lowered_s() == 60 + 2 * 10 + 30  # a full look's period, two looks, SLURM's 30 s
    slurm.jobs_by_id = {
        1: Job(1, state="RUNNING", submit_s=t0 - 500, start_s=t0 - 450),  # due at t0 + 30 (600 - 120)
        2: Job(2, state="RUNNING", submit_s=t0 - 500, start_s=t0 - 100, time_limit_s=3000),
        3: Job(3, time_limit_s=60, admin_comment=PredictionTag(3600, 60, "lower").format()),
        4: Job(4, time_limit_s=600),
        5: Job(5, admin_comment=""),
    }
    watcher.poll()
    assert slurm.listings == 1 and slurm.alone == [] and slurm.limit_updates == []
    for now_s in (t0 + 10, t0 + 20):
        clock.now = now_s
        watcher.poll()
    assert slurm.listings == 1 and sorted(set(slurm.alone)) == [1, 3] and slurm.limit_updates == []
    clock.now = t0 + 30
    watcher.poll()
    assert slurm.limit_updates == [(1, 14)]  # within its margin: raised, as at every look
    slurm.jobs_by_id[3] = replace(slurm.jobs_by_id[3], state="RUNNING", start_s=t0 + 35)
    slurm.jobs_by_id[6] = Job(6, submit_s=t0 + 41, time_limit_s=120,
                              admin_comment=PredictionTag(3600, 120, "lower").format())
    clock.now = t0 + 40
    watcher.poll()
    # 60 s + 1 min would be within the margin already: the first step beyond it, 60 s + 5 min
    assert slurm.limit_updates[1:] == [(3, 6)] and service.job_status(3) == "running"
    clock.now = t0 + 50
    watcher.poll()
    assert service.job_status(6) is None and 6 not in slurm.alone
    clock.now = t0 + 60
    watcher.poll()
    assert slurm.listings == 2 and service.job_status(6) == "submitted"
    assert (watcher.report.full_looks, watcher.report.near_looks) == (2, 5)
    assert watcher.heartbeat_age_s() == 0  # every look vouched


def test_the_watcher_lists_a_small_queue_at_every_look_and_a_large_one_every_minute(
    service: PredictionService, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hpcpredict.slurm import watcher as watcher_module

    monkeypatch.setattr(watcher_module, "LARGE_QUEUE_JOBS", 3)
    slurm, clock = CountingSlurm(), Clock(10_000)
    watcher = watcher_for(service, slurm, clock)
    slurm.jobs_by_id = {1: Job(1), 2: Job(2)}
    for _ in range(3):
        watcher.poll()
        clock.now += 10
    assert slurm.listings == 3 and watcher.least_lowered_s() == 0
    slurm.jobs_by_id[3] = Job(3)
    watcher.poll()  # the listing that finds the queue large
    clock.now += 10
    assert watcher.full_period_s() == watcher_module.LARGE_QUEUE_FULL_EVERY_S
    for _ in range(5):
        watcher.poll()
        clock.now += 10
    assert slurm.listings == 4 and watcher.least_lowered_s() == 110
    watcher.poll()  # 60 s after the last full look
    assert slurm.listings == 5


def test_predict_lowers_no_job_below_what_the_watcher_can_follow(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'ready.db'}")
    try:
        handlers = Handlers(PredictionService.open(store, min_trained_jobs=0), clock=Clock(10 * DAY))
        plain = handlers.handle_line(b"PREDICT uid=1000 procs=4 time_limit=3600").decode()
        prediction_s = int(plain.split("prediction=")[1].split()[0])
        assert prediction_s < 3600 and "least_s" not in plain
        handlers.least_lowered_s = lambda: prediction_s + 50
        floored = handlers.handle_line(b"PREDICT uid=1000 procs=4 time_limit=3600").decode()
        assert f"prediction={prediction_s + 50} " in floored and f"least_s={prediction_s + 50}" in floored
        handlers.least_lowered_s = lambda: 7200  # above the request: the request, not lowered
        above = handlers.handle_line(b"PREDICT uid=1000 procs=4 time_limit=3600").decode()
        assert "prediction=3600 " in above and "least_s=7200" in above
    finally:
        store.close()


def test_the_health_report_keeps_the_latest_corrected_jobs_not_all(service: PredictionService) -> None:
    from hpcpredict.slurm.watcher import CORRECTED_KEPT

    slurm, clock = ScriptedSlurm(), Clock(10_000)
    slurm.jobs_by_id = {k: Job(k, state="RUNNING", submit_s=9_000, start_s=9_500) for k in range(1, 3 * CORRECTED_KEPT + 1)}
    watcher = watcher_for(service, slurm, clock)
    watcher.poll()  # every one due: 500 s into a 600 s limit
    assert watcher.report.corrections == 3 * CORRECTED_KEPT
    kept = watcher.report.corrected_jobs
    assert CORRECTED_KEPT <= len(kept) <= 2 * CORRECTED_KEPT and kept[-1] == 3 * CORRECTED_KEPT
