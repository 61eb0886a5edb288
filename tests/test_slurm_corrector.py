"""The live corrector's decision (pure): when it raises a limit, to what, and never twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from conftest import PAPER_STEPS_S
from hpcpredict.corrections.policies import DoublingCorrection, RequestedTimeCorrection
from hpcpredict.slurm.corrector import corrected_limit_s, whole_minutes_s
from hpcpredict.slurm.tag import PredictionTag, parse_tag


def test_nothing_is_due_far_from_the_limit_or_at_the_request() -> None:
    assert corrected_limit_s(request_s=3600, prediction_s=600, current_limit_s=600, elapsed_s=300, margin_s=120) is None
    assert corrected_limit_s(request_s=3600, prediction_s=600, current_limit_s=3600, elapsed_s=3590) is None


def test_incremental_steps_rounded_to_minutes_with_headroom() -> None:
    # prediction 10 min: +1 min gives 11 min, but only 60 s after the limit is reached: skipped
    # when the margin is 120 s; +5 min gives 15 min.
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=600, elapsed_s=590, margin_s=120) == 900
    # with a small margin the first step is taken
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=600, elapsed_s=590, margin_s=30) == 660
    # the next call, at the new limit, takes the next step (stateless: derived from the limit)
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=660, elapsed_s=650, margin_s=30) == 900
    # a prediction of 61 s is rounded up to whole minutes
    assert corrected_limit_s(request_s=7200, prediction_s=61, current_limit_s=120, elapsed_s=100, margin_s=30) == 180


def test_a_job_exactly_the_margin_from_its_limit_is_corrected() -> None:
    """The boundary of "within the margin": 120 s left of a 600 s limit is due, 121 s is not."""
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=600, elapsed_s=480, margin_s=120) == 660
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=600, elapsed_s=479, margin_s=120) is None
    # and a step that leaves exactly the margin of headroom is not enough (660 - 540 = 120)
    assert corrected_limit_s(request_s=7200, prediction_s=600, current_limit_s=600, elapsed_s=540, margin_s=120) == 900


def test_the_request_is_the_last_answer() -> None:
    assert corrected_limit_s(request_s=1200, prediction_s=600, current_limit_s=900, elapsed_s=890, margin_s=120) == 1200
    assert corrected_limit_s(request_s=1200, prediction_s=600, current_limit_s=600, elapsed_s=590,
                             policy=RequestedTimeCorrection()) == 1200


@given(
    request_min=st.integers(1, 10_000),
    prediction_s=st.integers(1, 600_000),
    elapsed_s=st.integers(0, 600_000),
    margin_s=st.integers(0, 600),
    policy=st.sampled_from([None, DoublingCorrection(), RequestedTimeCorrection()]),
    near_margin_s=st.one_of(st.none(), st.integers(-3, 3)),
)
def test_a_correction_is_due_exactly_near_the_limit_never_above_the_request_and_always_helps(request_min, prediction_s, elapsed_s, margin_s, policy, near_margin_s) -> None:
    request_s = 60 * request_min
    current = min(request_s, whole_minutes_s(min(prediction_s, request_s)))
    if near_margin_s is not None:  # the job a few seconds from "the margin left": the boundary
        elapsed_s = max(0, current - margin_s + near_margin_s)
    kwargs = {} if policy is None else {"policy": policy}
    limit = corrected_limit_s(request_s=request_s, prediction_s=min(prediction_s, request_s),
                              current_limit_s=current, elapsed_s=elapsed_s, margin_s=margin_s, **kwargs)
    # Both ways: a correction is due if and only if the limit is below the request and the job
    # has at most the margin left before it.
    time_left_s = current - elapsed_s
    assert (limit is not None) == (current < request_s and time_left_s <= margin_s)
    if limit is None:
        return
    assert current < limit <= request_s and limit % 60 == 0
    assert limit == request_s or limit - elapsed_s > margin_s  # more than the margin left after it
    if policy is None:  # INCREMENTAL: the first rung of its ladder with that headroom
        ladder = sorted({min(request_s, whole_minutes_s(min(prediction_s, request_s) + step_s))
                         for step_s in PAPER_STEPS_S} | {request_s})
        assert limit == next(rung for rung in ladder
                             if rung == request_s or (rung > current and rung - elapsed_s > margin_s))


def test_tag_round_trip_and_foreign_comments() -> None:
    tag = PredictionTag(3600, 700)
    assert parse_tag(tag.format()) == tag
    assert parse_tag(tag.format() + " checked by admin") == tag
    assert parse_tag("something else") is None
    assert parse_tag(None) is None
