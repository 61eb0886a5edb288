"""Statistics over shaken replicas: means with confidence intervals, paired differences.

Two configurations replayed on the same N shaken logs give N pairs; the replica-to-replica noise
is mostly shared by both members of a pair, so the difference within pairs is far less noisy than
either configuration alone. We therefore judge "A is better than B" on the paired differences
d_r = metric(A, r) - metric(B, r): their mean, a two-sided 95% Student-t confidence interval
(scipy.stats.ttest_rel; docs/evaluation.md says why t rather than a bootstrap at N = 10), and how
many replicas A won. A difference is called significant when its interval excludes zero. Lower is
better for every metric we compare (bounded slowdown, waits).

Bounded slowdown has heavy tails: one replica in which a wide job starves can multiply a mean by
twenty (EASY++ on CEA-Curie, docs/results.md), and then the t interval is wide whatever the other
replicas say. So the exact two-sided sign test on the wins and losses (`scipy.stats.binomtest`,
ties left out) is reported beside it: it uses only which member of each pair was lower, and no
single replica can dominate it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A mean over replicas and its confidence interval (NaN bounds with one replica)."""

    mean: float
    ci_low: float
    ci_high: float
    n: int

    def to_dict(self) -> dict[str, float | int | None]:
        return _finite_or_none(asdict(self))


@dataclass(frozen=True)
class PairedDifference:
    """`value - baseline` over paired replicas; `relative` is the mean difference over the
    baseline's mean (and its interval scaled the same way)."""

    mean: float
    ci_low: float
    ci_high: float
    relative: float
    relative_ci_low: float
    relative_ci_high: float
    wins: int  # replicas where the value is below the baseline's
    losses: int  # replicas where it is above
    n: int
    p_value: float  # paired t test
    sign_p_value: float  # exact two-sided sign test on wins and losses

    @property
    def significant(self) -> bool:
        """The interval excludes zero (never with fewer than two replicas)."""
        return self.n >= 2 and (self.ci_high < 0 or self.ci_low > 0)

    def to_dict(self) -> dict[str, float | int | bool | None]:
        return {**_finite_or_none(asdict(self)), "significant": self.significant}


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Estimate:
    """Mean and Student-t confidence interval of independent replica values."""
    import numpy as np  # here, as scipy: the command line imports this module for names
    from scipy import stats  # 0.5 s to import, needed only by replicated runs

    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("no replica values")
    mean = float(data.mean())
    if data.size < 2:
        return Estimate(mean, math.nan, math.nan, 1)
    sem = float(stats.sem(data))
    if sem == 0:
        return Estimate(mean, mean, mean, int(data.size))
    low, high = stats.t.interval(confidence, data.size - 1, loc=mean, scale=sem)
    return Estimate(mean, float(low), float(high), int(data.size))


def paired_difference(
    values: Sequence[float], baseline: Sequence[float], confidence: float = CONFIDENCE
) -> PairedDifference:
    """Paired comparison of `values` against `baseline` (same replicas, same order)."""
    import numpy as np
    from scipy import stats

    a = np.asarray(values, dtype=float)
    b = np.asarray(baseline, dtype=float)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired values need the same replicas: {a.size} against {b.size}")
    differences = a - b
    estimate = mean_ci(differences, confidence)
    if a.size >= 2 and np.ptp(differences) > 0:
        p_value = float(stats.ttest_rel(a, b).pvalue)
    else:  # one replica, or the same difference on every replica: no spread to test against
        p_value = math.nan
    wins, losses = int(np.sum(differences < 0)), int(np.sum(differences > 0))
    sign_p_value = float(stats.binomtest(wins, wins + losses).pvalue) if wins + losses else math.nan
    scale = float(b.mean())
    relative = (lambda x: x / scale) if scale else (lambda x: math.nan)
    return PairedDifference(
        mean=estimate.mean,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        relative=relative(estimate.mean),
        relative_ci_low=relative(estimate.ci_low),
        relative_ci_high=relative(estimate.ci_high),
        wins=wins,
        losses=losses,
        n=int(a.size),
        p_value=p_value,
        sign_p_value=sign_p_value,
    )


def smallest_sign_p(replicas: int) -> float:
    """The lowest p-value the exact two-sided sign test can reach on `replicas` pairs (all won):
    2 / 2**n, 0.0625 with 5 replicas, 0.002 with 10."""
    return min(1.0, 2.0 / 2.0**replicas)


def describe_change(name: str, difference: PairedDifference) -> str:
    """One plain sentence whose verdict is the paired t interval's, with the sign test beside it
    and said to be beside it, e.g. 'AVEbsld -23.1% (95% CI -25.0% to -21.2%): significantly lower
    by the paired t interval; lower on 10 of 10 replicas (sign test p=0.002)'."""
    if difference.n < 2:
        return f"{name} {difference.relative:+.1%} (one replay: no confidence interval)"
    if not difference.significant:
        verdict = "NOT significant: the paired t interval includes 0"
    else:
        verdict = ("significantly " + ("lower" if difference.ci_high < 0 else "higher")
                   + " by the paired t interval")
    sign = ""
    if not math.isnan(difference.sign_p_value):
        sign = f" (sign test p={difference.sign_p_value:.2g}"
        floor = smallest_sign_p(difference.n)
        if floor > 1 - CONFIDENCE:
            sign += f"; with {difference.n} replicas it cannot go below {floor:.2g}"
        sign += ")"
    return (
        f"{name} {difference.relative:+.1%} (95% CI {difference.relative_ci_low:+.1%} to "
        f"{difference.relative_ci_high:+.1%}): {verdict}; lower on {difference.wins} of "
        f"{difference.n} replicas{sign}"
    )


def tail_warning(
    average: PairedDifference, tails: dict[str, PairedDifference], advice: str
) -> str | None:
    """The sentence an administrator needs when the average gets better and the tail worse:
    `average` is AVEbsld's difference, `tails` the waits' (name -> difference), `advice` what to
    do about it, which depends on the bound the replay ran under (the caller knows it). None when
    the average is not better, or no tail is worse on average over the replicas."""
    if not average.mean < 0:
        return None
    worse = {name: tail for name, tail in tails.items() if tail.mean > 0}
    if not worse:
        return None
    parts = []
    for name, tail in worse.items():
        certainty = ("significantly" if tail.significant else "within the noise"
                     if tail.n >= 2 else "on one replay")
        parts.append(f"{name} {tail.relative:+.0%} ({certainty})")
    firm = "" if average.n < 2 or average.significant else " (itself within the noise)"
    return (
        f"In plain words: the average job waits less (AVEbsld {average.relative:+.1%}{firm}), but "
        f"the unluckiest jobs wait longer ({', '.join(parts)}): a gain on average paid by a few "
        f"jobs that wait far longer. {advice}"
    )


def _finite_or_none(values: dict[str, object]) -> dict[str, object]:
    """JSON has no NaN: undefined bounds become null."""
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in values.items()
    }
