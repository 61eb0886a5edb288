"""The failsafe's parts without a SLURM (tests/test_failsafe_faults.py runs it against a real one,
with the daemon killed, stopped, stuck...): the lean listing's parser on squeue's real output,
what it restores and in which order, the heartbeat's staleness, the loop's states, the watcher's
side (a look vouches only when its limit changes went through), and the settings' budget."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_slurm_watcher import Clock, Job, ScriptedSlurm

from hpcpredict.daemon.core.config import ConfigError, DaemonConfig, load_config
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.slurm.adapter import SlurmError
from hpcpredict.slurm_time import slurm_duration_s
from hpcpredict.slurm.failsafe import (
    BATCH, LIST_LOWERED, Failsafe, FailsafeConfig, FailsafeConfigError, LoweredJob,
    load_failsafe_config, parse_lowered, read_status, restore, restore_order,
)
from hpcpredict.slurm.heartbeat import Heartbeat, heartbeat_age_s, read_heartbeat, write_heartbeat
from hpcpredict.slurm.tag import PredictionTag
from hpcpredict.slurm.watcher import SlurmWatcher

# `LIST_LOWERED`'s output on Debian 12's Slurm 22.05.8 (testbed/slurm_cluster.py, jobs marked by
# hand): an array task, a job lowered with text after its mark containing the separator, a job in
# record mode, a job without a mark, a job at its request, one without a limit.
SQUEUE_22_05 = """\
9|PENDING|3:00|0:00|hpcpredict:request_s=600,prediction_s=50,mode=lower x|y
1_2|RUNNING|1:00|0:18|hpcpredict:request_s=600,prediction_s=50,mode=lower,procs=1
8|RUNNING|2:00|0:10|hpcpredict:request_s=600,prediction_s=50,mode=record
1_0|RUNNING|5:00|0:18|(null)
12|RUNNING|10:00|0:18|hpcpredict:request_s=600,prediction_s=50,mode=lower
13|RUNNING|UNLIMITED|1-02:00:05|hpcpredict:request_s=600,prediction_s=50,mode=lower
14|RUNNING|1-00:00:00|2:03:04|hpcpredict:request_s=172800,prediction_s=50
"""


def test_the_lean_listing_keeps_only_jobs_hpcpredict_lowered_below_their_request() -> None:
    jobs = parse_lowered(SQUEUE_22_05 + "squeue: error: something to say\n\n")
    assert jobs == [
        LoweredJob("9", "PENDING", 180, 0, 600),
        LoweredJob("1_2", "RUNNING", 60, 18, 600),
        LoweredJob("14", "RUNNING", 86400, 2 * 3600 + 3 * 60 + 4, 172800),  # an older plugin's mark
    ]


@pytest.mark.parametrize(("text", "seconds"), [
    ("0:00", 0), ("1:00", 60), ("59:59", 3599), ("1:00:00", 3600), ("2-03:04:05", 183845),
    ("1-00:00:00", 86400), ("5", 300), ("UNLIMITED", None), ("NOT_SET", None), ("INVALID", None), ("", None),
])
def test_slurm_durations(text: str, seconds: int | None) -> None:
    assert slurm_duration_s(text) == seconds


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_slurm_durations_read_back_as_squeue_prints_them(seconds: int) -> None:
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        text = f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    elif hours:
        text = f"{hours}:{minutes:02d}:{secs:02d}"
    else:
        text = f"{minutes}:{secs:02d}"
    assert slurm_duration_s(text) == seconds


lowered_jobs = st.lists(st.builds(
    LoweredJob,
    update_id=st.integers(1, 10**6).map(str),
    state=st.sampled_from(["PENDING", "RUNNING", "SUSPENDED"]),
    limit_s=st.integers(60, 3000).map(lambda s: s // 60 * 60),
    used_s=st.integers(0, 3000),
    request_s=st.sampled_from([3600, 7200, 86400]),
), max_size=350, unique_by=lambda job: job.update_id)


@given(lowered_jobs)
def test_the_batches_hold_every_job_once_one_request_each_most_urgent_first(jobs: list[LoweredJob]) -> None:
    batches = restore_order(jobs)
    assert sorted(job.update_id for batch in batches for job in batch) == sorted(job.update_id for job in jobs)
    assert all(0 < len(batch) <= BATCH and len({job.request_s for job in batch}) == 1 for batch in batches)
    firsts = [batch[0].left_s for batch in batches]
    assert firsts == sorted(firsts)
    assert all(batch[0].left_s == min(job.left_s for job in batch) for batch in batches)


class RecordingRunner:
    """SLURM's commands as a test scripts them: `listing` for squeue, `fail` for scontrol."""

    def __init__(self, listing: str = "", fail: str | None = None) -> None:
        self.listing = listing
        self.fail = fail
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess:
        self.commands.append(list(command))
        if tuple(command) == LIST_LOWERED:
            return subprocess.CompletedProcess(command, 0, self.listing, "")
        if self.fail is not None:
            raise SlurmError(f"scontrol update failed (exit 1): {self.fail}")
        return subprocess.CompletedProcess(command, 0, "", "")


