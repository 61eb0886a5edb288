"""Survival-based correction (docs/method.md §8): when a job outlives its
prediction, extend it to a conditional quantile of its user's runtimes given the time it has run.

INCREMENTAL extends a job by fixed steps (1, 5, 15, 30 min, 1 h, ...) whatever the user usually
runs: a user whose jobs run either 10 min or 6 h is corrected five or six times on the way to 6 h.
Here the next prediction is the `quantile` of T given T > elapsed, T the user's runtime, estimated
by Kaplan-Meier (Kaplan & Meier, JASA 1958) on the user's most recent ended runtimes (events) and
the user's running jobs (censored at their elapsed time: they have run at least that long, and
leaving them out would bias the estimate towards short jobs, the point of Nurd, beyond.md §3).

With S the Kaplan-Meier survival function, T's conditional survival beyond e is
S(t) / S(e) = prod over event times e < t_i <= t of (1 - d_i / n_i) (d_i ends at t_i, n_i
observations >= t_i); the answer is the first event time where it falls to 1 - quantile or below.
The estimate needs history: a user with fewer than `min_history` ended runtimes, or whose
estimate never falls that low beyond the elapsed time (no, or too few, runtimes longer than it),
is corrected by INCREMENTAL instead, from its first step above the elapsed time.

The policy is the only stateful correction: it must see jobs start and end. `RuntimeHistory` is
that state, fed by the same two calls as a predictor (`job_started`, `job_ended`), by the
simulator at its events and by the daemon's service at the events it logs (with its state in the
daemon's checkpoint), so the simulator and the SLURM corrector correct from the same history.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from hpcpredict.corrections.limits import INCREMENTAL_STEPS_S, SURVIVAL
from hpcpredict.jobs import JobRequest

if TYPE_CHECKING:
    import numpy as np

    from hpcpredict.replay_state import CorrectionArrays, ReplayJobs

DEFAULT_SURVIVAL_QUANTILE = 0.5
DEFAULT_SURVIVAL_WINDOW = 50  # ended runtimes kept per user: "recent", a few weeks of a busy user
DEFAULT_SURVIVAL_MIN_HISTORY = 5  # fewer ended jobs than this: INCREMENTAL (too little to estimate)


def conditional_quantile_s(
    runtimes_s: Iterable[int], censored_s: Iterable[int], elapsed_s: int, quantile: float
) -> int | None:
    """The `quantile` of T given T > `elapsed_s`, by Kaplan-Meier; None when not estimable.

    `runtimes_s` are observed runtimes (events), `censored_s` lower bounds (running jobs' elapsed
    times). Only observations beyond `elapsed_s` matter to the conditional distribution. The
    answer is an event time > `elapsed_s`, or None when the conditional survival never falls to
    1 - quantile (no event beyond, or the mass left beyond the last event is censored).

    >>> conditional_quantile_s([100, 200, 300, 400], [], 150, 0.5)  # of {200, 300, 400}
    300
    >>> conditional_quantile_s([100, 200], [], 250, 0.5) is None
    True
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"the quantile must be in (0, 1), got {quantile!r}")
    import numpy as np  # here: the command line imports this module for its names

    from hpcpredict.corrections.survival_kernel import NOT_ESTIMABLE, conditional_quantile

    events = np.fromiter(runtimes_s, dtype=np.int64)
    bounds = np.fromiter(censored_s, dtype=np.int64)
    answer = conditional_quantile(events, len(events), bounds, len(bounds), int(elapsed_s), float(quantile))
    return None if answer == NOT_ESTIMABLE else int(answer)


