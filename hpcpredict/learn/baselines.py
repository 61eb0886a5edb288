"""The predictor protocol and the baseline predictors of docs/method.md §6.

A predictor sees the same three events in the simulator and in the daemon: a job is submitted
(`predict`), a job starts (`job_started`), a job ends and its true runtime is known
(`job_ended`, the moment to learn). It keeps whatever per-user state it needs from those events;
the driver never reaches into it. Predictions are whole seconds in [1, requested time]: the
simulator and the SLURM plugin rely on never exceeding the user's request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from hpcpredict.jobs import JobRequest
from hpcpredict.learn.rules import AVE2, CLAIRVOYANT, REQUESTED, ave2_seconds, clip_prediction

if TYPE_CHECKING:  # (imported where used: the command line imports this module for its names)
    from hpcpredict.replay_state import PredictorArrays, ReplayJobs

__all__ = ["Ave2Predictor", "ClairvoyantPredictor", "Predictor", "RequestedPredictor", "clip_prediction"]


@runtime_checkable
class Predictor(Protocol):
    """What the simulator and the daemon need from any runtime predictor."""

    name: str

    def predict(self, request: JobRequest, now_s: int) -> int:
        """Predicted runtime in whole seconds, in [1, request.requested_s]."""
        ...

    def job_started(self, request: JobRequest, now_s: int) -> None:
        """A job began running (features about the user's running jobs need this)."""
        ...

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        """A job finished after `run_s` seconds: the only moment its runtime may be learned."""
        ...


class _Memoryless:
    """A predictor that learns nothing from the jobs it sees: it ignores their starts and ends,
    and a compiled loop hands it nothing back (`replay_state`); always modelled there."""

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass

    def why_python(self) -> str | None:
        return None

    def from_arrays(self, arrays: PredictorArrays, jobs: ReplayJobs) -> None:
        pass


class RequestedPredictor(_Memoryless):
    """REQUESTED: the user's own estimate, what plain EASY plans with."""

    name = "requested"
    compiled_kind: ClassVar[int] = REQUESTED

    def predict(self, request: JobRequest, now_s: int) -> int:
        return request.requested_s

    def to_arrays(self, jobs: ReplayJobs) -> PredictorArrays:
        from hpcpredict.replay_state import PredictorArrays

        return PredictorArrays(self.compiled_kind, jobs.user_row)


class ClairvoyantPredictor(_Memoryless):
    """CLAIRVOYANT: the true runtime, read from the log. An upper bound, not a real predictor.

    It is handed the oracle explicitly (job id -> runtime) so that no other predictor can see
    runtimes at submission by accident.
    """

    name = "clairvoyant"
    compiled_kind: ClassVar[int] = CLAIRVOYANT

    def __init__(self, runtimes_s: Mapping[int, int]) -> None:
        self._runtimes_s = runtimes_s

    def predict(self, request: JobRequest, now_s: int) -> int:
        return clip_prediction(self._runtimes_s[request.job_id], request.requested_s)

    def to_arrays(self, jobs: ReplayJobs) -> PredictorArrays:
        import numpy as np

        from hpcpredict.replay_state import PredictorArrays

        runtimes = self._runtimes_s
        return PredictorArrays(self.compiled_kind, jobs.user_row, oracle_s=np.fromiter(
            (runtimes[job_id] for job_id in jobs.job_ids.tolist()), dtype=np.int64,
            count=len(jobs.job_ids)))


class Ave2Predictor:
    """AVE2 (Tsafrir, Etsion & Feitelson, IEEE TPDS 2007): mean of the user's last two runtimes.

    "Last" means most recently *completed*. The mean is rounded down to whole seconds as in the
    reference; until a user has two completed jobs the request is used; never above the request.
    """

    name = "ave2"
    compiled_kind: ClassVar[int] = AVE2

    def __init__(self) -> None:
        # User id -> (last runtime, the one before it or -1), both in seconds.
        self._last_two_s: dict[int, tuple[int, int]] = {}

    def predict(self, request: JobRequest, now_s: int) -> int:
        history = self._last_two_s.get(request.user_id)
        if history is None:
            return request.requested_s
        return ave2_seconds(history[0], history[1], request.requested_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        history = self._last_two_s.get(request.user_id)
        self._last_two_s[request.user_id] = (run_s, -1 if history is None else history[0])

    # The compiled loops' interface (`replay_state`): the histories as a table, a row per user
    # (-1: none yet), and back.
    def why_python(self) -> str | None:
        return None

    def to_arrays(self, jobs: ReplayJobs) -> PredictorArrays:
        import numpy as np

        from hpcpredict.replay_state import PredictorArrays

        last_two = np.full((len(jobs.user_ids), 2), -1, dtype=np.int64)
        for row, user_id in enumerate(jobs.user_ids.tolist()):
            history = self._last_two_s.get(user_id)
            if history is not None:
                last_two[row] = history
        return PredictorArrays(self.compiled_kind, jobs.user_row, last_two=last_two)

    def from_arrays(self, arrays: PredictorArrays, jobs: ReplayJobs) -> None:
        for row, user_id in enumerate(jobs.user_ids.tolist()):
            last, previous = arrays.last_two[row].tolist()
            if last >= 0:
                self._last_two_s[user_id] = (last, previous)
