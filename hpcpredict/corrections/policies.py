"""What to do when a running job reaches its predicted end and is still running (docs/method.md §8).

A correction policy is a pure function of the job's request, its initial prediction, how many
times it has been corrected and how long it has run: no hidden state, so the simulator and the
SLURM corrector (which must be restartable) compute the same limit from the same facts. Every
policy is capped at the user's request: a job is never killed before p~_j by a correction.

The one exception is SURVIVAL (`hpcpredict.corrections.survival`), which reads the user's runtime
history: every policy therefore also hears jobs start and end (`job_started`, `job_ended`, the
predictor's two calls; the stateless ones ignore them), and is told whose job it corrects and
when (`user_id`, `now_s`). The simulator and the daemon's service make those calls; its state is
in the daemon's checkpoint, so the SLURM corrector stays restartable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from hpcpredict.corrections.limits import (
    DOUBLING,
    INCREMENTAL,
    INCREMENTAL_STEPS_S,
    TO_REQUEST,
    doubling_limit,
    incremental_limit,
)
from hpcpredict.jobs import JobRequest

if TYPE_CHECKING:  # (imported where used: the command line imports this module for its names)
    import numpy as np

    from hpcpredict.replay_state import CorrectionArrays, ReplayJobs

__all__ = ["CORRECTIONS", "INCREMENTAL_STEPS_S", "CorrectionPolicy", "DoublingCorrection",
           "IncrementalCorrection", "RequestWithinSlack", "RequestedTimeCorrection"]

class CorrectionPolicy(Protocol):
    name: str

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        """New prediction (seconds since start) for the `corrections_done + 1`-th correction."""
        ...

    def job_started(self, request: JobRequest, now_s: int) -> None:
        """A job began running (SURVIVAL counts it as censored while it runs)."""
        ...

    def job_ended(self, request: JobRequest, run_s: int, end_s: int, *, censored: bool = False) -> None:
        """A job ended after `run_s` seconds (SURVIVAL adds it to its user's runtimes; a
        `censored` one, killed at a lowered limit, as a lower bound)."""
        ...

    def to_state(self) -> dict[str, np.ndarray]:
        """What the daemon checkpoints of the policy (nothing for the pure ones)."""
        ...

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Replace the policy's state with `to_state()`'s (an empty dict: a fresh policy)."""
        ...


class _Stateless:
    """The pure policies hear starts and ends and ignore them (`ignores_jobs`: the simulator
    does not call them, two calls per job saved)."""

    ignores_jobs: ClassVar[bool] = True

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int, *, censored: bool = False) -> None:
        pass

    def to_state(self) -> dict[str, np.ndarray]:
        return {}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        pass

    # The compiled loops' interface (`replay_state`): nothing but the policy's code.
    compiled_kind: ClassVar[int]

    def why_python(self) -> str | None:
        return None

    def to_arrays(self, jobs: ReplayJobs) -> CorrectionArrays:
        from hpcpredict.replay_state import CorrectionArrays

        return CorrectionArrays.without_history(self.compiled_kind)

    def from_arrays(self, arrays: CorrectionArrays, jobs: ReplayJobs) -> None:
        pass


@dataclass(frozen=True)
class RequestedTimeCorrection(_Stateless):
    """REQUESTED TIME: give up predicting and trust the user's request."""

    name: str = "requested"
    compiled_kind: ClassVar[int] = TO_REQUEST

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        return requested_s


@dataclass(frozen=True)
class IncrementalCorrection(_Stateless):
    """INCREMENTAL: initial prediction + 1 min, then + 5 min, ... + 100 h, then the request."""

    name: str = "incremental"
    compiled_kind: ClassVar[int] = INCREMENTAL

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        return incremental_limit(requested_s, initial_prediction_s, corrections_done,
                                 INCREMENTAL_STEPS_S)


@dataclass(frozen=True)
class DoublingCorrection(_Stateless):
    """RECURSIVE DOUBLING: the job has run `elapsed_s`; predict twice that, capped at the request.

    The reference doubled without the cap (a bug, docs/method.md §10); we cap.
    """

    name: str = "doubling"
    compiled_kind: ClassVar[int] = DOUBLING

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        return doubling_limit(requested_s, elapsed_s)


class RequestWithinSlack:
    """A policy under the starvation guard's slack (docs/method.md §7): a job that reaches a
    limit within `slack_s` of its request gets its request; any other, `inner`'s answer.

    Why: a job started in front of an aged head on its slack estimate (its request less the
    slack) promised that head to end by then; once it outlives it, the head is planned to its
    request, which it cannot outlive, so it moves the head's start once, by at most the slack,
    instead of once per step of `inner`. The limit reached is the elapsed time the simulator
    asks at (a predicted end) and the live corrector too (`slurm.corrector`), so both drivers
    decide alike, and for every job, wherever it started: SLURM shows a limit, not why it is set.
    """

    __slots__ = ("inner", "slack_s", "name", "ignores_jobs")

    def __init__(self, inner: CorrectionPolicy, slack_s: int) -> None:
        self.inner = inner
        self.slack_s = slack_s
        self.name = inner.name
        self.ignores_jobs = getattr(inner, "ignores_jobs", False)

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        if elapsed_s >= requested_s - self.slack_s:
            return requested_s
        return self.inner.corrected_prediction_s(requested_s, initial_prediction_s, corrections_done,
                                                 elapsed_s, user_id=user_id, now_s=now_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        self.inner.job_started(request, now_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int, *, censored: bool = False) -> None:
        self.inner.job_ended(request, run_s, end_s, censored=censored)

    def to_state(self) -> dict[str, np.ndarray]:
        return self.inner.to_state()

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.inner.load_state(state)


CORRECTIONS: dict[str, CorrectionPolicy] = {
    policy.name: policy
    for policy in (RequestedTimeCorrection(), IncrementalCorrection(), DoublingCorrection())
}
