"""NAG (docs/method.md §5): a slow reference, scale invariance, convergence, exact checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg.blas import daxpy

from hpcpredict.learn.losses import E_LOSS, AsymmetricLoss, Branch, Weight
from hpcpredict.learn.nag import ETA_REFERENCE, L2_REFERENCE, Nag, NagConfig, NagState
from hpcpredict.learn.nag_kernels import axpy
from hpcpredict.learn.polynomial import QuadraticExpansion, n_quadratic_terms, quadratic_pairs

SQUARED = AsymmetricLoss(Branch.SQUARE, Branch.SQUARE, Weight.CONSTANT)


class SlowNag:
    """docs/method.md §5 written straight down, one coordinate at a time, in plain Python."""

    def __init__(self, n: int, eta: float, l2: float) -> None:
        self.eta, self.l2 = eta, l2
        self.w = [0.0] * n
        self.s = [0.0] * n
        self.G = [0.0] * n
        self.N = 0.0
        self.t = 0

    def step(self, phi: list[float], loss_gradient: Callable[[float], float]) -> float:
        n = len(phi)
        for i in range(n):  # 1.
            if abs(phi[i]) > self.s[i]:
                self.w[i] = self.w[i] * self.s[i] ** 2 / phi[i] ** 2
                self.s[i] = abs(phi[i])
        self.t += 1  # 2.
        self.N += sum(phi[i] ** 2 / self.s[i] ** 2 for i in range(n) if self.s[i] > 0)
        f = sum(self.w[i] * phi[i] for i in range(n))  # 3.
        d = loss_gradient(f)
        g = [d * phi[i] + self.l2 * self.w[i] for i in range(n)]
        for i in range(n):  # 4.
            if self.s[i] > 0 and g[i] != 0:
                self.G[i] += g[i] ** 2
                rate = self.eta * math.sqrt(self.t / self.N)
                self.w[i] -= rate * g[i] / (self.s[i] * math.sqrt(self.G[i]))
        return f


def _feature_stream(rng: np.random.Generator, n_jobs: int, n_features: int) -> np.ndarray:
    """Raw features of very different scales, some zero for a while (like running-job counts)."""
    scales = 10.0 ** rng.uniform(-3, 5, n_features)
    x = rng.uniform(0.0, 1.0, (n_jobs, n_features)) * scales
    x[: n_jobs // 3, 0] = 0.0  # a feature that only appears later: its s grows from 0
    x[rng.uniform(size=n_jobs) < 0.2, 1] = 0.0  # one often absent
    x[n_jobs // 2 :, 2] *= 50.0  # a scale that jumps: step 1 rescales w
    return x


@pytest.mark.parametrize("l2", [0.0, 1e-3])
def test_vectorised_nag_agrees_with_the_slow_reference(l2: float) -> None:
    rng = np.random.default_rng(7)
    expansion = QuadraticExpansion(4)
    fast = Nag(expansion.n_terms, NagConfig(eta=300.0, l2=l2))
    slow = SlowNag(expansion.n_terms, eta=300.0, l2=l2)
    x = _feature_stream(rng, 400, 4)
    runtimes_s = rng.uniform(1.0, 5000.0, len(x))
    procs = rng.integers(1, 512, len(x))
    fast_f, slow_f = [], []
    for xi, p, q in zip(x, runtimes_s, procs):
        phi = expansion.expand(xi)
        fast_f.append(fast.step(phi, lambda f: E_LOSS.gradient(f, p, q)))
        slow_f.append(slow.step(phi.tolist(), lambda f: E_LOSS.gradient(f, p, q)))
    assert fast.state.t == slow.t == 400
    np.testing.assert_allclose(fast_f, slow_f, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.state.w, slow.w, rtol=1e-9, atol=1e-300)
    np.testing.assert_array_equal(fast.state.s, slow.s)
    np.testing.assert_allclose(fast.state.g_sum, slow.G, rtol=1e-9)
    assert fast.state.n_sum == pytest.approx(slow.N, rel=1e-12)
    assert np.count_nonzero(fast.state.w) > 0.9 * expansion.n_terms  # the test exercised them


class NumpyNag:
    """The step as numpy and BLAS calls (hpcpredict's implementation before the compiled loops
    of `nag_kernels`); every recorded learned result was computed by it."""

    def __init__(self, n: int, eta: float, l2: float) -> None:
        self.eta, self.l2 = eta, l2
        self.state = NagState.zeros(n)
        self.inv_s = np.zeros(n)

    def step(self, phi: np.ndarray, loss_gradient: Callable[[float], float]) -> float:
        state, inv_s, n = self.state, self.inv_s, len(phi)
        w, s = state.w, state.s
        grows = np.abs(phi) > s
        if np.count_nonzero(grows):
            idx = np.flatnonzero(grows)
            new_s = np.abs(phi)[idx]
            w[idx] = w[idx] * s[idx] ** 2 / new_s**2
            s[idx] = new_s
            inv_s[idx] = 1.0 / new_s
        state.t += 1
        scaled = phi * inv_s
        state.n_sum += float(scaled.dot(scaled))
        f = float(w.dot(phi))
        grad = w * np.array(self.l2)
        daxpy(phi, grad, n, loss_gradient(f))
        if state.n_sum == 0.0:
            return f
        state.g_sum += grad * grad
        root = np.maximum(np.sqrt(state.g_sum), 1e-300)
        root = grad / root
        root *= inv_s
        daxpy(root, w, n, -self.eta * (state.t / state.n_sum) ** 0.5)
        return f


def _blas_axpy_rounds_like_the_kernel() -> bool:
    """Does this machine's BLAS daxpy round as `nag_kernels.axpy` does (module doc there)?"""
    rng = np.random.default_rng(0)
    for n in (7, 16, 231):
        x, y = rng.standard_normal(n) * 1e3, rng.standard_normal(n)
        expected = daxpy(x, y.copy(), n, 0.3)
        axpy(0.3, x, y)
        if not np.array_equal(expected, y):
            return False
    return True


