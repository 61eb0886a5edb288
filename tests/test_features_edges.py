"""Edges of the feature state (hpcpredict/features.py) that the recomputation tests let through.
Added for the mutation run (docs/mutation.md); each test names the wrong program it catches."""

from __future__ import annotations

import numpy as np

from hpcpredict import features as F
from hpcpredict.features import FeatureState
from hpcpredict.jobs import JobRequest


def job(job_id: int, submit_s: int, procs: int = 1, user: int = 1) -> JobRequest:
    return JobRequest(job_id=job_id, submit_s=submit_s, procs=procs, requested_s=3600, user_id=user)


def test_a_late_submission_is_computed_at_the_end_into_the_buffer_given() -> None:
    """A job whose submission was missed is described at its end (`end_s`), from the history
    then: here the user's last job ended at 500 and another job runs since 200. The features go
    into the caller's buffer, as for `job_submitted`. Catches `end_s` or `out` not passed on."""
    state = FeatureState()
    done, other, late = job(1, 0), job(2, 100, procs=2), job(3, 150, procs=4)
    state.job_submitted(done, 0)
    state.job_started(done, 0)
    state.job_ended(done, 500, 500)
    state.job_submitted(other, 100)
    state.job_started(other, 200)
    state.job_started(late, 300)  # its submission was never seen
    out = np.full(F.N_FEATURES, -1.0)
    x = state.late_submission(late, end_s=900, out=out)
    assert x is out
    assert x[F.BREAK_TIME_S] == 900 - 500
    assert x[F.LONGEST_ELAPSED_S] == x[F.SUM_ELAPSED_S] == 900 - 200  # job 2 only, not itself
    assert (x[F.N_RUNNING], x[F.PROCS_HELD]) == (1.0, 2.0)
    assert x[F.PROCS_MEAN_SUBMITTED] == (1 + 2 + 4) / 3


def test_a_checkpoint_holds_int64_ids_and_counts_even_when_empty() -> None:
    """The checkpoint's columns are int64 (ids, counts) and float64 (times, sums), as written,
    whatever the state holds: an empty state too (numpy's default for an empty list would be
    float64). Catches a dtype dropped from `to_state`."""
    busy = FeatureState()
    busy.job_submitted(job(1, 0, procs=2), 0)
    busy.job_started(job(1, 0, procs=2), 10)
    for state in (FeatureState(), busy):
        saved = state.to_state()
        for name in ("user_id", "user_counts", "running_ids", "unix_start_s"):
            assert saved[name].dtype == np.int64, name
        for name in ("user_floats", "running_values"):
            assert saved[name].dtype == np.float64, name
        assert saved["user_counts"].shape == (len(state.users), 2)
        assert saved["running_ids"].shape == saved["running_values"].shape


def test_a_copied_user_history_is_independent_and_whole() -> None:
    """The daemon undoes an event that failed to commit by putting back a copy taken before it
    (`UserHistory.copy`): the copy holds every field, and later events change the original only.
    Catches a field not copied or the running set / heap shared."""
    state = FeatureState()
    for job_id, start_s in ((1, 10), (2, 20)):
        state.job_submitted(job(job_id, 0, procs=job_id), 0)
        state.job_started(job(job_id, 0, procs=job_id), start_s)
    state.job_ended(job(1, 0, procs=1), 90, 100)
    state.job_started(job(3, 0, procs=4), 30)
    user = state.users[1]
    twin = user.copy()
    heap = list(user._start_heap)
    for name in user.__slots__:
        assert getattr(twin, name) == getattr(user, name), name
    before = state.compute(job(9, 200), 200)
    state.job_ended(job(2, 0, procs=2), 200, 220)
    state.job_started(job(4, 0, procs=8), 230)
    assert set(twin.running) == {2, 3} and twin.n_completed == 1
    assert twin._start_heap == heap and twin.running_procs == 6.0
    state.users[1] = twin  # the undo
    np.testing.assert_array_equal(state.compute(job(9, 200), 200), before)


def test_stale_start_entries_stay_within_twice_the_running_jobs_plus_eight() -> None:
    """Ended jobs leave their start in the user's heap until they surface (lazy deletion); the
    heap is compacted beyond 2 n + 8 entries for n running jobs, checked after every event.
    Catches a looser bound (`remove_running` 14, 15)."""
    state = FeatureState()
    state.job_started(job(0, 0), 0)  # runs throughout: its start stays at the top
    user = state.users[1]
    for job_id in range(1, 40):
        state.job_started(job(job_id, job_id), job_id)
        assert len(user._start_heap) <= 2 * len(user.running) + 8 + 1  # + the start just pushed
        state.job_ended(job(job_id, job_id), 1, job_id + 1)
        assert len(user._start_heap) <= 2 * len(user.running) + 8


def test_an_offset_change_inside_a_cache_bucket_is_exact_on_both_sides() -> None:
    """Liberia moved from UTC-0:44:30 to UTC at 1972-01-07 00:44:30 UTC (unix 63,593,070),
    inside a 15-minute bucket: the offset is looked up for each timestamp there, never cached
    across the change. Catches the exact branch changed (`_LocalClock.local_s` 11, 16, 17)."""
    change_s = 63_593_070
    state = FeatureState(F.FeatureContext(0, "Africa/Monrovia"))
    for unix_s, offset_s in ((change_s - 70, -2670), (change_s - 1, -2670), (change_s, 0),
                             (change_s + 20, 0)):
        x = state.compute(job(1, unix_s), unix_s)
        local_s = unix_s + offset_s
        assert x[F.DAY_COS] == np.cos(2 * np.pi * (local_s % F.DAY_S) / F.DAY_S)
        assert x[F.DAY_SIN] == np.sin(2 * np.pi * (local_s % F.DAY_S) / F.DAY_S)


def test_a_job_of_no_processors_gets_a_ratio_of_zero() -> None:
    """A first job of 0 processors (a raw log's cancelled entry) has a mean of 0 submitted
    processors: its ratio is 0, not a division by zero. Catches `compute` 46, 48, 50."""
    x = FeatureState().compute(job(1, 0, procs=0), 0)
    assert (x[F.PROCS], x[F.PROCS_MEAN_SUBMITTED], x[F.PROCS_RATIO]) == (0.0, 0.0, 0.0)
