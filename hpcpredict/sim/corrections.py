"""What to do when a running job reaches its predicted end and is still running (docs/method.md §8).

A correction policy is a pure function of the job's request, its initial prediction, how many
times it has been corrected and how long it has run: no hidden state, so the simulator and the
SLURM corrector (which must be restartable) compute the same limit from the same facts. Every
policy is capped at the user's request: a job is never killed before p~_j by a correction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: INCREMENTAL steps after the k-th correction (Tsafrir, Etsion & Feitelson, TPDS 2007; docs/method.md §8).
#: They replace each other (initial + step k), they do not accumulate.
INCREMENTAL_STEPS_S: tuple[int, ...] = (
    60, 5 * 60, 15 * 60, 30 * 60, 3600, 2 * 3600, 5 * 3600, 10 * 3600, 20 * 3600, 50 * 3600,
    100 * 3600,
)


class CorrectionPolicy(Protocol):
    name: str

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int
    ) -> int:
        """New prediction (seconds since start) for the `corrections_done + 1`-th correction."""
        ...


@dataclass(frozen=True)
class RequestedTimeCorrection:
    """REQUESTED TIME: give up predicting and trust the user's request."""

    name: str = "requested"

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int
    ) -> int:
        return requested_s


@dataclass(frozen=True)
class IncrementalCorrection:
    """INCREMENTAL: initial prediction + 1 min, then + 5 min, ... + 100 h, then the request."""

    name: str = "incremental"

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int
    ) -> int:
        if corrections_done >= len(INCREMENTAL_STEPS_S):
            return requested_s
        return min(initial_prediction_s + INCREMENTAL_STEPS_S[corrections_done], requested_s)


@dataclass(frozen=True)
class DoublingCorrection:
    """RECURSIVE DOUBLING: the job has run `elapsed_s`; predict twice that, capped at the request.

    The reference doubled without the cap (a bug, docs/method.md §10); we cap.
    """

    name: str = "doubling"

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int
    ) -> int:
        return min(max(2 * elapsed_s, elapsed_s + 1), requested_s)


CORRECTIONS: dict[str, CorrectionPolicy] = {
    policy.name: policy
    for policy in (RequestedTimeCorrection(), IncrementalCorrection(), DoublingCorrection())
}
