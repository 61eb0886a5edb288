"""The 20 features of docs/method.md §2 against a slow recomputation from the raw event history."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.learn import features as F
from hpcpredict.learn.features import FeatureContext, FeatureState
from hpcpredict.jobs import JobRequest

CURIE = FeatureContext(unix_start_s=1_296_571_124, time_zone="Europe/Paris")  # its SWF header


def job(job_id: int, submit_s: int, procs: int = 1, requested_s: int = 3600, user: int = 1):
    return JobRequest(
        job_id=job_id, submit_s=submit_s, procs=procs, requested_s=requested_s, user_id=user
    )


@dataclass
class SlowHistory:
    """Every event kept verbatim; features recomputed from scratch by their definitions."""

    submitted: list[tuple[int, int]] = field(default_factory=list)  # (user, procs)
    completed: list[tuple[int, float, float]] = field(default_factory=list)  # (user, run, end)
    running: dict[int, tuple[int, int, float]] = field(default_factory=dict)  # id: user,procs,start

    def features(self, request: JobRequest, now_s: float) -> list[float]:
        user = request.user_id
        runs = [run for u, run, _ in self.completed if u == user]
        ends = [end for u, _, end in self.completed if u == user]

        def mean(values: list[float]) -> float:
            return sum(values) / len(values) if values else 0.0

        last = [runs[-k] if len(runs) >= k else 0.0 for k in (1, 2, 3)]
        submitted = [p for u, p in self.submitted if u == user] + [request.procs]
        running = [(p, s) for u, p, s in self.running.values() if u == user]
        elapsed = [now_s - s for _, s in running]
        day = 2 * math.pi * (request.submit_s % 86400) / 86400
        week = 2 * math.pi * (request.submit_s % 604800) / 604800
        return [
            request.requested_s,
            *last,
            mean(runs[-2:]),
            mean(runs[-3:]),
            mean(runs),
            request.procs,
            mean(submitted),
            request.procs / mean(submitted),
            mean([p for p, _ in running]),
            len(running),
            max(elapsed, default=0.0),
            sum(elapsed),
            sum(p for p, _ in running),
            now_s - ends[-1] if ends else 0.0,
            math.cos(day),
            math.sin(day),
            math.cos(week),
            math.sin(week),
        ]


@st.composite
def event_streams(draw: st.DrawFn) -> list[tuple[str, int, JobRequest, int]]:
    """Valid interleavings of submit/start/end for a few users, time never going back."""
    now = 0
    next_id = 0
    queued: list[JobRequest] = []
    running: list[JobRequest] = []
    events = []
    for _ in range(draw(st.integers(1, 60))):
        now += draw(st.integers(0, 5000))
        choices = ["submit"] + ["start"] * bool(queued) + ["end"] * bool(running)
        kind = draw(st.sampled_from(choices))
        if kind == "submit":
            request = job(
                next_id,
                now,
                procs=draw(st.integers(1, 256)),
                requested_s=draw(st.integers(1, 86400)),
                user=draw(st.integers(0, 2)),
            )
            next_id += 1
            queued.append(request)
            events.append(("submit", now, request, 0))
        elif kind == "start":
            request = queued.pop(draw(st.integers(0, len(queued) - 1)))
            running.append(request)
            events.append(("start", now, request, 0))
        else:
            request = running.pop(draw(st.integers(0, len(running) - 1)))
            events.append(("end", now, request, draw(st.integers(1, 100_000))))
    return events


@settings(max_examples=300, deadline=None)
@given(events=event_streams())
def test_features_match_a_recomputation_from_the_whole_history(events) -> None:
    state = FeatureState()
    slow = SlowHistory()
    for kind, now, request, run_s in events:
        if kind == "submit":
            expected = slow.features(request, now)
            got = state.job_submitted(request, now)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9)
            slow.submitted.append((request.user_id, request.procs))
        elif kind == "start":
            state.job_started(request, now)
            slow.running[request.job_id] = (request.user_id, request.procs, now)
        else:
            state.job_ended(request, run_s, now)
            del slow.running[request.job_id]
            slow.completed.append((request.user_id, run_s, now))


def test_a_scenario_by_hand() -> None:
    state = FeatureState()
    # User 1: three jobs complete (runtimes 100, 200, 600, in that order of completion).
    for job_id, run_s, end_s in ((1, 100, 1000), (2, 200, 1100), (3, 600, 1500)):
        request = job(job_id, 0, procs=2)
        state.job_submitted(request, 0)
        state.job_started(request, end_s - run_s)
        state.job_ended(request, run_s, end_s)
    # Two jobs running: 4 procs since 1600, 10 procs since 1800.
    for job_id, procs, start_s in ((4, 4, 1600), (5, 10, 1800)):
        request = job(job_id, 1500, procs=procs)
        state.job_submitted(request, 1500)
        state.job_started(request, start_s)
    x = state.job_submitted(job(6, 21_600, procs=8, requested_s=7200), now_s=21_600)
    submitted_procs = [2, 2, 2, 4, 10, 8]
    expected = {
        F.REQUESTED_S: 7200,
        F.LAST_RUN_S: 600,
        F.SECOND_LAST_RUN_S: 200,
        F.THIRD_LAST_RUN_S: 100,
        F.AVE2_S: 400,
        F.AVE3_S: 300,
        F.MEAN_RUN_S: 300,
        F.PROCS: 8,
        F.PROCS_MEAN_SUBMITTED: sum(submitted_procs) / 6,
        F.PROCS_RATIO: 8 / (sum(submitted_procs) / 6),
        F.PROCS_MEAN_RUNNING: 7,
        F.N_RUNNING: 2,
        F.LONGEST_ELAPSED_S: 21_600 - 1600,
        F.SUM_ELAPSED_S: (21_600 - 1600) + (21_600 - 1800),
        F.PROCS_HELD: 14,
        F.BREAK_TIME_S: 21_600 - 1500,
        F.DAY_COS: 0.0,  # 6 h into the day: a quarter turn
        F.DAY_SIN: 1.0,
        F.WEEK_COS: math.cos(2 * math.pi * 21_600 / 604_800),
        F.WEEK_SIN: math.sin(2 * math.pi * 21_600 / 604_800),
    }
    assert len(expected) == F.N_FEATURES == len(F.FEATURE_NAMES)
    for index, value in expected.items():
        assert x[index] == pytest.approx(value, rel=1e-12, abs=1e-12), F.FEATURE_NAMES[index]


def test_a_first_job_has_zero_history_and_a_neutral_processor_ratio() -> None:
    x = FeatureState().job_submitted(job(1, 0, procs=32, requested_s=600), 0)
    assert x[F.PROCS_MEAN_SUBMITTED] == 32.0 and x[F.PROCS_RATIO] == 1.0
    zero = [i for i in range(F.N_FEATURES) if i not in (0, 7, 8, 9, 16, 18)]
    np.testing.assert_array_equal(x[zero], 0.0)
    assert (x[F.REQUESTED_S], x[F.DAY_COS], x[F.WEEK_COS]) == (600.0, 1.0, 1.0)


@pytest.mark.parametrize(("n_done", "ave2", "ave3"), [(1, 50.0, 50.0), (2, 75.0, 75.0)])
def test_short_histories_average_what_exists(n_done: int, ave2: float, ave3: float) -> None:
    state = FeatureState()
    for job_id, run_s in list(enumerate((50, 100)))[:n_done]:
        state.job_ended(job(job_id, 0), run_s, 1000 + job_id)
    x = state.compute(job(9, 2000), 2000)
    assert (x[F.AVE2_S], x[F.AVE3_S]) == (ave2, ave3)


def test_users_do_not_see_each_other() -> None:
    state = FeatureState()
    state.job_started(job(1, 0, procs=64, user=1), 0)
    state.job_ended(job(2, 0, user=1), 500, 600)
    x = state.compute(job(3, 1000, user=2), 1000)
    assert x[F.N_RUNNING] == x[F.LAST_RUN_S] == x[F.BREAK_TIME_S] == 0.0


def test_compute_is_a_pure_read() -> None:
    state = FeatureState()
    first = state.compute(job(1, 0, procs=4), 0)
    second = state.compute(job(2, 0, procs=8), 0)
    assert state.users == {}
    assert first[F.PROCS_MEAN_SUBMITTED] == 4.0 and second[F.PROCS_MEAN_SUBMITTED] == 8.0


def test_a_job_ending_after_a_submission_cannot_change_its_features() -> None:
    """Leakage (docs/method.md §2): submit A, submit B, end A: x_B is what it was without A's end."""
    a, b = job(1, 0, procs=4), job(2, 100, procs=8)
    state = FeatureState()
    state.job_submitted(a, 0)
    state.job_started(a, 10)
    x_b = state.job_submitted(b, 100)
    state.job_ended(a, 5000, 5010)

    without_end = FeatureState()
    without_end.job_submitted(a, 0)
    without_end.job_started(a, 10)
    np.testing.assert_array_equal(x_b, without_end.job_submitted(b, 100))
    assert x_b[F.LAST_RUN_S] == 0.0 and x_b[F.N_RUNNING] == 1.0  # A was running, not done
    # The next submission does see A's end.
    assert state.compute(job(3, 6000), 6000)[F.LAST_RUN_S] == 5000.0


