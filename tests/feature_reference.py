"""The Python feature state that `hpcpredict.learn.features` replaced with compiled arrays (issue 31,
round 3), kept here only, as the reference the compiled state is checked against bit for bit
(tests/test_features_compiled.py). Not part of the package: one implementation ships.

The code is `hpcpredict/learn/features.py` of d4ef76e (UserHistory and FeatureState, without the
checkpoint methods), renamed; the constants and the clock come from the package.
"""

from __future__ import annotations

import heapq
import math
import struct

import numpy as np

from hpcpredict.learn.features import (
    DAY_S,
    N_FEATURES,
    WEEK_S,
    FeatureContext,
    _LocalClock,
)
from hpcpredict.jobs import JobRequest

_TWO_PI = 2.0 * math.pi
_FEATURE_LAYOUT = struct.Struct(f"{N_FEATURES}d")


class ReferenceUserHistory:
    """What one user's features need, kept as running sums (all times in seconds), as objects."""

    __slots__ = (
        "n_completed",
        "sum_run_s",
        "last_run_s",
        "second_last_run_s",
        "third_last_run_s",
        "last_end_s",
        "n_submitted",
        "sum_submitted_procs",
        "running",
        "running_procs",
        "running_sum_start_s",
        "_start_heap",
    )

    def __init__(self) -> None:
        self.n_completed = 0
        self.sum_run_s = 0.0
        self.last_run_s = 0.0
        self.second_last_run_s = 0.0
        self.third_last_run_s = 0.0
        self.last_end_s = 0.0
        self.n_submitted = 0
        self.sum_submitted_procs = 0.0
        # job_id -> (procs, start_s) of the user's running jobs.
        self.running: dict[int, tuple[float, float]] = {}
        self.running_procs = 0.0
        self.running_sum_start_s = 0.0
        # (start_s, job_id), possibly holding ended jobs: they are dropped when they surface.
        self._start_heap: list[tuple[float, int]] = []

    def add_running(self, job_id: int, procs: float, start_s: float) -> None:
        if job_id in self.running:  # a repeated start event (daemon replay): restart the clock
            self.remove_running(job_id)
        self.running[job_id] = (procs, start_s)
        self.running_procs += procs
        self.running_sum_start_s += start_s
        heapq.heappush(self._start_heap, (start_s, job_id))

    def remove_running(self, job_id: int) -> None:
        entry = self.running.pop(job_id, None)
        if entry is None:
            return
        procs, start_s = entry
        if self.running:
            self.running_procs -= procs
            self.running_sum_start_s -= start_s
            # Stale heap entries are bounded by twice the live ones: compact when exceeded.
            if len(self._start_heap) > 2 * len(self.running) + 8:
                self._rebuild_heap()
        else:  # reset exactly, so rounding never accumulates across busy periods
            self.running_procs = 0.0
            self.running_sum_start_s = 0.0
            self._start_heap.clear()

    def earliest_start_s(self) -> float:
        """Start time of the longest-running job (call only while some job runs)."""
        heap = self._start_heap
        running = self.running
        while True:
            start_s, job_id = heap[0]
            entry = running.get(job_id)
            if entry is not None and entry[1] == start_s:
                return start_s
            heapq.heappop(heap)

    def _rebuild_heap(self) -> None:
        self._start_heap = [(start_s, job_id) for job_id, (_, start_s) in self.running.items()]
        heapq.heapify(self._start_heap)

    def copy(self) -> ReferenceUserHistory:
        """An independent copy (the daemon's undo of an event that failed to commit)."""
        twin = ReferenceUserHistory.__new__(ReferenceUserHistory)
        for name in ReferenceUserHistory.__slots__:
            setattr(twin, name, getattr(self, name))
        twin.running = dict(self.running)
        twin._start_heap = list(self._start_heap)
        return twin

    def add_completed(self, run_s: float, end_s: float) -> None:
        self.n_completed += 1
        self.sum_run_s += run_s
        self.third_last_run_s = self.second_last_run_s
        self.second_last_run_s = self.last_run_s
        self.last_run_s = run_s
        self.last_end_s = end_s


