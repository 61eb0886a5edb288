"""NAG's step (`nag.Nag.step`) as two compiled loops over the coordinates, with numba.

Why compiled: the step is about fifteen elementwise operations on 231 floats; as numpy calls it
cost ~15 µs per learned job, about a third of a learned replay. These loops do the same
arithmetic in ~3 µs (docs/performance.md).

Why these loops give the numpy version's results bit for bit (tested against it,
tests/test_nag.py): every elementwise operation is the same IEEE operation in the same order
(numba does not contract or reorder floating point without ``fastmath``, which is off); the two
dot products are `np.dot`, which numba sends to the same BLAS ``ddot`` numpy calls; and the two
``y += a * x`` updates, which went through BLAS ``daxpy``, reproduce what OpenBLAS's x86-64
kernels compute: one fused multiply-add per coordinate in blocks of 16, and a multiply then an
add for the last n mod 16 coordinates (`axpy`). Where a BLAS rounds its ``daxpy`` otherwise, a
replay still matches the recorded one to the last bits of the weights only: results stay
deterministic for every machine, as checkpoints need.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# The blocks OpenBLAS's daxpy kernels fuse (x86-64: Haswell, Zen, SkylakeX).
AXPY_BLOCK = 16


@intrinsic
def _fma(typingctx, a, b, c):  # type: ignore[no-untyped-def]
    """a * b + c with one rounding (LLVM's llvm.fma: the hardware's instruction where there
    is one, a correctly rounded library call elsewhere)."""
    signature = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        double = ir.DoubleType()
        fma = builder.module.declare_intrinsic(
            "llvm.fma", [double], ir.FunctionType(double, [double, double, double])
        )
        return builder.call(fma, args)

    return signature, codegen


@njit(cache=True)
def axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:  # pragma: no cover - compiled
    """y += a * x, rounded as OpenBLAS's daxpy rounds it (module doc)."""
    n = x.shape[0]
    fused = n - n % AXPY_BLOCK
    for i in range(fused):
        y[i] = _fma(a, x[i], y[i])
    for i in range(fused, n):
        y[i] = y[i] + a * x[i]


@njit(cache=True)
def rescale_and_score(
    phi: np.ndarray, w: np.ndarray, s: np.ndarray, inv_s: np.ndarray, work: np.ndarray
) -> tuple[float, float]:  # pragma: no cover - compiled
    """Steps 1-2 of docs/method.md §5 and the prediction: returns (f = w . Phi, |Phi / s|^2).

    Coordinates seen larger than ever shrink w_i by s_i^2 / Phi_i^2 and grow s_i (and 1/s_i);
    `work` receives Phi / s (0 where s_i = 0).
    """
    for i in range(phi.shape[0]):
        size = abs(phi[i])
        if size > s[i]:
            w[i] = w[i] * (s[i] * s[i]) / (size * size)
            s[i] = size
            inv_s[i] = 1.0 / size
        work[i] = phi[i] * inv_s[i]
    return np.dot(w, phi), np.dot(work, work)


@njit(cache=True)
def descend(
    phi: np.ndarray,
    w: np.ndarray,
    g_sum: np.ndarray,
    inv_s: np.ndarray,
    grad: np.ndarray,
    l2: float,
    loss_gradient: float,
    rate: float,
    sqrt_g_floor: float,
) -> None:  # pragma: no cover - compiled
    """Steps 3-4: g = dL/df Phi + lambda w; G += g^2; w += rate * g / (s sqrt(G)), with
    rate = -eta sqrt(t / N); sqrt(G_i) floored where G_i = 0 (there g_i = 0 and the update is 0).
    """
    n = w.shape[0]
    for i in range(n):
        grad[i] = w[i] * l2
    axpy(loss_gradient, phi, grad)
    for i in range(n):
        g = grad[i]
        g_sum[i] += g * g
        root = math.sqrt(g_sum[i])
        if not (root >= sqrt_g_floor or root != root):  # np.maximum: NaN stays NaN
            root = sqrt_g_floor
        grad[i] = g / root * inv_s[i]
    axpy(rate, grad, w)


@njit(cache=True)
def quadratic_terms(
    x: np.ndarray, left: np.ndarray, right: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """out[k] = a[left[k]] * a[right[k]] with a = (1, x): the degree-2 expansion's products."""
    for k in range(out.shape[0]):
        i = left[k]
        j = right[k]
        a = 1.0 if i == 0 else x[i - 1]
        b = 1.0 if j == 0 else x[j - 1]
        out[k] = a * b
