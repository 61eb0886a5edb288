"""The 20 losses of docs/method.md §4: values, weights, gradients against finite differences."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpcpredict.learn.losses import (
    E_LOSS,
    WEIGHT_FLOOR,
    AsymmetricLoss,
    Branch,
    Weight,
    all_losses,
    parse_loss,
    raw_weight,
)

ALL = all_losses()

runtimes_s = st.floats(min_value=1.0, max_value=1e6)
procs = st.integers(min_value=1, max_value=100_000)


def test_there_are_twenty_distinct_losses_and_names_parse_back() -> None:
    assert len(ALL) == 20
    assert len({loss.name for loss in ALL}) == 20
    assert [parse_loss(loss.name) for loss in ALL] == ALL


def test_eloss_is_square_over_linear_under_large_area() -> None:
    assert parse_loss("eloss") == E_LOSS == parse_loss("E-Loss")
    assert (E_LOSS.over, E_LOSS.under, E_LOSS.weight) == (
        Branch.SQUARE,
        Branch.LINEAR,
        Weight.LARGE_AREA,
    )
    assert E_LOSS.name == "over=square,under=linear,weight=large_area"


def test_parse_accepts_any_key_order_and_spaces() -> None:
    loss = parse_loss(" weight=short_wide , under=square,over=linear ")
    assert loss == AsymmetricLoss(Branch.LINEAR, Branch.SQUARE, Weight.SHORT_WIDE)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "over=square,under=linear",  # weight missing: no silent default
        "over=square,under=linear,weight=huge",
        "over=cube,under=linear,weight=constant",
        "over=square,under=linear,weight=constant,over=linear",
        "over=square;under=linear;weight=constant",
        "nonsense",
    ],
)
def test_parse_rejects_bad_strings_with_a_helpful_message(text: str) -> None:
    with pytest.raises(ValueError, match="cannot parse loss.*over=linear\\|square"):
        parse_loss(text)


@pytest.mark.parametrize(
    ("weight", "expected"),
    [
        (Weight.CONSTANT, 1.0),
        (Weight.SHORT_WIDE, 5.0 + math.log(64 / 100)),
        (Weight.LONG_NARROW, 5.0 + math.log(100 / 64)),
        (Weight.SMALL_AREA, 11.0 + math.log(1 / (64 * 100))),
        (Weight.LARGE_AREA, math.log(64 * 100)),
    ],
)
def test_weights_of_a_typical_job_follow_the_formulas(weight: Weight, expected: float) -> None:
    loss = AsymmetricLoss(Branch.SQUARE, Branch.LINEAR, weight)
    assert loss.gamma(p=100.0, q=64) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("weight", "p", "q"),
    [
        (Weight.LARGE_AREA, 1.0, 1),  # log(1) = 0
        (Weight.LARGE_AREA, 0.3, 1),  # p < 1 s
        (Weight.LARGE_AREA, 0.0, 1),  # p = 0 would be log(0)
        (Weight.SHORT_WIDE, 1e6, 1),  # 5 + log(1e-6) < 0
        (Weight.LONG_NARROW, 1.0, 80_640),  # 5 - log(80640) < 0
        (Weight.SMALL_AREA, 86_400.0, 1024),  # 11 - log(8.8e7) < 0
    ],
)
def test_atypical_jobs_get_the_floor_weight(weight: Weight, p: float, q: int) -> None:
    assert raw_weight(weight, p, q) <= 0.0
    loss = AsymmetricLoss(Branch.SQUARE, Branch.SQUARE, weight)
    assert loss.gamma(p, q) == WEIGHT_FLOOR


@settings(max_examples=300)
@given(
    p=st.floats(min_value=0.0, max_value=1e9, allow_nan=False),
    q=st.floats(min_value=0.0, max_value=1e7, allow_nan=False),
)
def test_weights_are_always_positive_and_finite(p: float, q: float) -> None:
    for loss in ALL:
        gamma = loss.gamma(p, q)
        assert WEIGHT_FLOOR <= gamma < 40.0  # log(1e9 * 1e7) = 36.8


def test_values_by_hand() -> None:
    gamma = math.log(4 * 100)
    assert E_LOSS.value(f=110.0, p=100.0, q=4) == pytest.approx(gamma * 100.0, rel=1e-12)
    assert E_LOSS.value(f=90.0, p=100.0, q=4) == pytest.approx(gamma * 10.0, rel=1e-12)
    assert E_LOSS.value(f=100.0, p=100.0, q=4) == 0.0
    linear_square = AsymmetricLoss(Branch.LINEAR, Branch.SQUARE, Weight.CONSTANT)
    assert linear_square.value(f=130.0, p=100.0, q=4) == 30.0
    assert linear_square.value(f=70.0, p=100.0, q=4) == 900.0
    assert linear_square.gradient(f=130.0, p=100.0, q=4) == 1.0
    assert linear_square.gradient(f=70.0, p=100.0, q=4) == -60.0
    # The kink f == p belongs to the over branch: a linear over branch gives gamma there.
    assert linear_square.gradient(f=100.0, p=100.0, q=4) == 1.0


def _check_gradient(loss: AsymmetricLoss, f: float, p: float, q: int) -> None:
    # A step relative to the magnitudes involved keeps the rounding error of the difference of
    # two large values small; central differences are exact for linear and quadratic pieces.
    h = 1e-6 * max(1.0, abs(f), abs(p))
    assume(abs(f - p) > 10 * h)  # stay on one branch: the loss has a kink at f = p
    numeric = (loss.value(f + h, p, q) - loss.value(f - h, p, q)) / (2 * h)
    analytic = loss.gradient(f, p, q)
    scale = max(abs(analytic), loss.gamma(p, q))
    assert abs(numeric - analytic) <= 1e-6 * scale


@pytest.mark.parametrize("loss", ALL, ids=lambda loss: loss.name)
@settings(max_examples=60, deadline=None)
@given(p=runtimes_s, q=procs, over_by=st.floats(min_value=1e-3, max_value=1e6))
def test_gradient_matches_finite_differences_over_branch(
    loss: AsymmetricLoss, p: float, q: int, over_by: float
) -> None:
    f = p + over_by
    assert loss.gradient(f, p, q) > 0.0
    _check_gradient(loss, f, p, q)


@pytest.mark.parametrize("loss", ALL, ids=lambda loss: loss.name)
@settings(max_examples=60, deadline=None)
@given(p=runtimes_s, q=procs, under_by=st.floats(min_value=1e-3, max_value=1e6))
def test_gradient_matches_finite_differences_under_branch(
    loss: AsymmetricLoss, p: float, q: int, under_by: float
) -> None:
    f = p - under_by  # may be negative: the model's raw output can be
    assert loss.gradient(f, p, q) < 0.0
    _check_gradient(loss, f, p, q)


@settings(max_examples=200)
@given(f=st.floats(min_value=-1e6, max_value=1e6), p=runtimes_s, q=procs)
def test_losses_are_nonnegative_and_zero_only_at_the_runtime(f: float, p: float, q: int) -> None:
    for loss in ALL:
        value = loss.value(f, p, q)
        assert value >= 0.0
        assert (value == 0.0) == (f == p)


def test_weight_floor_must_be_positive() -> None:
    with pytest.raises(ValueError, match="weight_floor"):
        AsymmetricLoss(Branch.SQUARE, Branch.LINEAR, Weight.CONSTANT, weight_floor=0.0)
