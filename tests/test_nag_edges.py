"""NAG's outlier test (`Nag.beyond_scale`, `nag_kernels.exceeds_scale`) at its edges. Added for
the mutation run (docs/mutation.md): the learner's tests reach it only through whole replays."""

from __future__ import annotations

import numpy as np
import pytest

from hpcpredict.learn.losses import E_LOSS
from hpcpredict.learn.nag import Nag, NagConfig, NagState, step_constants
from hpcpredict.learn.nag_kernels import quadratic_terms


@pytest.mark.parametrize("phi, beyond", [
    ([2.0, 6.0, 0.0], False),  # exactly factor * s: not beyond
    ([2.5, 0.0, 0.0], True),  # the first coordinate
    ([-2.5, 0.0, 0.0], True),  # by its size, whatever its sign
    ([0.0, 6.5, 0.0], True),  # a later coordinate
    ([0.0, -6.5, 0.0], True),
    ([0.0, 0.0, 1e-300], True),  # never seen (s = 0): anything but 0 is beyond
    ([-2.0, -6.0, 0.0], False),
])
def test_a_coordinate_is_beyond_scale_when_it_exceeds_factor_times_its_largest(
    phi: list[float], beyond: bool
) -> None:
    state = NagState(w=np.zeros(3), s=np.array([1.0, 3.0, 0.0]), g_sum=np.zeros(3), n_sum=1.0, t=1)
    nag = Nag(3, NagConfig(), state)
    assert nag.beyond_scale(np.array(phi), 2.0) is beyond


def test_a_first_step_with_one_feature_moves_the_weights_as_the_step_does() -> None:
    """A first example with one non-zero coordinate has |Phi / s|^2 = 1 exactly: N = 1, a step
    like any other (only N = 0 skips the descent). The compiled loss step and `Nag.step` agree
    and both move w. Catches the skip test `N == 0` changed (`learn_step` 18)."""
    phi = np.array([3.0, 0.0])
    fused, plain = Nag(2, NagConfig()), Nag(2, NagConfig())
    fused.step_on_loss(phi, step_constants(E_LOSS, fused.config), 100.0, 4.0)
    plain.step(phi, lambda f: E_LOSS.gradient(f, 100.0, 4.0))
    assert fused.state.n_sum == plain.state.n_sum == 1.0
    assert fused.state.w[0] != 0.0
    np.testing.assert_array_equal(fused.state.w, plain.state.w)


def test_the_expansion_kernel_refuses_a_buffer_of_another_size_by_name() -> None:
    with pytest.raises(ValueError) as raised:
        quadratic_terms(np.ones(3), np.empty(9))  # 1 + 2 * 3 + 3 = 10 terms
    assert str(raised.value) == "out must hold 1 + 2n + n(n-1)/2 terms for n features"
