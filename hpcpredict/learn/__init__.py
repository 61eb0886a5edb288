"""The online learner: degree-2 model (docs/method.md §3), 20 losses (§4), NAG (§5).

Three objects, composed by `LearnedPredictor`: a loss gives dL/df, the model
turns it into a gradient in w through Phi(x), NAG steps. Build the usual one with
``LearnedPredictor("eloss", eta=5000.0, l2=4e9)``.

The names below are loaded from their modules on first use (PEP 562), so that importing one
light submodule (`losses`, `defaults`) does not compile NAG's kernels with numba: the command
line imports those two to build its options, and `hpcpredict --help` stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcpredict.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

_SOURCES = {
    "hpcpredict.learn.losses": (
        "E_LOSS", "WEIGHT_FLOOR", "AsymmetricLoss", "Branch", "Weight", "all_losses", "parse_loss",
    ),
    "hpcpredict.learn.nag": ("ETA_REFERENCE", "L2_REFERENCE", "Nag", "NagConfig", "NagState"),
    "hpcpredict.learn.polynomial": ("QuadraticExpansion", "n_quadratic_terms"),
    "hpcpredict.learn.predictor": ("LearnedPredictor",),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _SOURCES)
