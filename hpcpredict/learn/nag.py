"""NAG, Normalized Adaptive Gradient (Ross, Mineiro & Langford, "Normalized online learning",
UAI 2013), exactly the four steps of docs/method.md §5, vectorised over the coordinates.

Why NAG: the features are raw seconds, counts and their products (a requested time squared is
~1e10, a break time is unbounded), and NAG needs no feature normalisation: each coordinate keeps
s_i, the largest |Phi_i| seen, and steps in units of 1/s_i; G_i (AdaGrad's sum of squared
gradients) and the global N/t make the step size independent of the scale of the gradient.
Without the l2 term, multiplying one feature by any constant leaves every prediction unchanged
(tested in tests/test_nag.py).

The l2 scaling. docs/method.md §3 writes the penalty lambda * ||w||^2; like the reference (whose
constants are eta = 5000, lambda = 4e9, docs/method.md §10) we add ``lambda * w`` to the gradient,
i.e. the penalty is (lambda / 2) ||w||^2, on every coordinate including the bias. Note that a
plain lambda * w term is not scale-invariant: it weighs coordinates with large s_i (whose w_i are
small) less; NAG's invariance holds exactly only for lambda = 0.

Learned state (w, s, G, N, t) lives in one dataclass, `NagState`, with `to_state` /
`from_state` and an atomic `save` / `load`; hyperparameters (eta, lambda) live in the frozen
`NagConfig`. The hot path allocates nothing (two compiled loops, `nag_kernels`).

>>> nag = Nag(2, NagConfig(eta=1.0, l2=0.0))
>>> phi = np.array([1.0, 2.0])
>>> f = nag.step(phi, lambda f: 2.0 * (f - 4.0))  # squared loss towards 4
>>> f, nag.state.t, nag.state.n_sum
(0.0, 1, 2.0)
>>> np.round(nag.state.w, 12).tolist()  # -eta sqrt(t/N) g / (s |g|) = (1/sqrt 2) / s
[0.707106781187, 0.353553390593]
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcpredict.learn.defaults import ETA_REFERENCE, L2_REFERENCE
from hpcpredict.learn.losses import AsymmetricLoss, Branch, Weight
from hpcpredict.learn.nag_kernels import (
    CONSTANT_WEIGHT,
    ETA_AT,
    HALF_AT,
    INV_UNIT_AT,
    L2_AT,
    LARGE_AREA,
    LONG_NARROW,
    OVER_SQUARE_AT,
    SHORT_WIDE,
    SMALL_AREA,
    SQRT_G_FLOOR_AT,
    STEP_CONSTANTS,
    UNDER_SQUARE_AT,
    WEIGHT_AT,
    WEIGHT_FLOOR_AT,
    G_SUM_ROW,
    INV_S_ROW,
    S_ROW,
    TABLE_ROWS,
    W_ROW,
    descend,
    exceeds_scale,
    learn_step,
    learn_step_within_scale,
    rescale_and_score,
)


# Stand-in for sqrt(G_i) = 0. A G_i > 0 is at least the smallest subnormal (5e-324), whose root
# is 2.2e-162 > 1e-300, so the floor only ever replaces exact zeros, where g_i = 0 too: the update
# there is 0 / 1e-300 = 0, which is docs/method.md §5's "only for g_i != 0" without a mask.
_SQRT_G_FLOOR = 1e-300


@dataclass(frozen=True, slots=True)
class NagConfig:
    """Hyperparameters: learning rate eta and l2 strength lambda (module doc for its scaling)."""

    eta: float = ETA_REFERENCE
    l2: float = L2_REFERENCE

    def __post_init__(self) -> None:
        if not self.eta > 0.0:
            raise ValueError(f"eta must be > 0, got {self.eta!r}")
        if not self.l2 >= 0.0:
            raise ValueError(f"l2 must be >= 0, got {self.l2!r}")


@dataclass(slots=True)
class NagState:
    """Everything NAG learns: weights w, scales s, squared-gradient sums G, N and t (§5)."""

    w: np.ndarray
    s: np.ndarray
    g_sum: np.ndarray  # G_i of docs/method.md §5
    n_sum: float  # N of docs/method.md §5
    t: int

    @classmethod
    def zeros(cls, n_coords: int) -> NagState:
        """The start of §5: w = 0, s = 0, G = 0, N = 0, t = 0."""
        return cls(
            w=np.zeros(n_coords),
            s=np.zeros(n_coords),
            g_sum=np.zeros(n_coords),
            n_sum=0.0,
            t=0,
        )

    def to_state(self) -> dict[str, np.ndarray]:
        """Copies as numpy arrays (a checkpoint; `from_state` restores it bit for bit)."""
        return {
            "w": self.w.copy(),
            "s": self.s.copy(),
            "g_sum": self.g_sum.copy(),
            "n_sum": np.array(self.n_sum, dtype=np.float64),
            "t": np.array(self.t, dtype=np.int64),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> NagState:
        w = np.array(state["w"], dtype=np.float64)
        s = np.array(state["s"], dtype=np.float64)
        g_sum = np.array(state["g_sum"], dtype=np.float64)
        if not (w.ndim == 1 and w.shape == s.shape == g_sum.shape):
            raise ValueError(f"inconsistent NAG state shapes {w.shape}, {s.shape}, {g_sum.shape}")
        return cls(w=w, s=s, g_sum=g_sum, n_sum=float(state["n_sum"]), t=int(state["t"]))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write an .npz atomically: a temporary file in the same folder, then os.replace."""
        save_npz_atomic(path, self.to_state())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> NagState:
        with np.load(path, allow_pickle=False) as data:
            return cls.from_state(dict(data))


