"""Edges of the feature state (hpcpredict/learn/features.py) that the recomputation tests let through.
Added for the mutation run (docs/mutation.md); each test names the wrong program it catches."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.learn import features as F
from hpcpredict.learn.features import FeatureState
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


def test_a_saved_user_is_independent_and_whole() -> None:
    """The daemon undoes an event that failed to commit by putting back the user as saved
    before it (`FeatureState.save_user` / `restore_user`): the copy holds every field, later
    events change the state only, and the restored user gives the same features. Catches a field
    not saved or not put back, or the running set shared."""
    state = FeatureState()
    for job_id, start_s in ((1, 10), (2, 20)):
        state.job_submitted(job(job_id, 0, procs=job_id), 0)
        state.job_started(job(job_id, 0, procs=job_id), start_s)
    state.job_ended(job(1, 0, procs=1), 90, 100)
    state.job_started(job(3, 0, procs=4), 30)
    twin = state.save_user(1)
    assert twin == state.users[1] and twin.running is not state.users[1].running
    before = state.compute(job(9, 200), 200)
    state.job_ended(job(2, 0, procs=2), 200, 220)
    state.job_started(job(4, 0, procs=8), 230)
    state.job_submitted(job(5, 240), 240)
    assert set(twin.running) == {2, 3} and twin.n_completed == 1 and twin.n_submitted == 2
    assert twin.running_procs == 6.0 and twin.running_sum_start_s == 50.0
    assert twin.last_end_s == 100.0 and twin.last_run_s == 90.0
    state.restore_user(1, twin)  # the undo
    assert state.users[1] == twin
    np.testing.assert_array_equal(state.compute(job(9, 200), 200), before)
    state.job_ended(job(3, 0, procs=4), 100, 260)  # the restored running set is live
    assert set(state.users[1].running) == {2}


def test_restoring_a_user_never_seen_removes_it_and_frees_its_slots() -> None:
    """The undo of a new user's first event removes the user: `compute` sees no history, the
    user's running jobs are forgotten, and the freed row and slots serve the next ones.
    Catches a user left behind or a slot lost."""
    state = FeatureState()
    assert state.save_user(1) is None
    state.job_submitted(job(1, 0, procs=3), 0)
    state.job_started(job(1, 0, procs=3), 5)
    state.restore_user(1, None)
    assert 1 not in state.users and len(state.users) == 0 and state.last_end_s(1) is None
    np.testing.assert_array_equal(state.compute(job(2, 50, procs=3), 50),
                                  FeatureState().compute(job(2, 50, procs=3), 50))
    state.job_started(job(7, 0, procs=2, user=2), 60)
    assert (state._n_rows, state._n_slots) == (1, 1)
    assert state.users[2].running == {7: (2.0, 60.0)}


def test_the_arrays_grow_past_their_first_rows_without_losing_a_value() -> None:
    """Users and running jobs beyond the first allocation (64 rows) move to larger arrays;
    every user keeps its values. Catches a copy that drops rows or links."""
    state = FeatureState()
    for user in range(200):
        state.job_started(job(user, 0, procs=user + 1, user=user), user)
        state.job_started(job(1000 + user, 0, procs=1, user=user), 2 * user)
    for user in range(200):
        saved = state.users[user]
        assert saved.running == {user: (user + 1.0, float(user)), 1000 + user: (1.0, 2.0 * user)}
        x = state.compute(job(5000, 1000, user=user), 1000)
        assert (x[F.N_RUNNING], x[F.LONGEST_ELAPSED_S]) == (2.0, 1000.0 - user)


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


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([None, "Europe/Paris", "America/Los_Angeles", "Africa/Monrovia",
                     "Australia/Lord_Howe", "Asia/Kathmandu", "UTC"]),
    st.integers(0, 2_000_000_000),
    st.lists(st.integers(0, 400 * 86_400), min_size=1, max_size=300),
    st.booleans(),
)
def test_a_whole_log_s_local_seconds_are_each_submission_s(zone, unix_start_s, offsets, near_change):
    """`_LocalClock.local_seconds` (the compiled replay's, for a whole log) gives what
    `local_s` gives one submission at a time, in zones with DST, half-hour DST (Lord Howe),
    odd offsets and a change inside a bucket (Monrovia, 1972); `near_change` packs the
    submissions into the hours around Monrovia's change and Paris's DST changes of 2011."""
    if near_change:
        unix_start_s = 0
        anchors = (63_593_070, 1_301_187_600, 1_319_936_400)  # Monrovia 1972; Paris 2011 spring, autumn
        offsets = [anchors[k % 3] - 7200 + offset % 14_400 for k, offset in enumerate(offsets)]
    submit_s = np.array(sorted(offsets), dtype=np.int64)
    context = F.FeatureContext(unix_start_s, zone)
    expected = [float(F._LocalClock(context).local_s(int(s))) for s in submit_s]
    assert F._LocalClock(context).local_seconds(submit_s).tolist() == expected