class RuntimeHistory:
    """Per user: the last `window` ended jobs (runtime, censored?) and the running jobs' starts.

    Fed like a predictor (`job_started`, `job_ended`); read by `SurvivalCorrection`. An end is
    censored when the runtime is only a lower bound (live: a job killed at a limit hpcpredict
    lowered, or one that never ran). A lock makes it safe for the daemon, where the service's
    thread feeds it and the SLURM watcher's thread reads it.
    """

    def __init__(self, window: int = DEFAULT_SURVIVAL_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"the window must hold at least one runtime, got {window}")
        self.window = window
        self._ended: dict[int, deque[tuple[int, bool]]] = {}
        self._running: dict[int, dict[int, int]] = {}  # user -> job id -> start (s)
        self._lock = threading.Lock()

    def job_started(self, request: JobRequest, now_s: int) -> None:
        with self._lock:
            self._running.setdefault(request.user_id, {})[request.job_id] = int(now_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int, *, censored: bool = False) -> None:
        with self._lock:
            running = self._running.get(request.user_id)
            if running is not None:
                running.pop(request.job_id, None)
                if not running:
                    del self._running[request.user_id]
            ended = self._ended.get(request.user_id)
            if ended is None:
                ended = self._ended[request.user_id] = deque(maxlen=self.window)
            ended.append((max(0, int(run_s)), bool(censored)))

    def is_empty(self) -> bool:
        """Nothing heard yet: no ended runtime, no running job."""
        with self._lock:
            return not self._ended and not self._running

    def observations(self, user_id: int, now_s: int | None) -> tuple[list[int], list[int]]:
        """(runtimes, lower bounds) of the user: the ended jobs' runtimes, and the censored ends
        with the running jobs' elapsed times at `now_s` (none when `now_s` is None)."""
        with self._lock:
            ended = list(self._ended.get(user_id, ()))
            starts = list(self._running.get(user_id, {}).values()) if now_s is not None else []
        events = [run_s for run_s, censored in ended if not censored]
        bounds = [run_s for run_s, censored in ended if censored]
        if now_s is not None:
            bounds.extend(max(0, now_s - start_s) for start_s in starts)
        return events, bounds

    def to_state(self) -> dict[str, np.ndarray]:
        import numpy as np  # checkpoints only: the command line imports this module for names

        with self._lock:
            ended = [(user, run_s, int(censored)) for user, runs in self._ended.items()
                     for run_s, censored in runs]
            running = [(user, job, start) for user, jobs in self._running.items()
                       for job, start in jobs.items()]
        return {
            "ended": np.array(ended, dtype=np.int64).reshape(-1, 3),
            "running": np.array(running, dtype=np.int64).reshape(-1, 3),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Replace the history with `to_state()`'s (an empty dict: an empty history)."""
        import numpy as np  # checkpoints only

        with self._lock:
            self._ended = {}
            self._running = {}
            for user, run_s, censored in state.get("ended", np.empty((0, 3))).tolist():
                self._ended.setdefault(int(user), deque(maxlen=self.window)).append(
                    (int(run_s), bool(censored)))
            for user, job, start in state.get("running", np.empty((0, 3))).tolist():
                self._running.setdefault(int(user), {})[int(job)] = int(start)


@dataclass
class SurvivalCorrection:
    """SURVIVAL: the `quantile` of the user's runtime given the elapsed time (module doc), capped
    at the request and always above the elapsed time; INCREMENTAL without enough history."""

    quantile: float = DEFAULT_SURVIVAL_QUANTILE
    min_history: int = DEFAULT_SURVIVAL_MIN_HISTORY
    history: RuntimeHistory = field(default_factory=RuntimeHistory)
    name: str = "survival"
    fallbacks: int = 0  # corrections INCREMENTAL answered (too little history): reported
    estimated: int = 0  # corrections the estimate answered

    def __post_init__(self) -> None:
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"the survival quantile must be in (0, 1), got {self.quantile!r}")
        if self.min_history < 1:
            raise ValueError(f"min_history must be >= 1, got {self.min_history}")

    def job_started(self, request: JobRequest, now_s: int) -> None:
        self.history.job_started(request, now_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int, *, censored: bool = False) -> None:
        self.history.job_ended(request, run_s, end_s, censored=censored)

    def to_state(self) -> dict[str, np.ndarray]:
        return self.history.to_state()

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.history.load_state(state)

    # The compiled loops' interface (`replay_state`): the history in the loops' layout
    # (`survival_kernel`: a ring of each user's last runtimes, the running jobs linked), empty
    # at the start, and back through `load_state`.
    compiled_kind: ClassVar[int] = SURVIVAL

    def why_python(self) -> str | None:
        if not self.history.is_empty():
            return "a SURVIVAL history from before (the loops start from none)"
        return None

    def to_arrays(self, jobs: ReplayJobs) -> CorrectionArrays:
        import numpy as np

        from hpcpredict.corrections.survival_kernel import HISTORY_RUNS
        from hpcpredict.replay_state import CorrectionArrays

        users, count = len(jobs.user_ids), len(jobs.job_ids)
        return CorrectionArrays(
            SURVIVAL, np.zeros((users, HISTORY_RUNS + self.history.window), dtype=np.int64),
            np.full((2, max(count, 1)), -1, dtype=np.int64), np.full(users, -1, dtype=np.int64),
            self.min_history, self.quantile)

    def from_arrays(self, arrays: CorrectionArrays, jobs: ReplayJobs) -> None:
        """The counts, and each user's last runtimes, oldest first, the users in the order of
        their first end, as the Python loop's history holds them (every job has ended: nobody
        runs)."""
        import numpy as np

        from hpcpredict.corrections.survival_kernel import (
            HISTORY_COUNT,
            HISTORY_FIRST_END,
            HISTORY_NEXT,
            HISTORY_RUNS,
        )

        self.estimated += arrays.estimated
        self.fallbacks += arrays.fallbacks
        history, window = arrays.history, self.history.window
        ended = np.flatnonzero(history[:, HISTORY_COUNT] > 0)
        rows = []
        for row in ended[np.argsort(history[ended, HISTORY_FIRST_END], kind="stable")].tolist():
            count, place = int(history[row, HISTORY_COUNT]), int(history[row, HISTORY_NEXT])
            runs = history[row, HISTORY_RUNS:].tolist()
            in_order = runs[:count] if count < window else runs[place:] + runs[:place]
            rows.extend((int(jobs.user_ids[row]), run_s, 0) for run_s in in_order)
        self.load_state({"ended": np.array(rows, dtype=np.int64).reshape(-1, 3)})

    def corrected_prediction_s(
        self, requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int,
        *, user_id: int | None = None, now_s: int | None = None,
    ) -> int:
        estimate = None
        if user_id is not None:
            ended, running = self.history.observations(user_id, now_s)
            if len(ended) >= self.min_history:
                estimate = conditional_quantile_s(ended, running, elapsed_s, self.quantile)
        if estimate is None:
            self.fallbacks += 1
        else:
            self.estimated += 1
        return _limit_s(estimate, requested_s, initial_prediction_s, corrections_done, elapsed_s)


