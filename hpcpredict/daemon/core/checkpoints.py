"""Checkpoint bytes: writing a learner's state, and reading one back only if it can be trusted.

A checkpoint is the learner's `state_dict()` as an uncompressed .npz (a zip of .npy arrays) with
the sequence number of the last event it includes. Reading one back is where damage shows: a
truncated blob, random bytes, a missing array, NaN weights, or a sequence number beyond the event
log (a checkpoint newer than the log it claims to summarise: the events it says it includes
would be skipped). `load_checkpoint` checks each and raises `CheckpointError` saying what it
found, in words (numpy's own "contains pickled data" for random bytes, or a bare EOFError that
click prints as "Aborted!", say nothing useful); the service then falls back to the previous
checkpoint or to a replay of the whole log (service.py, `_restore`).

A checkpoint made with other learner constants is not damage: `HyperparameterMismatchError`
passes through, and the daemon refuses to start rather than fall back past a configuration
change.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable

import numpy as np

from hpcpredict.daemon.core.store import StoredCheckpoint
from hpcpredict.learn.predictor import HyperparameterMismatchError, LearnedPredictor

_ZIP_MAGIC = b"PK\x03\x04"


class CheckpointError(ValueError):
    """A stored checkpoint that cannot be used; the message says what was found."""


def state_to_npz(state: dict[str, np.ndarray]) -> bytes:
    """A learner's `state_dict()` as .npz bytes (uncompressed: exact and fast)."""
    buffer = io.BytesIO()
    np.savez(buffer, **state)  # type: ignore[arg-type]
    return buffer.getvalue()


def state_from_npz(blob: bytes) -> dict[str, np.ndarray]:
    """The arrays of an .npz blob; `CheckpointError` for anything that is not a readable one."""
    if not blob:
        raise CheckpointError("it is empty (0 bytes)")
    if not blob.startswith(_ZIP_MAGIC):
        raise CheckpointError(
            f"it is not an .npz archive ({len(blob):,} bytes beginning {blob[:8].hex(' ')}, "
            f"where an .npz begins {_ZIP_MAGIC.hex(' ')})"
        )
    try:
        data = np.load(io.BytesIO(blob), allow_pickle=False)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise CheckpointError(f"its .npz archive is damaged ({_said(error)})") from None
    state: dict[str, np.ndarray] = {}
    with data:
        for name in data.files:
            try:
                state[name] = data[name]
            except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError) as error:
                raise CheckpointError(f"its array {name!r} is damaged ({_said(error)})") from None
    return state


def load_checkpoint(
    checkpoint: StoredCheckpoint,
    predictor_factory: Callable[[], LearnedPredictor],
    last_logged_seq: int,
) -> LearnedPredictor:
    """A learner restored from `checkpoint`, after checking everything it can be checked for.

    `last_logged_seq` is the sequence number of the newest event in the log.
    """
    if checkpoint.last_event_seq > last_logged_seq:
        raise CheckpointError(
            f"it includes events up to number {checkpoint.last_event_seq:,} but the event log ends "
            f"at {last_logged_seq:,} (a database restored from an older backup than its checkpoints?)"
        )
    state = state_from_npz(checkpoint.state_npz)
    for name, array in state.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            nan = int(np.isnan(array).sum())
            raise CheckpointError(
                f"its array {name!r} holds non-finite values ({nan:,} NaN, "
                f"{int(array.size - np.isfinite(array).sum()) - nan:,} infinite)"
            )
    predictor = predictor_factory()
    try:
        # Compares the learner constants first: arrays a learner with other options keeps (the
        # calibration's) are missing because the constants differ, which is a refusal; and
        # arrays added with a later option are read as its default when absent (older stores).
        predictor.load_state_dict(state)
    except HyperparameterMismatchError:
        raise
    except KeyError as error:
        raise CheckpointError(f"it is incomplete (no array {_missing_name(error, state, predictor)!r})") from None
    except (ValueError, TypeError, IndexError) as error:
        raise CheckpointError(f"its arrays are inconsistent ({_said(error)})") from None
    return predictor


def _missing_name(error: KeyError, state: dict[str, np.ndarray], predictor: LearnedPredictor) -> str:
    """The full name of the array a KeyError is about (the optimiser's and the features' own
    readers see their arrays without the "nag/" or "features/" prefix)."""
    key = str(error.args[0]) if error.args else "?"
    if "/" in key:
        return key
    absent = sorted(set(predictor.clone().state_dict()) - set(state))  # an untrained one's keys
    return next((name for name in absent if name.endswith("/" + key)), key)


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
