"""Degree-2 polynomial expansion Phi(x) of docs/method.md §3.

Phi(x) = (1, x_1..x_n, x_1^2..x_n^2, x_k x_l for k < l): 1 + 2n + n(n-1)/2 terms, 231 for the
20 features. All of them are entries of the outer product of (1, x) with itself, in the order of
`quadratic_pairs`: the expansion is one compiled loop (`nag_kernels.quadratic_terms`, which
writes those products out; it runs once per prediction: 1.45 us a call, numba's dispatch
included, against 2.2 us for the two gathers and a multiply in numpy it replaced). `score` adds
the prediction w . Phi in the same call (docs/journal/performance-2026-11.md, "Issue 13, item 5").

>>> expansion = QuadraticExpansion(2)
>>> expansion.expand(np.array([2.0, 3.0])).tolist()
[1.0, 2.0, 3.0, 4.0, 9.0, 6.0]
"""

from __future__ import annotations

import numpy as np

from hpcpredict.learn.nag_kernels import expand_and_score, quadratic_terms


def n_quadratic_terms(n_features: int) -> int:
    """1 + 2n + n(n-1)/2 (docs/method.md §3): 231 for n = 20."""
    return 1 + 2 * n_features + n_features * (n_features - 1) // 2


def quadratic_pairs(n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (a, b) into (1, x_1..x_n) whose products are the terms, in method.md order.

    Index 0 is the constant 1, so (0, 0) is the bias, (0, i) the linear terms, (i, i) the
    squares and (k, l), k < l, the cross products.
    """
    ones = range(1, n_features + 1)
    pairs = [(0, 0)]
    pairs += [(0, i) for i in ones]
    pairs += [(i, i) for i in ones]
    pairs += [(k, m) for k in ones for m in range(k + 1, n_features + 1)]
    left, right = zip(*pairs)
    return np.array(left, dtype=np.intp), np.array(right, dtype=np.intp)


def term_names(feature_names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """A readable name for each term of Phi, in `quadratic_pairs` order: "bias", the feature's
    name, "name^2", "name x other". What explanations show beside w_i * phi_i.

    >>> term_names(["a", "b"])
    ('bias', 'a', 'b', 'a^2', 'b^2', 'a x b')
    """
    names = ("1", *feature_names)
    terms = []
    for left, right in zip(*quadratic_pairs(len(feature_names))):
        if left == 0:
            terms.append("bias" if right == 0 else names[right])
        elif left == right:
            terms.append(f"{names[left]}^2")
        else:
            terms.append(f"{names[left]} x {names[right]}")
    return tuple(terms)


class QuadraticExpansion:
    """Phi for a fixed number of features."""

    def __init__(self, n_features: int) -> None:
        self.n_features = n_features
        self.n_terms = n_quadratic_terms(n_features)

    def expand(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Phi(x) into `out` (a float64 buffer of `n_terms`, allocated if None)."""
        if out is None:
            out = np.empty(self.n_terms)
        quadratic_terms(self._features(x), out)
        return out

    def score(self, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> float:
        """Phi(x) into `out` (float64, `n_terms`) and f = w . Phi, as `w.dot(expand(x))` gives
        it bit for bit (the same BLAS ddot), for one compiled call instead of two calls. `x`
        must be a float64 array already (the prediction's hot path: no conversion)."""
        return expand_and_score(x, w, out)

    def contributions(self, phi: np.ndarray, w: np.ndarray) -> np.ndarray:
        """w_i * phi_i for each term: the parts f = w . Phi is the sum of (up to rounding), in
        the model's output space. What an explanation of one prediction ranks."""
        return np.multiply(w, phi)

    def _features(self, x: np.ndarray) -> np.ndarray:
        """x as the kernels read it (float64). The kernel sizes its loops by x and refuses an
        `out` of another number of terms, so a wrong-length x cannot write out of bounds."""
        return np.asarray(x, dtype=np.float64)
