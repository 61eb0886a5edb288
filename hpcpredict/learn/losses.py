"""The 20 asymmetric weighted losses of docs/method.md §4 and their derivative in the prediction.

For a prediction f of a job with true runtime p (seconds) and q processors:

    L = gamma * L_over(f - p)   if f >= p      L = gamma * L_under(p - f)   if f < p

with L_over, L_under each ``linear`` (z) or ``square`` (z^2) and gamma one of five weights. The
E-Loss (Gaussier et al., SC 2015) is over=square, under=linear, weight=large_area: over-predicting
wastes backfilling opportunities quadratically, under-predicting only costs a correction.

A loss has two methods, `value` and `gradient` (d/df), as in river's optim losses; the model
multiplies the gradient by Phi(x) (chain rule), the optimiser (NAG) never sees the loss itself.
At f == p the over branch applies, so a linear over branch has derivative gamma there (a valid
subgradient).

Weights are kept positive and finite by one documented rule, `gamma_floor`:

* p and q enter the logarithms clamped to at least 1 (1 s is the shortest runtime a prediction
  can have and SWF runtimes are whole seconds; a job has at least one processor), so a p of
  0 or 0.3 s gives no infinite or undefined logarithm;
* the weight is then floored at ``WEIGHT_FLOOR = 1e-3``. The constants 5 and 11 of §4 keep gamma
  positive for typical jobs only: 5 + log(q/p) is negative for a one-processor job longer than
  about 2.5 min, log(q p) is 0 for a one-second one-processor job. A small positive floor rather
  than max(1, ...) keeps the ordering the weight was designed for (a job the weight disfavours
  still counts less than a favoured one: with max(1, .) a 1-second serial job would weigh as much
  as a 2-hour one under large_area) while never giving a zero or negative weight, which would
  stop learning from a job or push the model the wrong way.

The reference used 1 + log(q p) for large_area (docs/method.md §10) with no floor; we follow §4.

The unit. A squared branch is not unit-free: z^2 in seconds against a linear z makes
over-predicting by more than one second cost more than under-predicting by the same amount,
whatever the job. `unit_s` = u measures the errors of both branches in units of u seconds and
scales the loss back by u, i.e. a squared branch is z^2 / u and a linear one stays z: the two
branches of the E-Loss then cost the same at z = u (their slopes at z = u / 2). u = 1 is method.md's loss in seconds (the
reference's); `LearnedPredictor` measures in hours by default (its doc and docs/results.md say
why and what it changes).

>>> loss = parse_loss("eloss")
>>> loss.name
'over=square,under=linear,weight=large_area'
>>> round(loss.gradient(f=110.0, p=100.0, q=1), 6) == round(2 * 10 * math.log(100), 6)
True
>>> loss.gradient(f=90.0, p=100.0, q=1) == -math.log(100)
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

WEIGHT_FLOOR = 1e-3  # smallest gamma_j: keeps every job's weight positive (module doc)


class Branch(Enum):
    """Shape of one side of the loss, as a function of the error z >= 0."""

    LINEAR = "linear"
    SQUARE = "square"


class Weight(Enum):
    """gamma_j of docs/method.md §4 (p = true runtime in seconds, q = processors)."""

    CONSTANT = "constant"  # 1
    SHORT_WIDE = "short_wide"  # 5 + log(q / p)
    LONG_NARROW = "long_narrow"  # 5 + log(p / q)
    SMALL_AREA = "small_area"  # 11 + log(1 / (q p))
    LARGE_AREA = "large_area"  # log(q p)


# One function per weight, of p and q already clamped to >= 1 (module doc); picked once per loss
# so that the per-job gradient does no dispatch (it runs once per learned job).
def _constant(p: float, q: float) -> float:
    return 1.0


def _short_wide(p: float, q: float) -> float:
    return 5.0 + math.log(q / p)


def _long_narrow(p: float, q: float) -> float:
    return 5.0 + math.log(p / q)


def _small_area(p: float, q: float) -> float:
    return 11.0 - math.log(q * p)


def _large_area(p: float, q: float) -> float:
    return math.log(q * p)


_WEIGHT_FUNCTIONS: dict[Weight, Callable[[float, float], float]] = {
    Weight.CONSTANT: _constant,
    Weight.SHORT_WIDE: _short_wide,
    Weight.LONG_NARROW: _long_narrow,
    Weight.SMALL_AREA: _small_area,
    Weight.LARGE_AREA: _large_area,
}


def raw_weight(weight: Weight, p: float, q: float) -> float:
    """gamma_j before the floor, with p and q clamped to at least 1 (module doc)."""
    return _WEIGHT_FUNCTIONS[weight](p if p > 1.0 else 1.0, q if q > 1.0 else 1.0)


@dataclass(frozen=True, slots=True)
class AsymmetricLoss:
    """One of the 20 losses; `value` and `gradient` take (f, p, q) with p the true runtime."""

    over: Branch
    under: Branch
    weight: Weight
    weight_floor: float = WEIGHT_FLOOR
    unit_s: float = 1.0  # time unit of the squared branches (module doc, "The unit")
    _over_square: bool = field(init=False, repr=False, compare=False)
    _under_square: bool = field(init=False, repr=False, compare=False)
    _raw_weight: Callable[[float, float], float] = field(init=False, repr=False, compare=False)
    _inv_unit: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.weight_floor > 0.0:
            raise ValueError(f"weight_floor must be > 0, got {self.weight_floor!r}")
        if not (self.unit_s > 0.0 and math.isfinite(self.unit_s)):
            raise ValueError(f"unit_s must be a finite number > 0, got {self.unit_s!r}")
        # Resolved once: the gradient runs once per learned job.
        object.__setattr__(self, "_over_square", self.over is Branch.SQUARE)
        object.__setattr__(self, "_under_square", self.under is Branch.SQUARE)
        object.__setattr__(self, "_raw_weight", _WEIGHT_FUNCTIONS[self.weight])
        object.__setattr__(self, "_inv_unit", 1.0 / self.unit_s)

    @property
    def name(self) -> str:
        """Canonical name, accepted back by `parse_loss`."""
        return f"over={self.over.value},under={self.under.value},weight={self.weight.value}"

    def gamma(self, p: float, q: float) -> float:
        """The job's weight, always >= `weight_floor` (module doc)."""
        gamma = self._raw_weight(p if p > 1.0 else 1.0, q if q > 1.0 else 1.0)
        return gamma if gamma > self.weight_floor else self.weight_floor

    def value(self, f: float, p: float, q: float) -> float:
        """L(f) for a job of true runtime p seconds on q processors."""
        if f >= p:
            z = f - p
            return self.gamma(p, q) * (z * z * self._inv_unit if self._over_square else z)
        z = p - f
        return self.gamma(p, q) * (z * z * self._inv_unit if self._under_square else z)

    def gradient(self, f: float, p: float, q: float) -> float:
        """dL/df: the scalar the model multiplies by Phi(x)."""
        if f >= p:
            return self.gamma(p, q) * (2.0 * (f - p) * self._inv_unit if self._over_square else 1.0)
        return -self.gamma(p, q) * (2.0 * (p - f) * self._inv_unit if self._under_square else 1.0)


