"""Paired statistics over replicas against hand-computed examples."""

from __future__ import annotations

import math

import pytest

from hpcpredict.sim.replica_stats import (
    describe_change, mean_ci, paired_difference, smallest_sign_p, tail_warning,
)

# Student t quantiles t(0.975, df), from tables: df 2 and 3.
T_975_DF2 = 4.302652729911275
T_975_DF3 = 3.182446305284263


def test_mean_ci_is_the_student_t_interval() -> None:
    estimate = mean_ci([1.0, 2.0, 3.0, 4.0])
    sd = math.sqrt(((1.5**2) * 2 + (0.5**2) * 2) / 3)  # 1.2910
    half = T_975_DF3 * sd / math.sqrt(4)
    assert estimate.mean == 2.5 and estimate.n == 4
    assert estimate.ci_low == pytest.approx(2.5 - half, rel=1e-9)
    assert estimate.ci_high == pytest.approx(2.5 + half, rel=1e-9)


def test_one_value_has_no_interval_and_constant_values_a_point() -> None:
    one = mean_ci([7.0])
    assert one.mean == 7.0 and math.isnan(one.ci_low) and one.to_dict()["ci_low"] is None
    same = mean_ci([3.0, 3.0, 3.0])
    assert (same.ci_low, same.ci_high) == (3.0, 3.0)


def test_paired_difference_by_hand() -> None:
    # differences -2, -1, -3: mean -2, sd 1, sem 1/sqrt(3)
    difference = paired_difference([10.0, 12.0, 14.0], [12.0, 13.0, 17.0])
    half = T_975_DF2 / math.sqrt(3)
    assert difference.mean == pytest.approx(-2.0)
    assert difference.ci_low == pytest.approx(-2.0 - half)
    assert difference.ci_high == pytest.approx(-2.0 + half)
    assert (difference.wins, difference.losses, difference.n) == (3, 0, 3)
    assert difference.relative == pytest.approx(-2.0 / 14.0)
    assert difference.relative_ci_low == pytest.approx((-2.0 - half) / 14.0)
    # t = -2 / (1/sqrt 3) = -3.4641 on 2 df: two-sided p = 0.0742
    assert difference.p_value == pytest.approx(0.07417990022744853, rel=1e-6)
    assert not difference.significant  # -2 +- 2.48 includes 0
    assert difference.sign_p_value == pytest.approx(0.25)  # 3 wins of 3: 2 * 0.5**3
    assert "NOT significant" in describe_change("AVEbsld", difference)


def test_a_consistent_improvement_is_significant() -> None:
    baseline = [100.0, 110.0, 90.0, 105.0, 95.0]
    better = [b - 10.0 + jitter for b, jitter in zip(baseline, [0.5, -0.5, 0.2, -0.2, 0.0])]
    difference = paired_difference(better, baseline)
    assert difference.significant and difference.ci_high < 0
    assert difference.wins == 5
    assert "significantly lower" in describe_change("AVEbsld", difference)
    worse = paired_difference(baseline, better)
    assert "significantly higher" in describe_change("max wait", worse)


def test_pairs_must_match() -> None:
    with pytest.raises(ValueError, match="same replicas"):
        paired_difference([1.0, 2.0], [1.0])


def test_one_wild_replica_widens_the_t_interval_but_not_the_sign_test() -> None:
    baseline = [200.0, 210.0, 190.0, 205.0, 195.0, 4000.0, 200.0, 210.0, 190.0, 205.0]
    learned = [40.0, 38.0, 36.0, 41.0, 39.0, 37.0, 40.0, 35.0, 38.0, 39.0]
    difference = paired_difference(learned, baseline)
    assert difference.wins == 10 and not difference.significant  # t: the wild replica dominates
    assert difference.sign_p_value == pytest.approx(2 * 0.5**10)
    assert "sign test p=0.002" in describe_change("AVEbsld", difference)


def test_the_verdict_names_its_test_and_the_sign_tests_floor_with_few_replicas() -> None:
    baseline = [100.0, 110.0, 90.0, 105.0, 95.0]
    better = [b - 10.0 + jitter for b, jitter in zip(baseline, [0.5, -0.5, 0.2, -0.2, 0.0])]
    sentence = describe_change("AVEbsld", paired_difference(better, baseline))
    # 5 of 5 won: the t interval decides "significantly"; the sign test's 0.0625 is explained
    assert "significantly lower by the paired t interval" in sentence
    assert "sign test p=0.062; with 5 replicas it cannot go below 0.062" in sentence
    ten = describe_change("AVEbsld", paired_difference([b - 10 for b in baseline * 2], baseline * 2))
    assert "cannot go below" not in ten  # 10 replicas can reach 0.002
    assert smallest_sign_p(5) == pytest.approx(0.0625) and smallest_sign_p(10) == pytest.approx(2 / 1024)


def test_a_better_average_with_a_worse_tail_is_said_plainly() -> None:
    baseline = [100.0, 110.0, 90.0, 105.0, 95.0]
    better = paired_difference([b - 10.0 + j for b, j in zip(baseline, [0.5, -0.5, 0.2, -0.2, 0.0])],
                               baseline)
    longer = paired_difference([b * 1.5 for b in baseline], baseline)
    noisy = paired_difference([b + j for b, j in zip(baseline, [9.0, -8.0, 7.0, -6.0, 3.0])], baseline)
    warning = tail_warning(better, {"max wait": longer, "p99 wait": noisy}, "Tune it.")
    assert warning is not None and "the unluckiest jobs wait longer" in warning
    assert warning.endswith("wait far longer. Tune it.")
    assert "max wait +50% (significantly)" in warning and "p99 wait +1% (within the noise)" in warning
    shorter = paired_difference(baseline, [b * 1.5 for b in baseline])
    assert tail_warning(better, {"max wait": shorter}, "") is None  # the tail got better too
    assert tail_warning(longer, {"max wait": longer}, "") is None  # the average got worse: no such case