def incremental_above_s(
    requested_s: int, initial_prediction_s: int, corrections_done: int, elapsed_s: int
) -> int:
    """INCREMENTAL's first limit from the `corrections_done`-th step on that is above the elapsed
    time (after survival estimates the job may already be past the next fixed step); the request
    when none is: SURVIVAL's answer without an estimate."""
    return _limit_s(None, requested_s, initial_prediction_s, corrections_done, elapsed_s)


def _limit_s(estimate_s: int | None, requested_s: int, initial_prediction_s: int,
             corrections_done: int, elapsed_s: int) -> int:
    """`survival_kernel.survival_limit` (the compiled loop's) on INCREMENTAL's steps, None for no
    estimate. Its source run as Python: the same code, without a compiled call's dispatch and an
    array per correction, which made a correction 5-6x slower than the loop it replaced (8% more
    time in a SLURM-model replay with SURVIVAL)."""
    limit, not_estimable = _survival_limit_as_python()
    return limit(not_estimable if estimate_s is None else estimate_s, requested_s,
                 initial_prediction_s, corrections_done, elapsed_s, INCREMENTAL_STEPS_S)


@functools.cache
def _survival_limit_as_python() -> tuple[Callable[..., int], int]:
    """(`survival_limit`'s Python source, NOT_ESTIMABLE), looked up once: imported here, as the
    command line imports this module for its names (numba's dispatcher keeps the source as
    `py_func`; under NUMBA_DISABLE_JIT the function is its own source)."""
    from hpcpredict.corrections.survival_kernel import NOT_ESTIMABLE, survival_limit

    return getattr(survival_limit, "py_func", survival_limit), NOT_ESTIMABLE
