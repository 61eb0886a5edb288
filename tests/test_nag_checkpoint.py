"""The NAG state's checkpoint format (`NagState.to_state` / `from_state` / `save` / `load`,
`save_npz_atomic`): what a restore accepts and refuses, and that a write is atomic.

Added for the mutation run (docs/mutation.md): the bit-for-bit round trip of tests/test_nag.py
passes with a restore that keeps integer arrays as integers, accepts a 2-D state, loads pickled
arrays, or leaves a failed write's temporary file behind; these tests do not.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from hpcpredict.learn.nag import NagState, save_npz_atomic


def _state(**changes: object) -> dict[str, object]:
    state: dict[str, object] = {
        "w": np.array([0.5, -1.0]), "s": np.array([2.0, 3.0]), "g_sum": np.array([1.0, 4.0]),
        "n_sum": np.array(7.5), "t": np.array(3, dtype=np.int64),
    }
    state.update(changes)
    return state


def test_a_restore_holds_float64_vectors_and_python_numbers_whatever_it_was_given() -> None:
    """A checkpoint written by hand or by an older writer may hold integers: the state is
    float64 all the same (the step's table is float64), N a float and t an int."""
    restored = NagState.from_state(_state(w=np.array([1, 2]), s=np.array([3, 4]),
                                          g_sum=np.array([5, 6]), n_sum=np.array(8), t=np.array(3.0)))
    for vector in (restored.w, restored.s, restored.g_sum):
        assert vector.dtype == np.float64
    assert restored.w.tolist() == [1.0, 2.0] and restored.s.tolist() == [3.0, 4.0]
    assert restored.g_sum.tolist() == [5.0, 6.0]
    assert type(restored.n_sum) is float and restored.n_sum == 8.0
    assert type(restored.t) is int and restored.t == 3


def test_to_state_is_float64_vectors_a_float64_n_and_an_int64_t() -> None:
    saved = NagState.from_state(_state()).to_state()
    assert sorted(saved) == ["g_sum", "n_sum", "s", "t", "w"]
    assert saved["n_sum"].dtype == np.float64 and saved["n_sum"].shape == ()
    assert saved["t"].dtype == np.int64 and int(saved["t"]) == 3
    assert float(saved["n_sum"]) == 7.5 and saved["w"].tolist() == [0.5, -1.0]


@pytest.mark.parametrize("changes", [
    {"w": np.zeros((2, 2)), "s": np.zeros((2, 2)), "g_sum": np.zeros((2, 2))},  # not vectors
    {"w": np.zeros(3)},  # one vector longer
    {"s": np.zeros(1)},
    {"g_sum": np.zeros(3)},
])
def test_a_restore_refuses_inconsistent_shapes(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"^inconsistent NAG state shapes \("):
        NagState.from_state(_state(**changes))


def test_load_refuses_pickled_arrays(tmp_path: Path) -> None:
    """A checkpoint is data: an object array (which numpy would unpickle, running code) is
    refused, not loaded."""
    path = tmp_path / "nag.npz"
    np.savez(path, **{**_state(), "w": np.array([0.5, -1.0], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle"):
        NagState.load(path)


def test_a_state_saved_and_loaded_is_the_same_state(tmp_path: Path) -> None:
    path = tmp_path / "nag.npz"
    NagState.from_state(_state()).save(path)
    loaded = NagState.load(path)
    assert loaded.w.tolist() == [0.5, -1.0] and loaded.s.tolist() == [2.0, 3.0]
    assert loaded.g_sum.tolist() == [1.0, 4.0] and (loaded.n_sum, loaded.t) == (7.5, 3)


def test_the_write_goes_through_a_hidden_temporary_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.replace is atomic only within one file system: the temporary is in the target's
    folder, hidden and named after it (``.nag.npz.XXXX.tmp``), and gone once replaced."""
    seen: list[list[str]] = []
    real_fsync = os.fsync

    def fsync_and_look(fd: int) -> None:
        seen.append(sorted(path.name for path in tmp_path.iterdir()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_and_look)
    target = tmp_path / "nag.npz"
    save_npz_atomic(target, {"a": np.arange(3)})
    assert len(seen) == 1 and len(seen[0]) == 1
    name = seen[0][0]
    assert name.startswith(".nag.npz.") and name.endswith(".tmp")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["nag.npz"]
    with np.load(target) as data:
        assert data["a"].tolist() == [0, 1, 2]


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "nag.npz"
    save_npz_atomic(target, {"a": np.arange(3)})
    before = target.read_bytes()

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space left"):
        save_npz_atomic(target, {"a": np.arange(1000)})
    assert sorted(path.name for path in tmp_path.iterdir()) == ["nag.npz"]
    assert target.read_bytes() == before
