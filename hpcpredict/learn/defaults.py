"""The learned predictor's default constants and the names of its options, apart from the
learner itself so that the command line, a campaign's and the daemon's configuration can read
them without importing numpy and numba's kernels (`hpcpredict --help` stays quick: start-up in
docs/performance.md). `predictor` and `nag` use these very objects.
"""

from __future__ import annotations

from typing import Literal

ETA_REFERENCE = 5000.0  # learning rate of the reference simulator (docs/method.md §10)
L2_REFERENCE = 4e9  # its l2 constant, added as lambda * w to the gradient (docs/method.md §10)

NegativeRule = Literal["clip", "abs"]
FeatureScaling = Literal["raw", "robust"]
FEATURE_SCALINGS: tuple[str, ...] = ("raw", "robust")

DEFAULT_ETA = ETA_REFERENCE
DEFAULT_L2 = L2_REFERENCE
DEFAULT_NEGATIVE: NegativeRule = "abs"
DEFAULT_LOSS_UNIT_S = 3600.0
# Measured, kept as options, not defaults: docs/results.md, "Learner and correction options".
DEFAULT_CENSOR_AT_LIMIT = False  # censoring
DEFAULT_FEATURE_SCALING: FeatureScaling = "raw"  # robust features (cold start)
DEFAULT_CALIBRATION_ALPHA: float | None = None  # calibrated confidence
