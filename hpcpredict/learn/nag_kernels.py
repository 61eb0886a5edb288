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


# Rows of the table the step works on (`nag.Nag` owns it): numba's dispatch costs ~0.2 us per
# array argument, so the step's five vectors travel as one 2-D array (docs/performance.md).
W_ROW, S_ROW, G_SUM_ROW, INV_S_ROW, WORK_ROW = range(5)
TABLE_ROWS = 5


@njit(cache=True)
def rescale_and_score(phi: np.ndarray, table: np.ndarray) -> tuple[float, float]:  # pragma: no cover - compiled
    """Steps 1-2 of docs/method.md §5 and the prediction: returns (f = w . Phi, |Phi / s|^2).

    `table` holds w, s, G, 1/s and a scratch row (the *_ROW constants). Coordinates seen larger
    than ever shrink w_i by s_i^2 / Phi_i^2 and grow s_i (and 1/s_i); the scratch row receives
    Phi / s (0 where s_i = 0).
    """
    w = table[W_ROW]
    s = table[S_ROW]
    inv_s = table[INV_S_ROW]
    work = table[WORK_ROW]
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
    table: np.ndarray,
    l2: float,
    loss_gradient: float,
    rate: float,
    sqrt_g_floor: float,
) -> None:  # pragma: no cover - compiled
    """Steps 3-4: g = dL/df Phi + lambda w; G += g^2; w += rate * g / (s sqrt(G)), with
    rate = -eta sqrt(t / N); sqrt(G_i) floored where G_i = 0 (there g_i = 0 and the update is 0).
    `table` as for `rescale_and_score`; g goes through its scratch row.
    """
    w = table[W_ROW]
    g_sum = table[G_SUM_ROW]
    inv_s = table[INV_S_ROW]
    grad = table[WORK_ROW]
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
def quadratic_terms(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """out = Phi(x) in docs/method.md §3's order (`polynomial.quadratic_pairs`): 1, the x_i,
    the x_i^2, then x_k x_l for k < l.

    Each term is the product a * b of its pair of (1, x), written out: 1 * 1 = 1 and
    1 * x_i = x_i exactly in IEEE arithmetic, so these are those products bit for bit, without
    reading two index arrays (two fewer arguments to dispatch).
    """
    n = x.shape[0]
    if out.shape[0] != 1 + 2 * n + n * (n - 1) // 2:
        raise ValueError("out must hold 1 + 2n + n(n-1)/2 terms for n features")
    out[0] = 1.0
    for i in range(n):
        out[1 + i] = x[i]
        out[1 + n + i] = x[i] * x[i]
    k = 1 + 2 * n
    for i in range(n):
        for j in range(i + 1, n):
            out[k] = x[i] * x[j]
            k += 1


@njit(cache=True)
def expand_and_score(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> float:  # pragma: no cover - compiled
    """Phi(x) into `out` and f = w . Phi, in one call: a prediction's two steps for one dispatch.
    The dot product is `np.dot`, the same BLAS ddot as numpy's (module doc)."""
    quadratic_terms(x, out)
    return np.dot(w, out)
