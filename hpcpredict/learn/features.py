"""Per-user history and the 20 features of docs/method.md §2, computed at submission.

One `FeatureState` is fed the three events every driver produces (a job is submitted, starts,
ends) and answers, for a job being submitted, the vector x_j of docs/method.md §2 from what is known
at that instant. The simulator and the daemon share this single implementation (two copies
would drift apart).

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

Every event costs O(1) but one: running sums give the means, the sum of elapsed times is
``n * now - sum(starts)``, and the longest elapsed time is ``now - min(starts)``, the minimum
kept per user and recomputed over the user's running jobs only when the job holding it ends.
The state is arrays that compiled kernels update (`hpcpredict.learn.feature_kernels`, one call per
event; the learner's submission, expansion and score included: `job_submitted_and_scored`).

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

import dataclasses
from functools import partial
from operator import attrgetter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np

from hpcpredict.history_keys import DEFAULT_HISTORY_BY, HISTORY_KEYS, check_history_by, history_key
from hpcpredict.learn import feature_kernels as K
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
# A UTC offset is looked up once per bucket of this many seconds: every IANA transition since
# 1970 falls on a multiple of 15 minutes, and a bucket holding one is never cached anyway.
_OFFSET_BUCKET_S = 900


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

    def local_seconds(self, submit_s: np.ndarray) -> np.ndarray:
        """`local_s` of every submission of an int64 array, as float64: for a whole log at once
        (the compiled replay), where 300 k calls of `local_s` cost ~0.4 s.

        The same values: zoneinfo is asked once per hour boundary the submissions touch, and an
        hour whose two boundaries have the same UTC offset has it throughout (zones change offset
        months apart; `local_s` assumes as much of its 15-minute buckets). The submissions in
        an hour whose boundaries differ (a DST change: two a year) take `local_s` itself.
        """
        unix_s = self._unix_start_s + np.asarray(submit_s, dtype=np.int64)
        if self._zone is None:
            return unix_s.astype(np.float64)
        hours = unix_s // 3600
        boundaries = np.unique(np.concatenate((hours, hours + 1)))
        offsets = np.array([self._utc_offset_s(hour * 3600) for hour in boundaries.tolist()],
                           dtype=np.int64)
        at = np.searchsorted(boundaries, hours)
        start_offsets, end_offsets = offsets[at], offsets[at + 1]
        local = (unix_s + start_offsets).astype(np.float64)
        for job in np.flatnonzero(start_offsets != end_offsets).tolist():
            local[job] = self.local_s(int(submit_s[job]))
        return local


@dataclass(frozen=True, slots=True)
class UserHistory:
    """One user's feature state as it stands (all times in seconds): a copy, read by the daemon's
    views and put back by its undo (`FeatureState.save_user` / `restore_user`)."""

    n_completed: int
    sum_run_s: float
    last_run_s: float
    second_last_run_s: float
    third_last_run_s: float
    last_end_s: float
    n_submitted: int
    sum_submitted_procs: float
    # job_id -> (procs, start_s) of the user's running jobs, in the order they started.
    running: dict[int, tuple[float, float]]
    running_procs: float
    running_sum_start_s: float

    def copy(self) -> UserHistory:
        """An independent copy (its running set is its own)."""
        return dataclasses.replace(self, running=dict(self.running))


class UserHistories(Mapping[int, UserHistory]):
    """A read-only view of a `FeatureState`'s users: user id -> `UserHistory` (built on access)."""

    __slots__ = ("_state",)

    def __init__(self, state: FeatureState) -> None:
        self._state = state

    def __getitem__(self, user_id: int) -> UserHistory:
        saved = self._state.save_user(user_id)
        if saved is None:
            raise KeyError(user_id)
        return saved

    def __contains__(self, user_id: object) -> bool:
        return user_id in self._state._rows

    def __iter__(self) -> Iterator[int]:
        return iter(self._state._rows)

    def __len__(self) -> int:
        return len(self._state._rows)


_FIRST_ROWS = 64  # rows allocated at first; the arrays double when full