def save_npz_atomic(path: str | os.PathLike[str], arrays: dict[str, np.ndarray]) -> None:
    """np.savez to `path` so that a crash leaves either the old file or the new one, whole."""
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **arrays)  # type: ignore[arg-type]
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


class Nag:
    """The optimiser with its state; `step` is docs/method.md §5 for one example.

    The step runs as two compiled loops (`nag_kernels`: ~3 µs instead of ~15 µs for the numpy
    calls it replaced, with the same results bit for bit). Results are deterministic for a given
    machine, which is what checkpoint/restore needs (tested bit for bit).
    """

    def __init__(self, n_coords: int, config: NagConfig, state: NagState | None = None) -> None:
        self.config = config
        self.n_coords = n_coords
        self.state = NagState.zeros(n_coords) if state is None else state

    @property
    def state(self) -> NagState:
        return self._state

    @state.setter
    def state(self, state: NagState) -> None:
        """Adopt `state`: its values move into the step's table, and its w, s and g_sum become
        views of the table's rows (same values), so the object keeps showing what is learned."""
        if state.w.shape != (self.n_coords,):
            raise ValueError(f"state has {state.w.shape} weights, expected {self.n_coords}")
        # One 2-D table for the compiled step (`nag_kernels`: numba's dispatch costs per array
        # argument, and the step needs five vectors): w, s, G, 1/s and a scratch row.
        table = np.zeros((TABLE_ROWS, self.n_coords))
        table[W_ROW] = state.w
        table[S_ROW] = state.s
        table[G_SUM_ROW] = state.g_sum
        # 1/s_i (0 where s_i = 0), derived from s: recomputed identically after a restore.
        np.divide(1.0, state.s, out=table[INV_S_ROW], where=state.s > 0.0)
        state.w, state.s, state.g_sum = table[W_ROW], table[S_ROW], table[G_SUM_ROW]
        self._table = table
        self._state = state
        # w as a plain attribute: read at every prediction, where the property costs a call.
        self.weights = state.w

    def __getstate__(self) -> dict[str, object]:
        """Pickle and deepcopy keep no view: the state's arrays would come back as copies apart
        from the table, and the step would update one while predictions read the other. The
        copy adopts the state afresh instead (`state`'s setter rebuilds the table)."""
        return {"config": self.config, "n_coords": self.n_coords, "state": self._state}

    def __setstate__(self, saved: dict[str, object]) -> None:
        self.config = saved["config"]
        self.n_coords = saved["n_coords"]
        self.state = saved["state"]

    def predict(self, phi: np.ndarray) -> float:
        """f = w . Phi with the current weights."""
        return float(self._state.w.dot(phi))

    def step(self, phi: np.ndarray, loss_gradient: Callable[[float], float]) -> float:
        """One NAG update on Phi; `loss_gradient(f)` is dL/df of this example's loss.

        Returns f, the prediction the gradient was taken at (after step 1's rescaling, as in
        the paper's algorithm).
        """
        state = self._state
        # 1-2. rescale coordinates seen larger than ever; t and N (Phi / s is 0 where s_i = 0,
        # where Phi_i = 0 as well). The kernel returns Python floats.
        f, squared = rescale_and_score(phi, self._table)
        state.t += 1
        state.n_sum += squared
        # 3-4. g = dL/df * Phi + lambda * w (module doc for the scaling); G += g^2;
        # w -= eta sqrt(t/N) g / (s sqrt(G)), only where s_i > 0 and g_i != 0.
        gradient = float(loss_gradient(f))
        if state.n_sum == 0.0:  # Phi has been 0 everywhere so far: so are w and g
            return f
        rate = -self.config.eta * (state.t / state.n_sum) ** 0.5
        descend(phi, self._table, self.config.l2, gradient, rate, _SQRT_G_FLOOR)
        return f

    def beyond_scale(self, phi: np.ndarray, factor: float) -> bool:
        """True when some |Phi_i| exceeds `factor` times the largest |Phi_i| learned from (s_i)."""
        return bool(exceeds_scale(phi, self._table, factor))

    def step_on_loss(self, phi: np.ndarray, constants: np.ndarray, p: float, q: float) -> float:
        """`step(phi, lambda f: loss.gradient(f, p, q))` bit for bit, in one compiled call:
        `constants` is `step_constants(loss, config)` for this optimiser's config."""
        state = self._state
        state.t += 1
        f, state.n_sum = learn_step(phi, self._table, constants, state.t, state.n_sum, p, q)
        return f

    @property
    def table(self) -> np.ndarray:
        """The step's table (w, s, G, 1/s, scratch; `nag_kernels`), for a compiled call that
        runs `nag_kernels.learn_step_within_scale` among other work (the learner's end of a
        job), and then `count_step` when it stepped."""
        return self._table

    def count_step(self, n_sum: float) -> None:
        """After such a call took a step: t + 1 and the new N, as `step_on_loss_within_scale`."""
        state = self._state
        state.t += 1
        state.n_sum = n_sum

    def step_on_loss_within_scale(
        self, phi: np.ndarray, constants: np.ndarray, p: float, q: float, factor: float,
        after_steps: int,
    ) -> bool:
        """`step_on_loss(phi, constants, p, q)` unless, once `after_steps` steps are taken,
        `beyond_scale(phi, factor)`: then no change. True when the step was taken. One compiled
        call for both (`nag_kernels.learn_step_within_scale`): the learner's per-job path."""
        state = self._state
        stepped, _, n_sum = learn_step_within_scale(
            phi, self._table, constants, state.t, state.n_sum, p, q, state.t >= after_steps, factor
        )
        if stepped:
            self.count_step(n_sum)
        return stepped


