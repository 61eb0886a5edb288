"""NAG's outlier test (`Nag.beyond_scale`, `nag_kernels.exceeds_scale`) at its edges. Added for
the mutation run (docs/mutation.md): the learner's tests reach it only through whole replays."""

from __future__ import annotations

import numpy as np
import pytest

from hpcpredict.learn.nag import Nag, NagConfig, NagState


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