@pytest.mark.parametrize("l2", [0.0, L2_REFERENCE])
def test_the_compiled_step_computes_what_the_numpy_step_computed(l2: float) -> None:
    """Bit for bit where the BLAS rounds daxpy like OpenBLAS's x86-64 kernels (then every
    recorded learned figure is reproduced exactly), to rounding elsewhere."""
    rng = np.random.default_rng(11)
    expansion = QuadraticExpansion(20)
    compiled = Nag(expansion.n_terms, NagConfig(eta=ETA_REFERENCE, l2=l2))
    numpy_nag = NumpyNag(expansion.n_terms, eta=ETA_REFERENCE, l2=l2)
    x = _feature_stream(rng, 600, 20)
    runtimes_s = rng.uniform(1.0, 50_000.0, len(x))
    procs = rng.integers(1, 512, len(x))
    compiled_f, numpy_f = [], []
    for xi, p, q in zip(x, runtimes_s, procs):
        phi = expansion.expand(xi)
        compiled_f.append(compiled.step(phi, lambda f: E_LOSS.gradient(f, p, q)))
        numpy_f.append(numpy_nag.step(phi, lambda f: E_LOSS.gradient(f, p, q)))
    if _blas_axpy_rounds_like_the_kernel():
        assert compiled_f == numpy_f
        for name in ("w", "s", "g_sum"):
            np.testing.assert_array_equal(getattr(compiled.state, name),
                                          getattr(numpy_nag.state, name))
        assert compiled.state.n_sum == numpy_nag.state.n_sum
    else:
        np.testing.assert_allclose(compiled_f, numpy_f, rtol=1e-9)
        np.testing.assert_allclose(compiled.state.w, numpy_nag.state.w, rtol=1e-9, atol=1e-300)
    assert np.count_nonzero(compiled.state.w) > 0.9 * expansion.n_terms


def test_the_compiled_expansion_equals_the_products_of_one_and_x() -> None:
    rng = np.random.default_rng(3)
    expansion = QuadraticExpansion(20)
    left, right = quadratic_pairs(20)
    for _ in range(50):
        x = rng.standard_normal(20) * 10.0 ** rng.uniform(-3, 8, 20)
        augmented = np.concatenate(([1.0], x))
        np.testing.assert_array_equal(expansion.expand(x), augmented[left] * augmented[right])