_WEIGHT_CODES = {
    Weight.CONSTANT: CONSTANT_WEIGHT,
    Weight.SHORT_WIDE: SHORT_WIDE,
    Weight.LONG_NARROW: LONG_NARROW,
    Weight.SMALL_AREA: SMALL_AREA,
    Weight.LARGE_AREA: LARGE_AREA,
}


def step_constants(loss: AsymmetricLoss, config: NagConfig) -> np.ndarray:
    """What `Nag.step_on_loss` needs of the loss and the hyperparameters, as the one float64
    array `nag_kernels.learn_step` takes (one array to dispatch instead of nine numbers)."""
    constants = np.zeros(STEP_CONSTANTS)
    constants[ETA_AT] = config.eta
    constants[L2_AT] = config.l2
    constants[SQRT_G_FLOOR_AT] = _SQRT_G_FLOOR
    constants[HALF_AT] = 0.5
    constants[OVER_SQUARE_AT] = loss.over is Branch.SQUARE
    constants[UNDER_SQUARE_AT] = loss.under is Branch.SQUARE
    constants[WEIGHT_AT] = _WEIGHT_CODES[loss.weight]
    constants[WEIGHT_FLOOR_AT] = loss.weight_floor
    constants[INV_UNIT_AT] = 1.0 / loss.unit_s
    return constants
