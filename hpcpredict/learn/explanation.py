"""Why the learned model predicted what it did: its prediction split into the terms of Phi.

The model is f = w . Phi(x) (docs/method.md §3), a sum of 231 products w_i * phi_i; each names
one term of the degree-2 polynomial ("requested_s", "last_run_s^2", "requested_s x ave2_s").
`LearnedPredictor.explain` computes them with the model's own expansion and weights, so the
parts add up to the f the prediction came from. That sum lives in the model's output space
(seconds, before any transform); `PredictionExplanation.transform` says how f became the whole
seconds served (|f| or 1 s for a negative f, capped at the request, truncated, at least 1 s).

Shares are of the terms' total magnitude (sum of |w_i * phi_i|): terms can cancel each other,
and a "60% of the prediction" that is really +3 h against -2.5 h would mislead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TermContribution:
    """One term of the polynomial in one prediction."""

    term: str  # "bias", a feature's name, "name^2" or "name x other"
    contribution_s: float  # w_i * phi_i, seconds in the model's output space
    share: float  # |contribution| / sum of every term's |contribution|

    def to_dict(self) -> dict[str, object]:
        return {"term": self.term, "contribution_s": self.contribution_s, "share": self.share}


@dataclass(frozen=True)
class PredictionExplanation:
    """A prediction of the learned model and the terms that make it up."""

    features: dict[str, float]  # x_j by feature name, as the model saw it (after any scaling)
    term_names: tuple[str, ...]
    contributions_s: np.ndarray  # w_i * phi_i per term (phi clamped as for a prediction)
    raw_s: float  # f = w . Phi: what the contributions sum to
    model_s: int  # f as served: the transform below applied
    published_s: int  # what `predict` publishes (differs from model_s with experts or calibration)
    requested_s: int
    transform: str  # how raw_s became model_s, in words

    def top_terms(self, count: int = 5) -> list[TermContribution]:
        """The `count` terms of largest magnitude, largest first."""
        magnitude = np.abs(self.contributions_s)
        total = float(magnitude.sum())
        order = np.argsort(-magnitude, kind="stable")[:count]
        return [
            TermContribution(self.term_names[i], float(self.contributions_s[i]),
                             float(magnitude[i]) / total if total > 0 else 0.0)
            for i in order
        ]

    def to_dict(self, count: int = 5) -> dict[str, object]:
        return {
            "prediction_s": self.published_s,
            "model_s": self.model_s,
            "raw_s": self.raw_s,
            "requested_s": self.requested_s,
            "transform": self.transform,
            "top_terms": [term.to_dict() for term in self.top_terms(count)],
            "features": self.features,
        }


def describe_transform(raw_s: float, model_s: int, requested_s: int, *, abs_negative: bool) -> str:
    """How f = `raw_s` became the whole seconds `model_s`, in one phrase."""
    if raw_s != raw_s:
        return f"f is NaN (a diverged model) -> the request, {model_s:,} s"
    steps = []
    value = raw_s
    if raw_s < 0:
        value = -raw_s if abs_negative else 1.0
        steps.append(f"f < 0: {'its magnitude |f|' if abs_negative else '1 s'} is used")
    if value > requested_s:
        steps.append(f"capped at the request ({requested_s:,} s)")
    elif value < 1:
        steps.append("raised to the 1 s minimum")
    else:
        steps.append("truncated to whole seconds")
    return f"f = {raw_s:,.1f} s -> {model_s:,} s ({'; '.join(steps)})"
