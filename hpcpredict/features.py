"""Per-user history and the 20 features of docs/method.md §2, computed at submission.

One `FeatureState` is fed the three events every driver produces (a job is submitted, starts,
ends) and answers, for a job being submitted, the vector x_j of docs/method.md §2 from what is known
at that instant. The simulator and the daemon share this single implementation (style.md,
"feature code written twice" is an anti-pattern).

What "known at r_j" means here:

* History (features 2-7, 16) is the user's *completed* jobs only, in the order their ends were
  reported: "last" is the most recently completed job, not the most recently submitted one.
* Features 11-15 describe the user's jobs *running* at r_j, tracked through `job_started` /
  `job_ended`; elapsed time of a running job is ``now_s - start_s``.
* Feature 9 is the mean processor count over the user's submitted jobs **including the job
  being submitted**. The source says "past jobs"; we count the current one because its q_j is
  known at r_j anyway (it is feature 8, so nothing leaks), and because it keeps feature 10
  (q_j / feature 9) defined for a user's first job: that job gets the neutral ratio 1 instead of
  a 0/0 special case that would make a first job look extreme.
* Features 17-20 (time of day and of week) use the absolute local time of the submission when a
  `FeatureContext` gives the log's UnixStartTime and TimeZoneString (SWF header), else the raw
  ``submit_s`` read as UTC seconds, exactly the formula of docs/method.md §2.

Every event costs O(1) (amortised): running sums give the means, the sum of elapsed times is
``n * now - sum(starts)``, and the longest elapsed time is ``now - min(starts)`` read from a
small per-user heap with lazy deletion.

Example:

>>> from hpcpredict.jobs import JobRequest
>>> state = FeatureState()
>>> first = JobRequest(job_id=1, submit_s=0, procs=4, requested_s=3600, user_id=7)
>>> x = state.job_submitted(first, now_s=0)
>>> float(x[REQUESTED_S]), float(x[PROCS_MEAN_SUBMITTED]), float(x[PROCS_RATIO])
(3600.0, 4.0, 1.0)
>>> state.job_started(first, now_s=10)
>>> state.job_ended(first, run_s=100, end_s=110)
>>> second = JobRequest(job_id=2, submit_s=200, procs=8, requested_s=600, user_id=7)
>>> x = state.job_submitted(second, now_s=200)
>>> float(x[LAST_RUN_S]), float(x[BREAK_TIME_S]), float(x[PROCS_MEAN_SUBMITTED])
(100.0, 90.0, 6.0)
"""

from __future__ import annotations

import heapq
import math
import struct
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np

from hpcpredict.jobs import JobRequest

N_FEATURES = 20

# Indices into x (0-based; docs/method.md §2 numbers them from 1).
REQUESTED_S = 0  # 1: p~_j
LAST_RUN_S = 1  # 2
SECOND_LAST_RUN_S = 2  # 3
THIRD_LAST_RUN_S = 3  # 4
AVE2_S = 4  # 5
AVE3_S = 5  # 6
MEAN_RUN_S = 6  # 7
PROCS = 7  # 8: q_j
PROCS_MEAN_SUBMITTED = 8  # 9
PROCS_RATIO = 9  # 10
PROCS_MEAN_RUNNING = 10  # 11
N_RUNNING = 11  # 12
LONGEST_ELAPSED_S = 12  # 13
SUM_ELAPSED_S = 13  # 14
PROCS_HELD = 14  # 15
BREAK_TIME_S = 15  # 16
DAY_COS = 16  # 17
DAY_SIN = 17  # 18
WEEK_COS = 18  # 19
WEEK_SIN = 19  # 20

FEATURE_NAMES: tuple[str, ...] = (
    "requested_s",
    "last_run_s",
    "second_last_run_s",
    "third_last_run_s",
    "ave2_s",
    "ave3_s",
    "mean_run_s",
    "procs",
    "procs_mean_submitted",
    "procs_ratio",
    "procs_mean_running",
    "n_running",
    "longest_elapsed_s",
    "sum_elapsed_s",
    "procs_held",
    "break_time_s",
    "day_cos",
    "day_sin",
    "week_cos",
    "week_sin",
)

DAY_S = 86_400  # docs/method.md §2, features 17-18
WEEK_S = 604_800  # docs/method.md §2, features 19-20
_TWO_PI = 2.0 * math.pi
# A UTC offset is looked up once per bucket of this many seconds: every IANA transition since
# 1970 falls on a multiple of 15 minutes, and a bucket holding one is never cached anyway.
_OFFSET_BUCKET_S = 900
# x_j as 20 native doubles, the memory layout of a C-contiguous float64 array of length 20.
_FEATURE_LAYOUT = struct.Struct(f"{N_FEATURES}d")


@dataclass(frozen=True, slots=True)
class FeatureContext:
    """Where the log's clock is: its SWF header fields UnixStartTime and TimeZoneString.

    ``submit_s`` of an SWF log counts from ``unix_start_s``; the local time of day of a
    submission is what users' habits follow (docs/method.md §2, features 17-20), so it is read in
    ``time_zone`` (an IANA name such as ``"Europe/Paris"``, via `zoneinfo`, DST included). The
    default (0, None) reads ``submit_s`` itself as UTC seconds: the literal formula of §2. The
    daemon, whose times are Unix seconds, passes ``FeatureContext(0, site_time_zone)``.
    """

    unix_start_s: int = 0
    time_zone: str | None = None


