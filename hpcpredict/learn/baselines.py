"""The predictor protocol and the baseline predictors of docs/method.md §6.

A predictor sees the same three events in the simulator and in the daemon: a job is submitted
(`predict`), a job starts (`job_started`), a job ends and its true runtime is known
(`job_ended`, the moment to learn). It keeps whatever per-user state it needs from those events;
the driver never reaches into it. Predictions are whole seconds in [1, requested time]: the
simulator and the SLURM plugin rely on never exceeding the user's request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from hpcpredict.jobs import JobRequest


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


def clip_prediction(value: float, requested_s: int) -> int:
    """Clip a raw prediction to whole seconds in [1, requested_s] (docs/method.md §5, last line).

    NaN (a diverged model) falls back to the request, the safe answer for a scheduler.
    """
    if value != value:  # NaN
        return max(1, requested_s)
    # max(1, min(int(value), requested_s)) written as comparisons: the same result, without two
    # builtin calls (it runs twice per job in a learned replay).
    seconds = int(value)
    if seconds > requested_s:
        seconds = requested_s
    return seconds if seconds > 1 else 1


class RequestedPredictor:
    """REQUESTED: the user's own estimate, what plain EASY plans with."""

    name = "requested"

    def predict(self, request: JobRequest, now_s: int) -> int:
        return request.requested_s

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


class ClairvoyantPredictor:
    """CLAIRVOYANT: the true runtime, read from the log. An upper bound, not a real predictor.

    It is handed the oracle explicitly (job id -> runtime) so that no other predictor can see
    runtimes at submission by accident.
    """

    name = "clairvoyant"

    def __init__(self, runtimes_s: Mapping[int, int]) -> None:
        self._runtimes_s = runtimes_s

    def predict(self, request: JobRequest, now_s: int) -> int:
        return clip_prediction(self._runtimes_s[request.job_id], request.requested_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


class Ave2Predictor:
    """AVE2 (Tsafrir, Etsion & Feitelson, IEEE TPDS 2007): mean of the user's last two runtimes.

    "Last" means most recently *completed*. The mean is rounded down to whole seconds as in the
    reference; until a user has two completed jobs the request is used; never above the request.
    """

    name = "ave2"

    def __init__(self) -> None:
        self._last_two_s: dict[int, tuple[int, int | None]] = {}

    def predict(self, request: JobRequest, now_s: int) -> int:
        history = self._last_two_s.get(request.user_id)
        if history is None or history[1] is None:
            return request.requested_s
        last_s, previous_s = history
        return clip_prediction((last_s + previous_s) // 2, request.requested_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        history = self._last_two_s.get(request.user_id)
        self._last_two_s[request.user_id] = (run_s, None if history is None else history[0])