class FeatureState:
    """All users' histories; computes x_j at submission (docs/method.md §2). See the module doc.

    The state lives in two arrays, `table` and `slots`, that the compiled kernels of
    `feature_kernels` update (that module's doc gives their layout): one row per user, found from its id by a dictionary (ids
    are any integers: the daemon's), and one slot per running job, found from (user id, job id).
    Each event is one compiled call; the time of day (`_LocalClock`) stays in Python, where
    `zoneinfo` is, and reaches the kernel as local seconds.
    """

    def __init__(self, context: FeatureContext | None = None, history_by: str = DEFAULT_HISTORY_BY) -> None:
        """`history_by`: what a history is kept for (`hpcpredict.history_keys`): the user (the
        paper's rule), or the user and one field of the job; "user" below reads "key" then."""
        check_history_by(history_by)
        self.history_by = history_by
        # the key of a request's history: its user id, fast, in the paper's rule
        self._key = (attrgetter("user_id") if HISTORY_KEYS[history_by] is None
                     else partial(history_key, history_by=history_by))
        self.context = FeatureContext() if context is None else context
        self._clock = _LocalClock(self.context)
        self._rows: dict[int, int] = {}  # user id -> row of `table`
        self._free_rows: list[int] = []  # rows of users an undo removed
        self._n_rows = 0  # rows ever used (the high-water mark)
        self.table = np.zeros((_FIRST_ROWS, K.USER_COLUMNS))
        self._slot_of: dict[tuple[int, int], int] = {}  # (user id, job id) -> slot of a running job
        self._slot_job: list[int] = []  # slot -> the job id it holds (or held)
        self._free_slots: list[int] = []
        self.slots = np.zeros((_FIRST_ROWS, K.SLOT_COLUMNS))

    @property
    def users(self) -> UserHistories:
        """User id -> `UserHistory`, read-only (`save_user` / `restore_user` change a user)."""
        return UserHistories(self)

    # ------------------------------------------------------------------ for the compiled loops
    def row_of(self, user_id: int) -> int:
        """The user's row of `table`, made (zeroed) if the user has none: a compiled loop
        updates the table in place (`LearnedPredictor.to_arrays`)."""
        return self._row(user_id)

    def local_seconds(self, submit_s: np.ndarray) -> np.ndarray:
        """Each submission's local time of day, as the features read it."""
        return self._clock.local_seconds(submit_s)

    def has_running_jobs(self) -> bool:
        """Is any job running (a slot in use)? A compiled loop starts from none."""
        return bool(self._slot_of)

    # ------------------------------------------------------------------ rows and slots
    def _row(self, user_id: int) -> int:
        """The user's row, made (zeroed) on the user's first event."""
        row = self._rows.get(user_id)
        if row is None:
            row = self._rows[user_id] = self._new_row()
        return row

    def _new_row(self) -> int:
        if self._free_rows:
            row = self._free_rows.pop()
        else:
            row = self._n_rows
            if row == len(self.table):
                self.table = _grown(self.table)
            self._n_rows += 1
        self.table[row] = 0.0
        self.table[row, K.HEAD_AT] = self.table[row, K.TAIL_AT] = K.NO_SLOT
        return row

    def _new_slot(self, job_id: int) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
            self._slot_job[slot] = job_id
            return slot
        slot = len(self._slot_job)
        if slot == len(self.slots):
            self.slots = _grown(self.slots)
        self._slot_job.append(job_id)
        return slot

    @property
    def _n_slots(self) -> int:
        """Slots ever used (the high-water mark of running jobs)."""
        return len(self._slot_job)

    def _running_slots(self, row: int) -> list[int]:
        """The user's running slots, in start order."""
        slots = []
        slot = int(self.table[row, K.HEAD_AT])
        while slot != K.NO_SLOT:
            slots.append(slot)
            slot = int(self.slots[slot, K.NEXT_AT])
        return slots

    # ------------------------------------------------------------------ the events
    def compute(
        self, request: JobRequest, now_s: float, out: np.ndarray | None = None
    ) -> np.ndarray:
        """x_j for `request` submitted at `now_s`, without recording the submission.

        Reads only state built from events before this call, plus the request itself: nothing
        known at the job's end can enter (docs/method.md §2); a user never seen gets no state.
        `out`, if given, is a C-contiguous float64 array of length 20 that is filled and returned
        (the learner reuses one to avoid allocating).
        """
        if out is None:
            out = np.empty(N_FEATURES, dtype=np.float64)
        K.features_into(self.table, self._rows.get(self._key(request), -1), float(request.procs),
                        float(request.requested_s), float(now_s),
                        float(self._clock.local_s(request.submit_s)), out)
        return out

    def record_submission(self, request: JobRequest) -> None:
        """Count the job in its user's submitted jobs (feature 9 of later submissions)."""
        K.record_submission(self.table, self._row(self._key(request)), float(request.procs))

    def job_submitted(
        self, request: JobRequest, now_s: float, out: np.ndarray | None = None
    ) -> np.ndarray:
        """The submission event: x_j as of `now_s`, then the submission is recorded."""
        if out is None:
            out = np.empty(N_FEATURES, dtype=np.float64)
        row = self._row(self._key(request))
        K.submit(self.table, row, float(request.procs), float(request.requested_s), float(now_s),
                 float(self._clock.local_s(request.submit_s)), out)
        return out

    def job_submitted_and_scored(
        self, request: JobRequest, now_s: float, w: np.ndarray, phi: np.ndarray
    ) -> float:
        """`job_submitted`, then Phi(x_j) into `phi` (x_j is phi[1:21]) and f = w . Phi, in one
        compiled call (the learner's submission; `QuadraticExpansion.score`'s arithmetic, bit
        for bit)."""
        key = self._key(request)
        row = self._rows.get(key)
        if row is None:
            row = self._row(key)
        return K.submit_and_score(
            self.table, row, float(request.procs), float(request.requested_s), float(now_s),
            float(self._clock.local_s(request.submit_s)), w, phi)

    def compute_and_score(
        self, request: JobRequest, now_s: float, out: np.ndarray, w: np.ndarray, phi: np.ndarray
    ) -> float:
        """`compute` into `out`, then Phi(x_j) into `phi` and f = w . Phi, in one compiled call
        (a peek: the daemon's PREDICT), recording nothing."""
        return K.features_and_score(
            self.table, self._rows.get(self._key(request), -1), float(request.procs),
            float(request.requested_s), float(now_s), float(self._clock.local_s(request.submit_s)),
            out, w, phi)

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
        self._row(self._key(request))
        self.leave_running(request)
        return self.job_submitted(request, end_s, out)

    def job_started(self, request: JobRequest, now_s: float) -> None:
        """The job joins its user's running set (features 11-15); a repeated start event (the
        daemon's replay, a requeue) restarts its clock."""
        # (the fast paths written out: this runs once per start, and each call costs)
        user_id = self._key(request)
        row = self._rows.get(user_id)
        if row is None:
            row = self._row(user_id)
        key = (user_id, request.job_id)
        slot = self._slot_of.get(key)
        if slot is not None:  # a repeated start: out first, then in again
            K.leave_running(self.table, self.slots, row, slot)
        elif self._free_slots:
            slot = self._slot_of[key] = self._free_slots.pop()
            self._slot_job[slot] = request.job_id
        else:
            slot = self._slot_of[key] = self._new_slot(request.job_id)
        K.start_running(self.table, self.slots, row, slot, float(request.procs), float(now_s))

    def job_ended(self, request: JobRequest, run_s: float, end_s: float) -> None:
        """The job leaves the running set and becomes the user's last completed job."""
        row, slot = self.ending(request)
        K.end_job(self.table, self.slots, row, slot, float(run_s), float(end_s))

    def ending(self, request: JobRequest) -> tuple[int, int]:
        """For a compiled call that ends the job itself (`feature_kernels.end_job`; the learner's
        `learn_and_end`), which must follow at once: the user's row (made if new) and the job's
        running slot (`NO_SLOT`: not running), released here."""
        user_id = self._key(request)
        row = self._rows.get(user_id)
        if row is None:
            row = self._row(user_id)
        slot = self._slot_of.pop((user_id, request.job_id), K.NO_SLOT)
        if slot != K.NO_SLOT:
            self._free_slots.append(slot)
        return row, slot

    def leave_running(self, request: JobRequest) -> None:
        """The job leaves its user's running set without a completion (a job that never ran
        after all, a late submission); nothing if it is not running."""
        key = self._key(request)
        slot = self._slot_of.pop((key, request.job_id), None)
        if slot is not None:
            K.leave_running(self.table, self.slots, self._rows[key], slot)
            self._free_slots.append(slot)

    # ------------------------------------------------------------------ one user
    def last_end_s(self, user_id: int) -> float | None:
        """When the user's last completed job ended (0.0 before any); None for a user never seen."""
        row = self._rows.get(user_id)
        return None if row is None else float(self.table[row, K.LAST_END_AT])

    def save_user(self, user_id: int) -> UserHistory | None:
        """A copy of the user's state (None: a user never seen), for `restore_user`."""
        row = self._rows.get(user_id)
        if row is None:
            return None
        values = self.table[row].tolist()
        running = {self._slot_job[slot]: (float(self.slots[slot, K.PROCS_AT]),
                                          float(self.slots[slot, K.START_AT]))
                   for slot in self._running_slots(row)}
        return UserHistory(
            n_completed=int(values[K.N_COMPLETED_AT]),
            sum_run_s=values[K.SUM_RUN_AT],
            last_run_s=values[K.LAST_RUN_AT],
            second_last_run_s=values[K.SECOND_LAST_RUN_AT],
            third_last_run_s=values[K.THIRD_LAST_RUN_AT],
            last_end_s=values[K.LAST_END_AT],
            n_submitted=int(values[K.N_SUBMITTED_AT]),
            sum_submitted_procs=values[K.SUM_SUBMITTED_PROCS_AT],
            running=running,
            running_procs=values[K.RUNNING_PROCS_AT],
            running_sum_start_s=values[K.RUNNING_SUM_START_AT],
        )

    def restore_user(self, user_id: int, saved: UserHistory | None) -> None:
        """Put the user back as `save_user` saw it (None: remove the user, never seen): the
        daemon's undo of an event whose transaction failed. Features computed afterwards are bit
        for bit those of the saved moment."""
        row = self._rows.get(user_id)
        if row is not None:
            for slot in self._running_slots(row):
                del self._slot_of[(user_id, self._slot_job[slot])]
                self._free_slots.append(slot)
            if saved is None:
                del self._rows[user_id]
                self._free_rows.append(row)
                return
            self.table[row] = 0.0
            self.table[row, K.HEAD_AT] = self.table[row, K.TAIL_AT] = K.NO_SLOT
        elif saved is None:
            return
        else:
            row = self._row(user_id)
        self._put(user_id, row, saved.running,
                  (saved.n_completed, saved.n_submitted),
                  [getattr(saved, name) for name in _USER_FLOAT_FIELDS])

    def _put(
        self, user_id: int, row: int, running: dict[int, tuple[float, float]],
        counts: tuple[int, int], floats: list[float],
    ) -> None:
        """Write a user's saved values into its (zeroed) row: the running jobs started again in
        their order (which rebuilds the list and the earliest start), then the counts and sums
        as saved (the running sums included: as they were, not as re-added)."""
        for job_id, (procs, start_s) in running.items():
            slot = self._slot_of[(user_id, job_id)] = self._new_slot(job_id)
            K.start_running(self.table, self.slots, row, slot, float(procs), float(start_s))
        values = self.table[row]
        values[K.N_COMPLETED_AT], values[K.N_SUBMITTED_AT] = counts
        for column, value in zip(_USER_FLOAT_COLUMNS, floats):
            values[column] = value

    # ------------------------------------------------------------------ checkpointing
    def to_state(self) -> dict[str, np.ndarray]:
        """Columns of numpy arrays (exact float64/int64 copies) for a checkpoint."""
        rows = list(self._rows.values())
        values = self.table[rows]
        running = []
        for user_id, row in self._rows.items():
            for slot in self._running_slots(row):
                running.append((user_id, self._slot_job[slot], float(self.slots[slot, K.PROCS_AT]),
                                float(self.slots[slot, K.START_AT])))
        return {
            "user_id": np.array(list(self._rows), dtype=np.int64),
            "user_counts": values[:, [K.N_COMPLETED_AT, K.N_SUBMITTED_AT]].astype(np.int64),
            "user_floats": np.ascontiguousarray(values[:, list(_USER_FLOAT_COLUMNS)]),
            "running_ids": np.array([r[:2] for r in running], dtype=np.int64).reshape(-1, 2),
            "running_values": np.array([r[2:] for r in running], dtype=np.float64).reshape(-1, 2),
            "unix_start_s": np.array(self.context.unix_start_s, dtype=np.int64),
            "time_zone": np.array("" if self.context.time_zone is None else self.context.time_zone),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], history_by: str = DEFAULT_HISTORY_BY) -> FeatureState:
        """Inverse of `to_state` (its users are `history_by`'s keys): features computed
        afterwards are bit-for-bit the same."""
        time_zone = str(state["time_zone"])
        feature_state = cls(FeatureContext(int(state["unix_start_s"]), time_zone or None), history_by)
        running: dict[int, dict[int, tuple[float, float]]] = {}
        for (user_id, job_id), (procs, start_s) in zip(
            state["running_ids"].tolist(), state["running_values"].tolist()
        ):
            running.setdefault(user_id, {})[job_id] = (procs, start_s)
        for user_id, counts, floats in zip(
            state["user_id"].tolist(), state["user_counts"].tolist(), state["user_floats"].tolist()
        ):
            row = feature_state._row(user_id)
            feature_state._put(user_id, row, running.get(user_id, {}), tuple(counts), floats)
        return feature_state


def _grown(array: np.ndarray) -> np.ndarray:
    """`array` with twice its rows, the new ones 0 (each is set when first used)."""
    grown = np.zeros((2 * len(array), array.shape[1]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


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
# Their columns of `FeatureState.table`, in the same order (the checkpoint's `user_floats`).
_USER_FLOAT_COLUMNS = (
    K.SUM_RUN_AT,
    K.LAST_RUN_AT,
    K.SECOND_LAST_RUN_AT,
    K.THIRD_LAST_RUN_AT,
    K.LAST_END_AT,
    K.SUM_SUBMITTED_PROCS_AT,
    K.RUNNING_PROCS_AT,
    K.RUNNING_SUM_START_AT,
)
