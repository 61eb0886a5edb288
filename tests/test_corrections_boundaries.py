"""SURVIVAL's Kaplan-Meier estimate against a textbook recomputation, and the boundaries of the
corrections' inputs (hpcpredict/corrections). Added for the mutation run (docs/mutation.md):
the hand-worked distributions of tests/test_survival.py had no ties between runtimes, no
censored time equal to a runtime and no runtime one second past the elapsed time, so the
estimator's bookkeeping of those could change unseen.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PAPER_STEPS_S
from hpcpredict.corrections.starvation import parse_starvation_guard
from hpcpredict.corrections.survival import (
    RuntimeHistory,
    SurvivalCorrection,
    conditional_quantile_s,
    incremental_above_s,
)
from hpcpredict.corrections.policies import DoublingCorrection
from hpcpredict.jobs import JobRequest


def textbook_quantile_s(
    runtimes_s: list[int], censored_s: list[int], elapsed_s: int, quantile: float
) -> int | None:
    """Kaplan-Meier as textbooks write it, given T > elapsed: over the distinct event times t
    beyond the elapsed time, S(t) = prod (1 - d(t) / n(t)), d(t) the runtimes equal to t, n(t)
    the observations (runtimes and censored times) >= t; the first t with S(t) <= 1 - quantile."""
    events = [t for t in runtimes_s if t > elapsed_s]
    observations = events + [c for c in censored_s if c > elapsed_s]
    survival = 1.0
    for time_s in sorted(set(events)):
        survival *= 1.0 - events.count(time_s) / sum(1 for x in observations if x >= time_s)
        if survival <= 1.0 - quantile + 1e-12:
            return time_s
    return None


@settings(max_examples=400, deadline=None)
@given(
    runtimes=st.lists(st.integers(0, 12), max_size=25),
    censored=st.lists(st.integers(0, 12), max_size=10),
    elapsed=st.integers(0, 8),
    quantile=st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9]),
)
def test_the_estimate_is_textbook_kaplan_meier_with_ties_and_censoring(
    runtimes: list[int], censored: list[int], elapsed: int, quantile: float
) -> None:
    """Small integer times: many ties between runtimes and censored times equal to runtimes."""
    assert conditional_quantile_s(runtimes, censored, elapsed, quantile) == textbook_quantile_s(
        runtimes, censored, elapsed, quantile)


def test_a_tie_and_a_censored_time_equal_to_a_runtime_by_hand() -> None:
    # Beyond 0: events 2, 2, 4, 6; censored at 2 (still at risk at 2) and at 3.
    # S(2) = 1 - 2/6 = 2/3; S(4) = 2/3 * (1 - 1/2) = 1/3 (at risk at 4: 4, 6); S(6) = 0.
    assert conditional_quantile_s([2, 2, 4, 6], [2, 3], 0, 0.3) == 2
    assert conditional_quantile_s([2, 2, 4, 6], [2, 3], 0, 0.5) == 4
    assert conditional_quantile_s([2, 2, 4, 6], [2, 3], 0, 0.9) == 6
    # The estimate at exactly 1 - quantile is taken (S(2) = 1/2 <= 1/2).
    assert conditional_quantile_s([2, 4], [], 0, 0.5) == 2


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.1, 1.5])
def test_quantiles_outside_the_open_unit_interval_are_refused(quantile: float) -> None:
    with pytest.raises(ValueError, match=r"must be in \(0, 1\), got"):
        conditional_quantile_s([1, 2], [], 0, quantile)
    with pytest.raises(ValueError, match=r"survival quantile must be in \(0, 1\), got"):
        SurvivalCorrection(quantile=quantile)


def job(job_id: int, user_id: int = 1) -> JobRequest:
    return JobRequest(job_id, 0, 1, 10_000, user_id)


def test_a_runtime_one_second_past_the_elapsed_time_is_the_answer() -> None:
    policy = SurvivalCorrection(quantile=0.5, min_history=1)
    for job_id, run_s in enumerate([101, 101, 101], start=1):
        policy.job_ended(job(job_id), run_s, run_s)
    assert policy.corrected_prediction_s(10_000, 50, 0, 100, user_id=1, now_s=500) == 101
    assert (policy.estimated, policy.fallbacks) == (1, 0)
    assert policy.corrected_prediction_s(10_000, 50, 0, 100, user_id=1, now_s=500) == 101
    assert (policy.estimated, policy.fallbacks) == (2, 0)
    # with no estimate beyond the elapsed time: INCREMENTAL from this correction's step on
    assert policy.corrected_prediction_s(10_000, 50, 2, 200, user_id=1, now_s=500) == (
        50 + PAPER_STEPS_S[2])
    assert (policy.estimated, policy.fallbacks) == (2, 1)


def test_censored_ends_reach_the_history_as_lower_bounds() -> None:
    policy = SurvivalCorrection(min_history=1)
    policy.job_ended(job(1), 300, 300, censored=True)
    policy.job_ended(job(2), 0, 0)  # a job that never ran: runtime 0, kept
    assert policy.history.observations(1, None) == ([0], [300])


def test_running_jobs_are_censored_at_their_elapsed_time_and_leave_when_they_end() -> None:
    history = RuntimeHistory()
    history.job_started(job(1), 100)
    history.job_started(job(2), 400)  # 0 s elapsed at 400: a bound of 0
    assert history.observations(1, 400) == ([], [300, 0])
    assert history.observations(1, None) == ([], [])
    history.job_ended(job(1), 350, 450)
    assert history.observations(1, 450) == ([350], [50])
    history.job_ended(job(2), 60, 460)
    assert history._running == {}  # the user's last running job gone: no empty entry left


def test_an_empty_history_round_trips_and_a_loaded_one_keeps_its_window() -> None:
    empty = RuntimeHistory().to_state()
    assert empty["ended"].shape == (0, 3) and empty["running"].shape == (0, 3)
    assert empty["ended"].dtype == np.int64 and empty["running"].dtype == np.int64
    restored = RuntimeHistory()
    restored.load_state({})
    assert restored.to_state()["ended"].shape == (0, 3) and restored.observations(1, 0) == ([], [])
    assert restored.to_state()["running"].shape == (0, 3)
    history = RuntimeHistory(window=2)
    for job_id in range(1, 4):
        history.job_ended(job(job_id), 10 * job_id, 100)
    history.job_started(job(9), 5)
    state = history.to_state()
    assert state["ended"].dtype == np.int64 and state["running"].tolist() == [[1, 9, 5]]
    again = RuntimeHistory(window=2)
    again.load_state(state)
    again.job_ended(job(4), 40, 100)  # the window still holds two
    assert again.observations(1, None) == ([30, 40], [])
    assert again.observations(1, 15) == ([30, 40], [10])


def test_incremental_above_takes_the_first_step_strictly_above_the_elapsed_time() -> None:
    first = PAPER_STEPS_S[0]
    assert incremental_above_s(10_000, 100, 0, 100 + first - 1) == 100 + first
    assert incremental_above_s(10_000, 100, 0, 100 + first) == 100 + PAPER_STEPS_S[1]
    assert incremental_above_s(150, 100, 0, 0) == min(100 + first, 150)
    assert incremental_above_s(10_000, 100, len(PAPER_STEPS_S), 0) == 10_000


@pytest.mark.parametrize("text, seconds", [
    ("off", None), ("none", None), ("no", None), (" OFF ", None), ("None", None),
    (0, 0), ("0", 0), ("90m", 5400), ("24h", 86_400), ("2d", 172_800), ("45s", 45), (600, 600),
])
def test_starvation_guards_as_people_write_them(text: object, seconds: int | None) -> None:
    assert parse_starvation_guard(text) == seconds


@pytest.mark.parametrize("value, message", [
    (-1, "a starvation guard is at least 0 s, got -1"),
    (True, "a starvation guard is a duration such as 24h, or off; got True"),
    ("soon", "a starvation guard is a duration such as 24h, 90m, 86400 or off; got 'soon'"),
])
def test_bad_starvation_guards_are_refused_saying_what_was_expected(value: object, message: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_starvation_guard(value)
    assert str(error.value) == message


def test_doubling_at_the_first_seconds_still_extends() -> None:
    """2 x elapsed, but at least one second past it: at 0 s it gives 1 s, at 1 s 2 s."""
    doubling = DoublingCorrection()
    assert [doubling.corrected_prediction_s(100, 1, 0, elapsed) for elapsed in (0, 1, 2, 60)] == [1, 2, 4, 100]


def test_an_end_whose_start_the_history_never_saw_is_kept() -> None:
    """A job reported only at its end (the daemon restarted, say) while the user has others
    running: its runtime is kept, the running ones stay."""
    history = RuntimeHistory()
    history.job_started(job(1), 100)
    history.job_ended(job(2), 70, 200)
    assert history.observations(1, 200) == ([70], [100])


def test_the_smallest_window_and_history_are_one() -> None:
    history = RuntimeHistory(window=1)
    history.job_ended(job(1), 10, 10)
    history.job_ended(job(2), 20, 20)
    assert history.observations(1, None) == ([20], [])
    with pytest.raises(ValueError) as error:
        RuntimeHistory(window=0)
    assert str(error.value) == "the window must hold at least one runtime, got 0"
    assert SurvivalCorrection(min_history=1).min_history == 1
    with pytest.raises(ValueError) as error:
        SurvivalCorrection(min_history=0)
    assert str(error.value) == "min_history must be >= 1, got 0"