def test_longest_elapsed_survives_many_short_jobs_and_stays_small() -> None:
    state = FeatureState()
    state.job_started(job(0, 0), 0)  # a long job, started first
    for job_id in range(1, 2000):
        state.job_started(job(job_id, job_id), job_id)
        state.job_ended(job(job_id, job_id), 1, job_id + 1)
        x = state.compute(job(10_000, job_id + 1), job_id + 1)
        assert x[F.LONGEST_ELAPSED_S] == job_id + 1 and x[F.N_RUNNING] == 1
    assert set(state.users[1].running) == {0}
    assert state._n_slots == 2  # the ended jobs' slots were reused
    state.job_ended(job(0, 0), 3000, 3000)
    state.job_started(job(5000, 3000), 3500)
    assert state.compute(job(10_001, 4000), 4000)[F.LONGEST_ELAPSED_S] == 500.0


def test_a_repeated_start_restarts_the_clock() -> None:
    state = FeatureState()
    state.job_started(job(1, 0, procs=4), 100)
    state.job_started(job(1, 0, procs=4), 300)  # requeued and restarted
    x = state.compute(job(2, 400), 400)
    assert (x[F.N_RUNNING], x[F.PROCS_HELD], x[F.LONGEST_ELAPSED_S], x[F.SUM_ELAPSED_S]) == (
        1.0,
        4.0,
        100.0,
        100.0,
    )