E_LOSS = AsymmetricLoss(Branch.SQUARE, Branch.LINEAR, Weight.LARGE_AREA)

_ALIASES: dict[str, AsymmetricLoss] = {
    "eloss": E_LOSS,
    "e-loss": E_LOSS,
    "e_loss": E_LOSS,
    "squared": AsymmetricLoss(Branch.SQUARE, Branch.SQUARE, Weight.CONSTANT),
}


# The names people use for the losses that have one (reports show both: the canonical name is
# what --loss and the campaign files take back).
_COMMON_NAMES: dict[str, str] = {
    E_LOSS.name: "E-Loss",
    _ALIASES["squared"].name: "squared",
}


def display_name(name: str) -> str:
    """A loss's canonical name with its common one first, for reports:

    >>> display_name("over=square,under=linear,weight=large_area")
    'E-Loss (over=square,under=linear,weight=large_area)'
    >>> display_name("over=linear,under=square,weight=constant")
    'over=linear,under=square,weight=constant'
    """
    common = _COMMON_NAMES.get(name)
    return f"{common} ({name})" if common else name


def all_losses() -> list[AsymmetricLoss]:
    """The 2 x 2 x 5 = 20 losses of docs/method.md §4, in a fixed order."""
    return [
        AsymmetricLoss(over, under, weight)
        for over in Branch
        for under in Branch
        for weight in Weight
    ]


def parse_loss(text: str) -> AsymmetricLoss:
    """A loss from ``eloss``, ``squared`` or ``over=square,under=linear,weight=large_area``.

    Keys may come in any order; all three are required in the key=value form, so a typo can
    never silently select a default.

    >>> parse_loss("weight=constant, over=linear, under=square").name
    'over=linear,under=square,weight=constant'
    """
    cleaned = text.strip().lower()
    if cleaned in _ALIASES:
        return _ALIASES[cleaned]
    parts: dict[str, str] = {}
    for item in cleaned.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in ("over", "under", "weight") or key in parts:
            raise ValueError(_parse_error(text))
        parts[key] = value
    if set(parts) != {"over", "under", "weight"}:
        raise ValueError(_parse_error(text))
    try:
        return AsymmetricLoss(
            Branch(parts["over"]), Branch(parts["under"]), Weight(parts["weight"])
        )
    except ValueError:
        raise ValueError(_parse_error(text)) from None


def _parse_error(text: str) -> str:
    branches = "|".join(b.value for b in Branch)
    weights = "|".join(w.value for w in Weight)
    return (
        f"cannot parse loss {text!r}: expected one of {sorted(_ALIASES)} or "
        f"'over={branches},under={branches},weight={weights}'"
    )
