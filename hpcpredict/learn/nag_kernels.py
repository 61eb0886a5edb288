"""NAG's step (`nag.Nag.step`) as two compiled loops over the coordinates, with numba.

Why compiled: the step is about fifteen elementwise operations on 231 floats; as numpy calls it
cost ~15 µs per learned job, about a third of a learned replay. These loops do the same
arithmetic in ~3 µs (docs/journal/performance-2026-11.md, "Replay speed on one core").

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

import ctypes
import math

import llvmlite.binding as llvm_binding
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from hpcpredict.compiled import compiled

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


@compiled
def axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:  # pragma: no cover - compiled
    """y += a * x, rounded as OpenBLAS's daxpy rounds it (module doc)."""
    n = x.shape[0]
    fused = n - n % AXPY_BLOCK
    for i in range(fused):
        y[i] = _fma(a, x[i], y[i])
    for i in range(fused, n):
        y[i] = y[i] + a * x[i]


# Rows of the table the step works on (`nag.Nag` owns it): numba's dispatch costs ~0.2 us per
# array argument, so the step's five vectors travel as one 2-D array
# (docs/journal/performance-2026-11.md, "Issue 13, item 5: the learner's glue and numba's
# dispatch").
W_ROW, S_ROW, G_SUM_ROW, INV_S_ROW, WORK_ROW = range(5)
TABLE_ROWS = 5


@compiled
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


@compiled
def exceeds_scale(phi: np.ndarray, table: np.ndarray, factor: float) -> bool:  # pragma: no cover - compiled
    """True when some |Phi_i| is more than `factor` times s_i, the largest seen so far (an
    outlier: `LearnedPredictor` does not learn from it). Stops at the first one."""
    s = table[S_ROW]
    for i in range(phi.shape[0]):
        if abs(phi[i]) > factor * s[i]:
            return True
    return False


@compiled
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


@compiled
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


@compiled
def expand_and_score(x: np.ndarray, w: np.ndarray, out: np.ndarray) -> float:  # pragma: no cover - compiled
    """Phi(x) into `out` and f = w . Phi, in one call: a prediction's two steps for one dispatch.
    The dot product is `np.dot`, the same BLAS ddot as numpy's (module doc)."""
    quadratic_terms(x, out)
    return np.dot(w, out)


# ---------------------------------------------------------------------------------------------
# The whole step for one of the asymmetric losses (`losses.AsymmetricLoss`), in one call.
#
# Why: `Nag.step` calls the two kernels above with the loss's gradient, a Python call, between
# them; per learned job that was two dispatches and ~1 us of Python
# (docs/journal/performance-2026-11.md, "Issue 13, item 5, round 3"). `learn_step` does steps
# 1-4 with the gradient in between.
#
# Why it is bit for bit `Nag.step(phi, lambda f: loss.gradient(f, p, q))`: the same kernels for
# steps 1-2 and 3-4; the gradient written as `AsymmetricLoss.gradient` writes it, operation for
# operation; and the two transcendental calls, the weight's logarithm and the rate's
# ``(t / N) ** 0.5``, call the very C functions CPython's `math.log` and float ``**`` call for a
# positive finite argument: the process's default ``log`` and ``pow`` (glibc's
# ``@GLIBC_2.29`` versions, which CPython links to), bound under names of our own. Not
# `math.log` / ``** 0.5``: LLVM turns its ``pow`` intrinsic with a constant exponent 0.5 into
# ``sqrt``, which need not round as ``pow`` does, and numba binds ``log`` and ``pow`` to glibc's
# older symbol versions (error-handling wrappers around the same code, but not the functions
# CPython calls). Under a name LLVM does not know as a library function, a call is left as it
# is written.


def _c_function(name: str, signature: types.Signature) -> types.ExternalFunction:
    """The process's C function `name` (as CPython resolves it), callable from compiled code."""
    symbol = f"hpcpredict_c_{name}"
    address = ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value
    llvm_binding.add_symbol(symbol, address)  # before any kernel is compiled or loaded
    return types.ExternalFunction(symbol, signature)


