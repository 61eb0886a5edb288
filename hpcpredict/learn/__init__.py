"""The online learner: degree-2 model (docs/method.md §3), 20 losses (§4), NAG (§5).

Three objects, composed by `LearnedPredictor` (style.md §2): a loss gives dL/df, the model
turns it into a gradient in w through Phi(x), NAG steps. Build the usual one with
``LearnedPredictor("eloss", eta=5000.0, l2=4e9)``.
"""

from hpcpredict.learn.losses import (
    E_LOSS,
    WEIGHT_FLOOR,
    AsymmetricLoss,
    Branch,
    Weight,
    all_losses,
    parse_loss,
)
from hpcpredict.learn.nag import ETA_REFERENCE, L2_REFERENCE, Nag, NagConfig, NagState
from hpcpredict.learn.polynomial import QuadraticExpansion, n_quadratic_terms
from hpcpredict.learn.predictor import LearnedPredictor

__all__ = [
    "E_LOSS",
    "ETA_REFERENCE",
    "L2_REFERENCE",
    "WEIGHT_FLOOR",
    "AsymmetricLoss",
    "Branch",
    "LearnedPredictor",
    "Nag",
    "NagConfig",
    "NagState",
    "QuadraticExpansion",
    "Weight",
    "all_losses",
    "n_quadratic_terms",
    "parse_loss",
]