def test_late_submission_excludes_the_job_itself() -> None:
    state = FeatureState()
    state.job_started(job(1, 0, procs=4), 0)
    x = state.late_submission(job(1, 0, procs=4), end_s=900)
    assert x[F.N_RUNNING] == 0.0 and x[F.SUM_ELAPSED_S] == 0.0
    assert state.users[1].n_submitted == 1


def _expected_local_angles(unix_s: float, zone: str) -> tuple[float, float]:
    local = datetime.fromtimestamp(unix_s, ZoneInfo(zone))
    local_s = unix_s + local.utcoffset().total_seconds()
    return (
        2 * math.pi * (local_s % 86400) / 86400,
        2 * math.pi * (local_s % 604800) / 604800,
    )


@pytest.mark.parametrize(
    ("local", "day_cos", "day_sin"),
    [
        (datetime(2011, 7, 1, 12, 0), -1.0, 0.0),  # summer noon, CEST = UTC+2
        (datetime(2011, 12, 1, 6, 0), 0.0, 1.0),  # winter 6:00, CET = UTC+1
    ],
)
def test_time_of_day_is_local_time_of_the_log(local: datetime, day_cos: float, day_sin: float):
    unix_s = local.replace(tzinfo=ZoneInfo("Europe/Paris")).timestamp()
    submit_s = int(unix_s) - CURIE.unix_start_s
    x = FeatureState(CURIE).compute(job(1, submit_s), submit_s)
    assert x[F.DAY_COS] == pytest.approx(day_cos, abs=1e-12)
    assert x[F.DAY_SIN] == pytest.approx(day_sin, abs=1e-12)
    # Without the context the same submit_s is read as UTC seconds from 0 (docs/method.md §2).
    raw = FeatureState().compute(job(1, submit_s), submit_s)
    assert raw[F.DAY_COS] == pytest.approx(math.cos(2 * math.pi * (submit_s % 86400) / 86400))


@settings(max_examples=100, deadline=None)
@given(
    offsets_s=st.lists(st.integers(-4000, 4000), min_size=1, max_size=30),
    transition=st.sampled_from(
        [  # DST changes of Europe/Paris during the Curie log, in UTC
            datetime(2011, 3, 27, 1, 0),
            datetime(2011, 10, 30, 1, 0),
            datetime(2012, 3, 25, 1, 0),
            datetime(2012, 10, 28, 1, 0),
        ]
    ),
)
def test_time_zone_offsets_are_exact_around_dst_changes(offsets_s, transition) -> None:
    """The cached UTC offset never leaks across a daylight-saving change."""
    transition_s = int(transition.replace(tzinfo=ZoneInfo("UTC")).timestamp())
    state = FeatureState(CURIE)
    for offset_s in sorted(offsets_s):
        unix_s = transition_s + offset_s
        submit_s = unix_s - CURIE.unix_start_s
        x = state.compute(job(1, submit_s), submit_s)
        day, week = _expected_local_angles(unix_s, "Europe/Paris")
        assert x[F.DAY_COS] == pytest.approx(math.cos(day), abs=1e-12)
        assert x[F.DAY_SIN] == pytest.approx(math.sin(day), abs=1e-12)
        assert x[F.WEEK_COS] == pytest.approx(math.cos(week), abs=1e-12)
        assert x[F.WEEK_SIN] == pytest.approx(math.sin(week), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(events=event_streams(), cut=st.floats(0.0, 1.0))
def test_state_round_trips_exactly(events, cut: float) -> None:
    split = int(cut * len(events))
    state = FeatureState(CURIE)

    def replay(target: FeatureState, part) -> list[np.ndarray]:
        out = []
        for kind, now, request, run_s in part:
            if kind == "submit":
                out.append(target.job_submitted(request, now))
            elif kind == "start":
                target.job_started(request, now)
            else:
                target.job_ended(request, run_s, now)
        return out

    replay(state, events[:split])
    restored = FeatureState.from_state(state.to_state())
    assert restored.context == CURIE
    after = replay(state, events[split:])
    after_restored = replay(restored, events[split:])
    assert len(after) == len(after_restored)
    for a, b in zip(after, after_restored):
        np.testing.assert_array_equal(a, b)