_libm_log = _c_function("log", types.float64(types.float64))
_libm_pow = _c_function("pow", types.float64(types.float64, types.float64))

# Entries of the constants array `learn_step` takes (`nag.step_constants` builds it).
(ETA_AT, L2_AT, SQRT_G_FLOOR_AT, HALF_AT, OVER_SQUARE_AT, UNDER_SQUARE_AT, WEIGHT_AT,
 WEIGHT_FLOOR_AT, INV_UNIT_AT) = range(9)
STEP_CONSTANTS = 9
# `WEIGHT_AT` codes, in the order of `losses.Weight`.
CONSTANT_WEIGHT, SHORT_WIDE, LONG_NARROW, SMALL_AREA, LARGE_AREA = range(5)


@compiled
def loss_gradient(f: float, p: float, q: float, constants: np.ndarray) -> float:  # pragma: no cover - compiled
    """`losses.AsymmetricLoss.gradient(f, p, q)` of the loss described in `constants`."""
    # The weight's p and q are clamped to at least 1; the branches read p as it is.
    p1 = p if p > 1.0 else 1.0
    q1 = q if q > 1.0 else 1.0
    weight = constants[WEIGHT_AT]
    if weight == CONSTANT_WEIGHT:
        gamma = 1.0
    elif weight == SHORT_WIDE:
        gamma = 5.0 + _libm_log(q1 / p1)
    elif weight == LONG_NARROW:
        gamma = 5.0 + _libm_log(p1 / q1)
    elif weight == SMALL_AREA:
        gamma = 11.0 - _libm_log(q1 * p1)
    else:
        gamma = _libm_log(q1 * p1)
    floor = constants[WEIGHT_FLOOR_AT]
    gamma = gamma if gamma > floor else floor
    if f >= p:
        return gamma * (2.0 * (f - p) * constants[INV_UNIT_AT] if constants[OVER_SQUARE_AT] != 0.0 else 1.0)
    return -gamma * (2.0 * (p - f) * constants[INV_UNIT_AT] if constants[UNDER_SQUARE_AT] != 0.0 else 1.0)


@compiled
def learn_step(
    phi: np.ndarray, table: np.ndarray, constants: np.ndarray, t: int, n_sum: float, p: float,
    q: float,
) -> tuple[float, float]:  # pragma: no cover - compiled
    """`nag.Nag.step` on the loss of (f, true runtime p, processors q) described in `constants`,
    with t already counted: returns (f, the new N). Same operations, same order (above)."""
    f, squared = rescale_and_score(phi, table)
    n_sum = n_sum + squared
    gradient = loss_gradient(f, p, q, constants)
    if n_sum == 0.0:  # Phi has been 0 everywhere so far: so are w and g
        return f, n_sum
    rate = -constants[ETA_AT] * _libm_pow(t / n_sum, constants[HALF_AT])
    descend(phi, table, constants[L2_AT], gradient, rate, constants[SQRT_G_FLOOR_AT])
    return f, n_sum


@compiled
def learn_step_within_scale(
    phi: np.ndarray, table: np.ndarray, constants: np.ndarray, t: int, n_sum: float, p: float,
    q: float, check_scale: bool, factor: float,
) -> tuple[bool, float, float]:  # pragma: no cover - compiled
    """`learn_step` with t + 1, unless `check_scale` and some |Phi_i| is more than `factor` times
    s_i (`exceeds_scale`): then nothing changes. Returns (stepped, f or 0, the new N). The
    learner's two calls per job (the outlier check, then the step) as one dispatch."""
    if check_scale and exceeds_scale(phi, table, factor):
        return False, 0.0, n_sum
    f, n_sum = learn_step(phi, table, constants, t + 1, n_sum, p, q)
    return True, f, n_sum