def test_first_steps_by_hand() -> None:
    nag = Nag(2, NagConfig(eta=1.0, l2=0.0))
    f = nag.step(np.array([1.0, 2.0]), lambda f: 2.0 * (f - 4.0))
    # s = (1, 2), N = 2, g = -8 * (1, 2), G = g^2: w = sqrt(1/2) * (1/1, 1/2).
    assert f == 0.0
    np.testing.assert_allclose(nag.state.w, [math.sqrt(0.5), math.sqrt(0.5) / 2], rtol=1e-15)
    w_before = nag.state.w.copy()
    # A second coordinate twice as large as ever: w_2 shrinks by (2/4)^2 before f is taken;
    # a zero loss gradient leaves the rescaling as the only change.
    f = nag.step(np.array([1.0, 4.0]), lambda f: 0.0)
    np.testing.assert_array_equal(nag.state.s, [1.0, 4.0])
    assert nag.state.w[0] == w_before[0]
    assert nag.state.w[1] == pytest.approx(w_before[1] / 4.0, rel=1e-15)
    assert f == pytest.approx(w_before[0] + 4.0 * w_before[1] / 4.0, rel=1e-15)
    assert nag.state.t == 2 and nag.state.n_sum == pytest.approx(2.0 + 2.0)


def test_l2_term_is_lambda_times_w() -> None:
    """The documented scaling: g = dL/df * Phi + lambda * w (penalty (lambda/2)||w||^2)."""
    nag = Nag(1, NagConfig(eta=1.0, l2=0.5))
    nag.state = NagState(
        w=np.array([2.0]), s=np.array([1.0]), g_sum=np.array([0.0]), n_sum=0.0, t=0
    )
    nag.step(np.array([1.0]), lambda f: 0.0)  # only the penalty: g = 0.5 * 2 = 1
    assert nag.state.g_sum[0] == 1.0
    assert nag.state.w[0] == pytest.approx(2.0 - 1.0 * math.sqrt(1 / 1) * 1.0 / (1.0 * 1.0))


def _predictions(raw_x: np.ndarray, targets: np.ndarray, eta: float) -> np.ndarray:
    expansion = QuadraticExpansion(raw_x.shape[1])
    nag = Nag(expansion.n_terms, NagConfig(eta=eta, l2=0.0))
    return np.array(
        [
            nag.step(expansion.expand(x), lambda f: SQUARED.gradient(f, y, 1.0))
            for x, y in zip(raw_x, targets)
        ]
    )


@pytest.mark.parametrize("feature", [0, 1, 2])
def test_rescaling_one_raw_feature_leaves_predictions_unchanged(feature: int) -> None:
    """NAG's point (docs/method.md §5): no normalisation needed, whatever a feature's unit."""
    rng = np.random.default_rng(feature)
    raw_x = _feature_stream(rng, 500, 3)
    targets = 100.0 + raw_x @ np.array([0.5, 2e-3, 30.0]) + rng.normal(0.0, 5.0, len(raw_x))
    scaled_x = raw_x.copy()
    scaled_x[:, feature] *= 1000.0
    reference = _predictions(raw_x, targets, eta=50.0)
    scaled = _predictions(scaled_x, targets, eta=50.0)
    assert np.std(reference[100:]) > 1.0  # the predictions actually moved
    np.testing.assert_allclose(scaled, reference, rtol=1e-7, atol=1e-7 * np.abs(reference).max())


def test_converges_to_a_linear_rule_under_squared_loss() -> None:
    rng = np.random.default_rng(3)
    n_jobs = 6000
    scales = np.array([1.0, 1e4, 10.0, 1e-3, 100.0])  # the first is the bias
    phi = rng.uniform(-1.0, 1.0, (n_jobs, 5)) * scales
    phi[:, 0] = 1.0
    w_true = np.array([3.0, 2e-4, -0.5, 500.0, 0.02])
    targets = phi @ w_true
    nag = Nag(5, NagConfig(eta=3.0, l2=0.0))
    errors = np.array(
        [abs(nag.step(p, lambda f: SQUARED.gradient(f, y, 1.0)) - y) for p, y in zip(phi, targets)]
    )
    spread = float(np.std(targets))  # about 3.3
    assert errors[:100].mean() > 0.1 * spread
    assert errors[-1000:].mean() < 1e-4 * spread
    np.testing.assert_allclose(nag.state.w, w_true, rtol=1e-3)


