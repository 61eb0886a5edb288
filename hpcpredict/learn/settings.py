"""The learned predictor's settings in one place: one set of names and one validation for every
door that sets them (a run's spec and a campaign's [learned] table, the command line's options,
the daemon's [learner] section); `LearnedPredictor.from_settings` makes the predictor from them.

Kept free of numpy and numba's kernels, as `defaults` is, so that `hpcpredict --help` and the
configuration's checks stay quick; the predictor is imported when one is built.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hpcpredict.learn.defaults import (
    DEFAULT_CALIBRATION_ALPHA,
    DEFAULT_CENSOR_AT_LIMIT,
    DEFAULT_ETA,
    DEFAULT_FEATURE_SCALING,
    DEFAULT_L2,
    DEFAULT_LOSS_UNIT_S,
    DEFAULT_NEGATIVE,
    FEATURE_SCALINGS,
    FeatureScaling,
    NegativeRule,
)
from hpcpredict.history_keys import DEFAULT_HISTORY_BY, check_history_by
from hpcpredict.learn.losses import parse_loss


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class LearnerSettings:
    """The E-Loss learner's constants (docs/method.md §3-6): the loss (its name, `parse_loss`'s
    syntax), NAG's rate `eta` and the l2 constant, how a negative output becomes a prediction,
    the seconds in the loss's unit, and the measured options: censoring at the limit, robust
    feature scaling, calibrated confidence (None: off), and what a history is kept for
    (`hpcpredict.history_keys`: the user, or the user and a field of the job)."""

    loss: str = "eloss"
    eta: float = DEFAULT_ETA
    l2: float = DEFAULT_L2
    negative: NegativeRule = DEFAULT_NEGATIVE
    loss_unit_s: float = DEFAULT_LOSS_UNIT_S
    censor_at_limit: bool = DEFAULT_CENSOR_AT_LIMIT
    feature_scaling: FeatureScaling = DEFAULT_FEATURE_SCALING
    calibration_alpha: float | None = DEFAULT_CALIBRATION_ALPHA
    history_by: str = DEFAULT_HISTORY_BY

    def __post_init__(self) -> None:
        if not isinstance(self.loss, str):
            raise ValueError(f"the loss is a name such as \"eloss\", got {self.loss!r}")
        parse_loss(self.loss)  # raises a ValueError that lists the valid forms
        if not _number(self.eta) or not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta!r}")
        if not _number(self.l2) or not self.l2 >= 0:
            raise ValueError(f"lambda (l2) must be >= 0, got {self.l2!r}")
        if self.negative not in ("clip", "abs"):
            raise ValueError(f"negative must be 'clip' or 'abs', got {self.negative!r}")
        if not _number(self.loss_unit_s) or not self.loss_unit_s > 0:
            raise ValueError(f"the loss unit must be > 0 seconds, got {self.loss_unit_s!r}")
        if not isinstance(self.censor_at_limit, bool):
            raise ValueError(f"censor_at_limit must be true or false, got {self.censor_at_limit!r}")
        if self.feature_scaling not in FEATURE_SCALINGS:
            raise ValueError(f"feature scaling must be one of {', '.join(FEATURE_SCALINGS)}, got "
                             f"{self.feature_scaling!r}")
        if self.calibration_alpha is not None and (
                not _number(self.calibration_alpha) or not 0.0 < self.calibration_alpha < 1.0):
            raise ValueError(f"the calibration target must be in (0, 1), got {self.calibration_alpha!r}")
        check_history_by(self.history_by)

    def to_keys(self) -> dict[str, object]:
        """The campaign keys (`RunSpec.to_dict`): the options added after the first stores are
        absent while at their default, so that the keys of runs stored earlier stay valid."""
        keys = dataclasses.asdict(self)
        if self.censor_at_limit == DEFAULT_CENSOR_AT_LIMIT:
            keys.pop("censor_at_limit")
        if self.feature_scaling == DEFAULT_FEATURE_SCALING:
            keys.pop("feature_scaling")
        if self.calibration_alpha is None:
            keys.pop("calibration_alpha")
        else:
            keys["calibration_alpha"] = float(self.calibration_alpha)
        if self.history_by == DEFAULT_HISTORY_BY:
            keys.pop("history_by")
        return keys

    @property
    def options_label(self) -> str:
        """``, censored, robust features`` for the options that are on, else empty."""
        return ((", censored" if self.censor_at_limit else "")
                + (", robust features" if self.feature_scaling != DEFAULT_FEATURE_SCALING else "")
                + (f", calibrated alpha={self.calibration_alpha:g}"
                   if self.calibration_alpha is not None else "")
                + (f", history by {self.history_by}" if self.history_by != DEFAULT_HISTORY_BY else ""))


LEARNER_KEYS: frozenset[str] = frozenset(field.name for field in dataclasses.fields(LearnerSettings))