class _LocalClock:
    """Maps a log's ``submit_s`` to local seconds since the Unix epoch, caching UTC offsets.

    Submissions arrive in time order, so a one-entry cache keyed by a 15-minute bucket makes the
    zoneinfo lookup (about 2 µs) rare; a bucket whose two ends disagree contains a DST change and
    is computed exactly for every timestamp instead of being cached.
    """

    __slots__ = ("_unix_start_s", "_zone", "_bucket", "_offset_s")

    def __init__(self, context: FeatureContext) -> None:
        self._unix_start_s = context.unix_start_s
        self._zone = None if context.time_zone is None else ZoneInfo(context.time_zone)
        self._bucket: float | None = None
        self._offset_s = 0

    def _utc_offset_s(self, unix_s: float) -> int:
        offset = datetime.fromtimestamp(unix_s, self._zone).utcoffset()
        return 0 if offset is None else int(offset.total_seconds())

    def local_s(self, submit_s: float) -> float:
        unix_s = self._unix_start_s + submit_s
        if self._zone is None:
            return unix_s
        bucket = unix_s // _OFFSET_BUCKET_S
        if bucket != self._bucket:
            start_s = bucket * _OFFSET_BUCKET_S
            first = self._utc_offset_s(start_s)
            if first != self._utc_offset_s(start_s + _OFFSET_BUCKET_S - 1):
                return unix_s + self._utc_offset_s(unix_s)
            self._bucket = bucket
            self._offset_s = first
        return unix_s + self._offset_s


class UserHistory:
    """What one user's features need, kept as running sums (all times in seconds)."""

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

    def copy(self) -> UserHistory:
        """An independent copy (the daemon's undo of an event that failed to commit)."""
        twin = UserHistory.__new__(UserHistory)
        for name in UserHistory.__slots__:
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


class FeatureState:
    """All users' histories; computes x_j at submission (docs/method.md §2). See the module doc."""

    def __init__(self, context: FeatureContext | None = None) -> None:
        self.context = FeatureContext() if context is None else context
        self._clock = _LocalClock(self.context)
        self.users: dict[int, UserHistory] = {}
        # Read-only stand-in for a user never seen: computing features must not create state.
        self._no_history = UserHistory()

    def _user(self, user_id: int) -> UserHistory:
        user = self.users.get(user_id)
        if user is None:
            user = self.users[user_id] = UserHistory()
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

    # ------------------------------------------------------------------ checkpointing
    def to_state(self) -> dict[str, np.ndarray]:
        """Columns of numpy arrays (exact float64/int64 copies) for a checkpoint."""
        users = self.users
        running = [
            (user_id, job_id, procs, start_s)
            for user_id, user in users.items()
            for job_id, (procs, start_s) in user.running.items()
        ]
        floats = np.array(
            [
                (
                    u.sum_run_s,
                    u.last_run_s,
                    u.second_last_run_s,
                    u.third_last_run_s,
                    u.last_end_s,
                    u.sum_submitted_procs,
                    u.running_procs,
                    u.running_sum_start_s,
                )
                for u in users.values()
            ],
            dtype=np.float64,
        ).reshape(len(users), len(_USER_FLOAT_FIELDS))
        return {
            "user_id": np.array(list(users), dtype=np.int64),
            "user_counts": np.array(
                [(u.n_completed, u.n_submitted) for u in users.values()], dtype=np.int64
            ).reshape(len(users), 2),
            "user_floats": floats,
            "running_ids": np.array([r[:2] for r in running], dtype=np.int64).reshape(-1, 2),
            "running_values": np.array([r[2:] for r in running], dtype=np.float64).reshape(-1, 2),
            "unix_start_s": np.array(self.context.unix_start_s, dtype=np.int64),
            "time_zone": np.array("" if self.context.time_zone is None else self.context.time_zone),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> FeatureState:
        """Inverse of `to_state`: features computed afterwards are bit-for-bit the same."""
        time_zone = str(state["time_zone"])
        feature_state = cls(FeatureContext(int(state["unix_start_s"]), time_zone or None))
        users = feature_state.users
        for user_id, counts, floats in zip(
            state["user_id"].tolist(), state["user_counts"].tolist(), state["user_floats"].tolist()
        ):
            user = users[user_id] = UserHistory()
            user.n_completed, user.n_submitted = counts
            for name, value in zip(_USER_FLOAT_FIELDS, floats):
                setattr(user, name, value)
        for (user_id, job_id), (procs, start_s) in zip(
            state["running_ids"].tolist(), state["running_values"].tolist()
        ):
            users[user_id].running[job_id] = (procs, start_s)
        for user in users.values():
            user._rebuild_heap()
        return feature_state


_USER_FLOAT_FIELDS = (
    "sum_run_s",
    "last_run_s",
    "second_last_run_s",
    "third_last_run_s",
    "last_end_s",
    "sum_submitted_procs",
    "running_procs",
    "running_sum_start_s",
)