def _train(nag: Nag, rng: np.random.Generator, n_jobs: int) -> list[float]:
    expansion = QuadraticExpansion(3)
    out = []
    for x in _feature_stream(rng, n_jobs, 3):
        p, q = float(rng.uniform(1, 1e4)), int(rng.integers(1, 64))
        out.append(nag.step(expansion.expand(x), lambda f: E_LOSS.gradient(f, p, q)))
    return out


def test_state_round_trips_exactly_through_a_file(tmp_path: Path) -> None:
    nag = Nag(n_quadratic_terms(3), NagConfig())
    _train(nag, np.random.default_rng(1), 200)
    path = tmp_path / "nag.npz"
    nag.state.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nag.npz"]  # no temporary left over
    restored = Nag(n_quadratic_terms(3), NagConfig(), NagState.load(path))
    for key, value in nag.state.to_state().items():
        np.testing.assert_array_equal(restored.state.to_state()[key], value)
    # Continued learning is bit-for-bit identical.
    assert _train(nag, np.random.default_rng(2), 200) == _train(
        restored, np.random.default_rng(2), 200
    )
    np.testing.assert_array_equal(nag.state.w, restored.state.w)


def test_to_state_is_a_copy() -> None:
    nag = Nag(n_quadratic_terms(3), NagConfig())
    _train(nag, np.random.default_rng(1), 10)
    snapshot = nag.state.to_state()
    w_before = snapshot["w"].copy()
    _train(nag, np.random.default_rng(2), 10)
    np.testing.assert_array_equal(snapshot["w"], w_before)
    assert int(snapshot["t"]) == 10 and nag.state.t == 20


def test_reference_constants_and_validation() -> None:
    assert (NagConfig().eta, NagConfig().l2) == (ETA_REFERENCE, L2_REFERENCE) == (5000.0, 4e9)
    with pytest.raises(ValueError, match="eta"):
        NagConfig(eta=0.0)
    with pytest.raises(ValueError, match="l2"):
        NagConfig(l2=-1.0)
    with pytest.raises(ValueError, match="expected 5"):
        Nag(5, NagConfig(), NagState.zeros(4))


def test_all_zero_features_change_nothing_but_t() -> None:
    nag = Nag(3, NagConfig())
    assert nag.step(np.zeros(3), lambda f: 1.0) == 0.0
    np.testing.assert_array_equal(nag.state.w, np.zeros(3))
    assert nag.state.t == 1 and nag.state.n_sum == 0.0