@given(lowered_jobs)
def test_restoring_sets_each_job_to_its_own_request_and_never_above(jobs: list[LoweredJob]) -> None:
    runner = RecordingRunner()
    done = restore(jobs, runner)
    assert len(done.restored) == len(jobs) and done.errors == []
    set_to: dict[str, int] = {}
    for command in runner.commands:
        assert command[:2] == ["scontrol", "update"]
        minutes = int(command[3].removeprefix("TimeLimit="))
        for job_id in command[2].removeprefix("JobId=").split(","):
            set_to[job_id] = minutes
    assert set_to == {job.update_id: job.request_s // 60 for job in jobs}


def test_a_batch_whose_only_failure_is_a_job_that_ended_counts_as_restored() -> None:
    jobs = [LoweredJob("5", "RUNNING", 60, 30, 600), LoweredJob("6", "PENDING", 60, 0, 600)]
    gone = restore(jobs, RecordingRunner(fail="Invalid job id specified for job 6"))
    assert gone.restored == jobs and gone.errors == []
    refused = restore(jobs, RecordingRunner(fail="Unable to contact slurm controller (connect failure)"))
    assert refused.restored == [] and "connect failure" in refused.errors[0]


# ---------------------------------------------------------------------------- the heartbeat
def test_a_heartbeat_reads_back_and_garbage_or_absence_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "watcher.heartbeat"
    assert read_heartbeat(path) is None
    write_heartbeat(path, Heartbeat(1000.5, 42, 7))
    assert read_heartbeat(path) == Heartbeat(1000.5, 42, 7)
    assert path.stat().st_mode & 0o777 == 0o640 and [p.name for p in tmp_path.iterdir()] == [path.name]
    for garbage in ("", "{", '{"time_s": "x", "pid": 1, "polls": 1}', "[]", '{"pid": 1}'):
        path.write_text(garbage)
        assert read_heartbeat(path) is None


def test_a_heartbeat_from_the_future_is_stale_not_fresh() -> None:
    beat = Heartbeat(1000.0, 1, 1)
    assert heartbeat_age_s(beat, 1030.0) == 30.0
    assert heartbeat_age_s(beat, 997.0) == 0.0  # within the tolerance: this host's clock
    assert heartbeat_age_s(beat, 900.0) is None  # the clock moved back: no one vouches
    assert heartbeat_age_s(None, 1000.0) is None


# ---------------------------------------------------------------------------- the loop
LISTING = ("5|RUNNING|2:00|1:40|hpcpredict:request_s=600,prediction_s=50,mode=lower\n"
           "6|PENDING|1:00|0:00|hpcpredict:request_s=600,prediction_s=50,mode=lower\n")


def failsafe_in(tmp_path: Path, runner: RecordingRunner, clock: Clock) -> Failsafe:
    config = FailsafeConfig(heartbeat=str(tmp_path / "hb"), status=str(tmp_path / "status"))
    return Failsafe(config, runner=runner, clock=clock)


def test_a_fresh_heartbeat_costs_slurm_nothing_a_stale_one_restores_at_every_look(tmp_path: Path) -> None:
    runner, clock = RecordingRunner(LISTING), Clock(10_000)
    watch = failsafe_in(tmp_path, runner, clock)
    write_heartbeat(tmp_path / "hb", Heartbeat(10_000 - 40, 1, 1))
    assert watch.look().state == "watching" and runner.commands == []
    assert read_status(tmp_path / "status").state == "watching"

    clock.now += 1  # 41 s old: past the 40 s bound
    status = watch.look()
    assert status.state == "restoring" and status.restored_total == 2 and status.stale_since_s == 10_001
    assert runner.commands[0] == list(LIST_LOWERED)
    assert runner.commands[1] == ["scontrol", "update", "JobId=5,6", "TimeLimit=10"]
    clock.now += 5
    watch.look()  # still stale: looks again (SLURM still lists them: the scripted listing)
    assert len(runner.commands) == 4 and watch.status.restored_total == 4
    assert read_status(tmp_path / "status").restored_total == 4

    write_heartbeat(tmp_path / "hb", Heartbeat(clock.now, 1, 2))
    assert watch.look().state == "watching" and len(runner.commands) == 4
    assert watch.status.stale_since_s is None


def test_a_missing_heartbeat_restores_and_a_failing_slurm_is_counted_and_tried_again(tmp_path: Path) -> None:
    runner, clock = RecordingRunner(LISTING, fail="Unable to contact slurm controller"), Clock(10_000)
    watch = failsafe_in(tmp_path, runner, clock)
    status = watch.look()
    assert status.state == "restoring" and status.restored_total == 0 and status.lowered_left == 2
    assert status.errors == 1 and "Unable to contact" in status.last_error
    runner.fail = None
    assert watch.look().restored_total == 2 and watch.status.lowered_left == 0
    on_disk = json.loads((tmp_path / "status").read_text())
    assert on_disk["state"] == "restoring" and on_disk["restored_total"] == 2


def test_a_stale_heartbeat_with_nothing_lowered_is_idle_not_restoring(tmp_path: Path) -> None:
    """Record mode, or a watcher never started: nothing at risk, so no restoring state (and no
    restoring alert); a lowered job appearing turns it to restoring at the next look."""
    runner, clock = RecordingRunner(""), Clock(10_000)
    watch = failsafe_in(tmp_path, runner, clock)
    assert watch.look().state == "idle" and runner.commands == [list(LIST_LOWERED)]
    runner.listing = LISTING
    assert watch.look().state == "restoring" and watch.status.restored_total == 2


def test_the_settings_must_reach_a_one_minute_job_in_time(tmp_path: Path) -> None:
    FailsafeConfig(stale_after_s=40, interval_s=5).check()
    with pytest.raises(FailsafeConfigError, match="below 60 s"):
        FailsafeConfig(stale_after_s=50, interval_s=5).check()
    with pytest.raises(FailsafeConfigError, match="interval_s: expected a number"):
        FailsafeConfig(interval_s=0).check()
    toml = tmp_path / "daemon.toml"
    toml.write_text('[daemon]\nslurm = true\n[failsafe]\nheartbeat = "/x/hb"\nstale_after_s = 30\n')
    assert load_failsafe_config(toml).heartbeat == "/x/hb" and load_config(toml).failsafe.stale_after_s == 30
    toml.write_text('[failsafe]\nstale_after = 30\n')
    with pytest.raises(FailsafeConfigError, match=r"daemon.toml: unknown key\(s\) \['stale_after'\] in \[failsafe\]"):
        load_failsafe_config(toml)
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(toml)
    toml.write_text('[daemon]\nslurm = true\nslurm_interval_s = 20\n[failsafe]\nstale_after_s = 40\n')
    with pytest.raises(ConfigError, match="must cover two looks at SLURM"):
        load_config(toml)


# ---------------------------------------------------------------------------- the watcher's side
@pytest.fixture
def service(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield PredictionService.open(store)
    store.close()


class RefusingSlurm(ScriptedSlurm):
    def set_time_limit(self, job_id: int, minutes: int) -> None:
        raise SlurmError("scontrol update failed (exit 1): Unable to contact slurm controller")


def running_lowered(job_id: int, now: int) -> Job:
    """A running job 100 s from its lowered 2-minute limit: a correction is due."""
    return Job(job_id, state="RUNNING", start_s=now - 20, time_limit_s=120,
               admin_comment=PredictionTag(3600, 60, "lower").format())


def test_the_watcher_vouches_only_for_looks_whose_limit_changes_went_through(
    service: PredictionService, tmp_path: Path
) -> None:
    clock, heartbeat = Clock(50_000), tmp_path / "state" / "watcher.heartbeat"
    slurm = ScriptedSlurm()
    slurm.jobs_by_id[1] = running_lowered(1, clock.now)
    watcher = SlurmWatcher(slurm, service.record, service.job_status, margin_s=120, clock=clock,
                           heartbeat=str(heartbeat), stale_after_s=40)
    watcher.poll()
    assert slurm.limit_updates and read_heartbeat(heartbeat) == Heartbeat(50_000, watcher_pid(), 1)
    assert watcher.holds_lowering() is None

    refusing = RefusingSlurm()
    refusing.jobs_by_id[2] = running_lowered(2, clock.now + 30)
    watcher.slurm = refusing
    clock.now += 30
    watcher.poll()
    assert watcher.report.limit_failures == 1 and read_heartbeat(heartbeat).time_s == 50_000
    assert watcher.holds_lowering() is None  # 30 s: within the bound
    clock.now += 11
    assert watcher.heartbeat_age_s() == 41 and watcher.holds_lowering() == "watcher_stale"

    watcher.slurm = slurm  # SLURM answers again: the next look vouches, lowering resumes
    watcher.poll()
    assert read_heartbeat(heartbeat).time_s == clock.now and watcher.holds_lowering() is None


def test_a_look_whose_only_failure_is_recording_still_vouches(service: PredictionService, tmp_path: Path) -> None:
    clock, heartbeat = Clock(50_000), tmp_path / "watcher.heartbeat"
    slurm = ScriptedSlurm()
    slurm.jobs_by_id[1] = running_lowered(1, clock.now)

    def failing_record(event: object) -> object:
        raise RuntimeError("the store writer has not recorded it")

    watcher = SlurmWatcher(slurm, failing_record, service.job_status, margin_s=120, clock=clock,
                           heartbeat=str(heartbeat))
    watcher.poll()
    assert slurm.limit_updates and watcher.report.errors >= 1 and watcher.report.limit_failures == 0
    assert read_heartbeat(heartbeat).time_s == 50_000


def test_an_unwritable_heartbeat_keeps_the_watcher_stale(service: PredictionService, tmp_path: Path) -> None:
    clock = Clock(50_000)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    watcher = SlurmWatcher(ScriptedSlurm(), service.record, service.job_status, clock=clock,
                           heartbeat=str(blocker / "watcher.heartbeat"), stale_after_s=40)
    clock.now += 41
    watcher.poll()
    assert watcher.holds_lowering() == "watcher_stale" and "cannot write the heartbeat" in watcher.report.last_error


def watcher_pid() -> int:
    import os

    return os.getpid()


def test_the_daemons_default_config_carries_the_failsafes_defaults() -> None:
    config = DaemonConfig()
    assert config.failsafe == FailsafeConfig() and config.failsafe.heartbeat.endswith("watcher.heartbeat")
    assert replace(config.failsafe, stale_after_s=30).check().stale_after_s == 30