class ReferenceFeatureState:
    """The Python `FeatureState` as it was before issue 31, round 3: all users' histories as
    objects, with a heap per user; x_j at submission (docs/method.md §2)."""

    def __init__(self, context: FeatureContext | None = None) -> None:
        self.context = FeatureContext() if context is None else context
        self._clock = _LocalClock(self.context)
        self.users: dict[int, ReferenceUserHistory] = {}
        # Read-only stand-in for a user never seen: computing features must not create state.
        self._no_history = ReferenceUserHistory()

    def _user(self, user_id: int) -> ReferenceUserHistory:
        user = self.users.get(user_id)
        if user is None:
            user = self.users[user_id] = ReferenceUserHistory()
        return user

    def compute(
        self, request: JobRequest, now_s: float, out: np.ndarray | None = None
    ) -> np.ndarray:
        """x_j for `request` submitted at `now_s`, without recording the submission.

        Reads only state built from events before this call, plus the request itself: nothing
        known at the job's end can enter (docs/method.md §2). `out`, if given, is a C-contiguous
        float64 array of length 20 that is filled and returned (the learner reuses one to avoid
        allocating).
        """
        user = self.users.get(request.user_id)
        if user is None:
            user = self._no_history
        procs = float(request.procs)

        n_completed = user.n_completed
        last_s = user.last_run_s
        second_s = user.second_last_run_s
        third_s = user.third_last_run_s
        if n_completed >= 3:
            ave2_s = (last_s + second_s) / 2.0
            ave3_s = (last_s + second_s + third_s) / 3.0
        elif n_completed == 2:
            ave2_s = ave3_s = (last_s + second_s) / 2.0
        else:  # one job: its runtime; none: 0 (means over no jobs are 0)
            ave2_s = ave3_s = last_s
        mean_run_s = user.sum_run_s / n_completed if n_completed else 0.0
        break_s = now_s - user.last_end_s if n_completed else 0.0

        procs_mean = (user.sum_submitted_procs + procs) / (user.n_submitted + 1)
        procs_ratio = procs / procs_mean if procs_mean > 0.0 else 0.0

        n_running = len(user.running)
        if n_running:
            held = user.running_procs
            running_mean = held / n_running
            longest_s = now_s - user.earliest_start_s()
            sum_elapsed_s = n_running * now_s - user.running_sum_start_s
        else:
            held = running_mean = longest_s = sum_elapsed_s = 0.0

        local_s = self._clock.local_s(request.submit_s)
        day = _TWO_PI * (local_s % DAY_S) / DAY_S
        week = _TWO_PI * (local_s % WEEK_S) / WEEK_S

        if out is None:
            out = np.empty(N_FEATURES, dtype=np.float64)
        # struct writes the 20 doubles straight into the buffer: the same conversions as
        # `out[:] = (...)`, in half the time (it runs once per submission; docs/performance.md).
        _FEATURE_LAYOUT.pack_into(
            out,
            0,
            request.requested_s,
            last_s,
            second_s,
            third_s,
            ave2_s,
            ave3_s,
            mean_run_s,
            procs,
            procs_mean,
            procs_ratio,
            running_mean,
            n_running,
            longest_s,
            sum_elapsed_s,
            held,
            break_s,
            math.cos(day),
            math.sin(day),
            math.cos(week),
            math.sin(week),
        )
        return out

    def record_submission(self, request: JobRequest) -> None:
        """Count the job in its user's submitted jobs (feature 9 of later submissions)."""
        user = self.users.get(request.user_id) or self._user(request.user_id)  # as in job_started
        user.n_submitted += 1
        user.sum_submitted_procs += request.procs

    def job_submitted(
        self, request: JobRequest, now_s: float, out: np.ndarray | None = None
    ) -> np.ndarray:
        """The submission event: x_j as of `now_s`, then the submission is recorded."""
        x = self.compute(request, now_s, out)
        self.record_submission(request)
        return x

    def late_submission(
        self, request: JobRequest, end_s: float, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Best available x_j for a job whose submission was never observed, at its end.

        For a learner that must learn from a job it never predicted (a daemon that was down at
        submission). The job is first taken out of its user's running set (its own elapsed
        time would be its runtime: leakage) and recorded as submitted; x_j is then computed
        at `end_s` from the state of that moment. The job's own runtime cannot enter, but the
        history may hold jobs that ended after its submission: an approximation, used only
        when the exact path (`job_submitted` at submission) was impossible.
        """
        self._user(request.user_id).remove_running(request.job_id)
        return self.job_submitted(request, end_s, out)

    def job_started(self, request: JobRequest, now_s: float) -> None:
        """The job joins its user's running set (features 11-15)."""
        # the dictionary read first: `_user`'s call only for a user's first job (once per start)
        user = self.users.get(request.user_id) or self._user(request.user_id)
        user.add_running(request.job_id, float(request.procs), now_s)

    def job_ended(self, request: JobRequest, run_s: float, end_s: float) -> None:
        """The job leaves the running set and becomes the user's last completed job."""
        user = self.users.get(request.user_id) or self._user(request.user_id)  # as in job_started
        user.remove_running(request.job_id)
        user.add_completed(float(run_s), float(end_s))