@settings(max_examples=300, deadline=None)
@given(
    n_features=st.integers(1, 24),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_fused_expansion_and_score_equal_expand_then_numpy_dot(n_features: int, seed: int) -> None:
    """`QuadraticExpansion.score` (one compiled call) gives Phi and w . Phi bit for bit as
    `expand` and numpy's dot do, and Phi as the products of `quadratic_pairs` (issue 13, item 5:
    the prediction must not move by one ulp)."""
    rng = np.random.default_rng(seed)
    expansion = QuadraticExpansion(n_features)
    x = rng.standard_normal(n_features) * 10.0 ** rng.uniform(-3, 8, n_features)
    x[rng.uniform(size=n_features) < 0.2] = 0.0
    w = rng.standard_normal(expansion.n_terms) * 10.0 ** rng.uniform(-12, 2, expansion.n_terms)
    phi = np.empty(expansion.n_terms)
    f = expansion.score(x, w, phi)
    left, right = quadratic_pairs(n_features)
    augmented = np.concatenate(([1.0], x))
    np.testing.assert_array_equal(phi, augmented[left] * augmented[right])
    np.testing.assert_array_equal(phi, expansion.expand(x))
    assert f == float(w.dot(phi))


def test_the_expansion_refuses_a_buffer_of_another_size() -> None:
    expansion = QuadraticExpansion(3)
    with pytest.raises(ValueError, match="terms"):
        expansion.expand(np.ones(4), np.empty(expansion.n_terms))
    with pytest.raises(ValueError, match="terms"):
        expansion.score(np.ones(2), np.ones(expansion.n_terms), np.empty(expansion.n_terms))


def test_the_state_adopted_by_nag_shows_what_it_learns() -> None:
    """Nag packs w, s and G into its step's table and points the state's arrays at the rows:
    the state object given keeps showing the learned values, and a restore starts afresh."""
    nag = Nag(2, NagConfig(eta=1.0, l2=0.0))
    state = NagState(w=np.array([0.5, 0.0]), s=np.array([1.0, 0.0]), g_sum=np.zeros(2),
                     n_sum=1.0, t=1)
    nag.state = state
    nag.step(np.array([1.0, 2.0]), lambda f: 2.0 * (f - 4.0))
    assert nag.state is state
    assert state.s.tolist() == [1.0, 2.0] and state.g_sum[0] > 0.0 and state.w[1] != 0.0
    saved = NagState.from_state(state.to_state())
    nag.step(np.array([3.0, 1.0]), lambda f: 1.0)
    nag.state = saved
    np.testing.assert_array_equal(nag.state.s, [1.0, 2.0])
    assert nag.predict(np.array([1.0, 2.0])) == float(saved.w.dot([1.0, 2.0]))


@pytest.mark.parametrize("duplicate", [lambda nag: pickle.loads(pickle.dumps(nag)), copy.deepcopy])
def test_a_pickled_or_deep_copied_nag_learns_on_as_the_original(duplicate) -> None:
    """The state's arrays are views of the step's table; a copy must not split them (the step
    would update the table while predictions read stale weights)."""
    rng = np.random.default_rng(5)
    expansion = QuadraticExpansion(3)
    nag = Nag(expansion.n_terms, NagConfig(eta=1.0, l2=0.0))
    stream = [(expansion.expand(rng.uniform(0.0, 5.0, 3)), rng.uniform(1.0, 9.0)) for _ in range(20)]
    for phi, target in stream[:10]:
        nag.step(phi, lambda f: 2.0 * (f - target))
    twin = duplicate(nag)
    for phi, target in stream[10:]:
        for model in (nag, twin):
            model.step(phi, lambda f: 2.0 * (f - target))
        assert twin.predict(phi) == nag.predict(phi)
    np.testing.assert_array_equal(twin.state.w, nag.state.w)
    assert twin.state.w.base is not nag.state.w.base


@settings(max_examples=200, deadline=None)
@given(
    loss_index=st.integers(0, 19),
    unit_s=st.sampled_from([1.0, 1800.0, 3600.0]),
    l2=st.sampled_from([0.0, 1e-3, L2_REFERENCE]),
    eta=st.sampled_from([1.0, ETA_REFERENCE]),
    n_features=st.integers(3, 20),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_one_call_step_equals_the_step_with_the_python_gradient(
    loss_index: int, unit_s: float, l2: float, eta: float, n_features: int, seed: int
) -> None:
    """`Nag.step_on_loss` (the loss gradient and the rate computed inside one compiled call,
    docs/performance.md "Issue 13, item 5, round 3") against `Nag.step` with
    `AsymmetricLoss.gradient` in Python: f, w, s, G, N and t bit for bit, for every loss, both
    branches, runtimes and processor counts below 1 (the clamp) and weights under the floor."""
    from hpcpredict.learn.losses import all_losses
    from hpcpredict.learn.nag import step_constants

    loss = dataclasses.replace(all_losses()[loss_index], unit_s=unit_s)
    rng = np.random.default_rng(seed)
    expansion = QuadraticExpansion(n_features)
    config = NagConfig(eta=eta, l2=l2)
    fused, stepped = Nag(expansion.n_terms, config), Nag(expansion.n_terms, config)
    constants = step_constants(loss, config)
    x = _feature_stream(rng, 60, n_features)
    runtimes_s = np.concatenate(([0.5, 1.0], 10.0 ** rng.uniform(0, 6, len(x) - 2)))
    procs = np.concatenate(([0.0, 3.0], rng.integers(1, 80_000, len(x) - 2).astype(float)))
    for xi, p, q in zip(x, runtimes_s, procs):
        phi = expansion.expand(xi)
        p, q = float(p), float(q)
        f_fused = fused.step_on_loss(phi, constants, p, q)
        f_stepped = stepped.step(phi, lambda f: loss.gradient(f, p, q))
        assert f_fused == f_stepped or (f_fused != f_fused and f_stepped != f_stepped)
    for name in ("w", "s", "g_sum"):
        np.testing.assert_array_equal(getattr(fused.state, name), getattr(stepped.state, name))
    assert fused.state.n_sum == stepped.state.n_sum and fused.state.t == stepped.state.t


@settings(max_examples=100, deadline=None)
@given(
    loss_index=st.integers(0, 19),
    factor=st.sampled_from([1.0, 1.5, 4.0, 1000.0]),
    after_steps=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_step_within_scale_is_the_outlier_check_then_the_step(
    loss_index: int, factor: float, after_steps: int, seed: int
) -> None:
    """`Nag.step_on_loss_within_scale` (one compiled call, the learner's per-job path) against
    what it replaced: `beyond_scale` once `after_steps` steps are taken, then `step_on_loss`
    when not an outlier. Same decision at every job and the state bit for bit; the small factors
    and jumping feature scales make both outcomes common."""
    from hpcpredict.learn.losses import all_losses
    from hpcpredict.learn.nag import step_constants

    loss = dataclasses.replace(all_losses()[loss_index], unit_s=3600.0)
    rng = np.random.default_rng(seed)
    expansion = QuadraticExpansion(6)
    config = NagConfig()
    fused, separate = Nag(expansion.n_terms, config), Nag(expansion.n_terms, config)
    constants = step_constants(loss, config)
    outcomes = []
    for xi in _feature_stream(rng, 60, 6) * rng.choice([1.0, 3.0, 100.0], size=(60, 1)):
        phi = expansion.expand(xi)
        p, q = float(10.0 ** rng.uniform(0, 6)), float(rng.integers(1, 1000))
        expected = not (separate.state.t >= after_steps and separate.beyond_scale(phi, factor))
        if expected:
            separate.step_on_loss(phi, constants, p, q)
        assert fused.step_on_loss_within_scale(phi, constants, p, q, factor, after_steps) == expected
        outcomes.append(expected)
    for name in ("w", "s", "g_sum"):
        np.testing.assert_array_equal(getattr(fused.state, name), getattr(separate.state, name))
    assert fused.state.n_sum == separate.state.n_sum and fused.state.t == separate.state.t
    assert any(outcomes)


@settings(max_examples=500, deadline=None)
@given(
    loss_index=st.integers(0, 19),
    unit_s=st.sampled_from([1.0, 3600.0]),
    f=st.floats(-1e12, 1e12),
    p=st.floats(0.0, 1e9),
    q=st.floats(0.0, 1e6),
)
def test_the_compiled_loss_gradient_is_the_python_one(loss_index, unit_s, f, p, q) -> None:
    """`nag_kernels.loss_gradient` against `AsymmetricLoss.gradient`, bit for bit (its logs are
    the C library's `log`, the one `math.log` calls)."""
    from hpcpredict.learn.losses import all_losses
    from hpcpredict.learn.nag import step_constants
    from hpcpredict.learn.nag_kernels import loss_gradient

    loss = dataclasses.replace(all_losses()[loss_index], unit_s=unit_s)
    constants = step_constants(loss, NagConfig())
    assert loss_gradient(f, p, q, constants) == loss.gradient(f, p, q)


def test_the_rate_calls_the_pow_python_calls() -> None:
    """The one-call step's rate is `(t / N) ** 0.5` as Python computes it (C `pow`), not a
    square root: over many t / N the two differ somewhere unless pow rounds as sqrt does, so
    compare with Python's own power directly."""
    from hpcpredict.learn.nag_kernels import _libm_pow
    from numba import njit

    power = njit(lambda base, exponent: _libm_pow(base, exponent))
    rng = np.random.default_rng(5)
    for base in np.concatenate((10.0 ** rng.uniform(-12, 12, 2000), [0.0, 1.0, 2.0])):
        assert power(float(base), 0.5) == float(base) ** 0.5
