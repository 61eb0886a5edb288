"""The running jobs as the scheduler sees them: processors held until each job's *predicted* end.

Backfilling plans with predicted ends, not true ones: a job occupies its processors from its
start until start + current prediction in the plan, and until it really ends on the machine.
The two differ only at one instant: a job whose predicted end is exactly now and whose
termination event has not been processed yet (same-instant order: prediction-over, submission,
termination; docs/method.md §10). The reference's CPU snapshot already counts such processors as free
at that instant, so `free_now` does too; a job whose predicted end is past but which is still
running never exists here when a decision reads the profile, because the simulation corrects
it first (`ending_by` finds such jobs before each event).

The jobs live in a sorted int64 table that compiled code owns (`profile_kernel`): the full
scheduling pass reads and extends it in one compiled call (`backfill_kernel.schedule_pass`);
this class is the Python side, for the simulation's event handlers and other users (the SLURM
model). Python reads the table through memoryviews of its rows (a read costs about half a numpy
item read); every change goes through a compiled operation.

Invariant (checked by the tests): 0 <= used <= total, and `used` is the sum of the processors of
the jobs in the profile.
"""

from __future__ import annotations

from hpcpredict.sim.engine import profile_kernel as kernel
from hpcpredict.sim.engine.profile_kernel import (
    END_ROW,
    JOB_ROW,
    META_ROW,
    MOVED_AT_ROW,
    MOVED_END_ROW,
    NEVER,
    PROCS_ROW,
    SIZE,
    TOTAL,
    USED,
)

_VIEWS = {"_ends": END_ROW, "_jobs": JOB_ROW, "_procs": PROCS_ROW, "_meta": META_ROW,
          "_moved_at": MOVED_AT_ROW, "_moved_end": MOVED_END_ROW}


class RunningProfile:
    """Running jobs ordered by (predicted end, job); O(log n) search, O(n) shift insert/remove."""

    __slots__ = ("table", *_VIEWS)

    def __init__(self, total_procs: int) -> None:
        self.table = kernel.new_profile_table(total_procs)
        self._bind()

    def _bind(self) -> None:
        for name, row in _VIEWS.items():
            setattr(self, name, memoryview(self.table[row]))

    def __getstate__(self) -> dict[str, object]:
        """Memoryviews do not pickle: a copy binds its views to its own table again."""
        return {"table": self.table}

    def __setstate__(self, saved: dict[str, object]) -> None:
        self.table = saved["table"]
        self._bind()

    @property
    def total_procs(self) -> int:
        return self._meta[TOTAL]

    @property
    def used_procs(self) -> int:
        return self._meta[USED]

    def __len__(self) -> int:
        return self._meta[SIZE]

    def add(
        self, job: int, now_s: int, predicted_end_s: int, procs: int, *, checked: bool = True
    ) -> None:
        """Start `job` at `now_s`; it must fit in what is free now (never over-allocate).

        `checked=False` is for a second view of the same running jobs (the starvation guard's,
        by requested end): there a job whose termination is pending at `now_s` still looks busy,
        and the first view has already checked the allocation.
        """
        if procs < 1:
            raise ValueError(f"job {job} holds {procs} processors: a running job holds at least 1")
        # (free_now only when the processors not held do not suffice: it can only add to them)
        meta = self._meta
        if checked and procs > meta[TOTAL] - meta[USED]:
            free = self.free_now(now_s)
            if procs > free:
                raise AssertionError(f"over-allocation at {now_s}: job {job} needs {procs}, {free} free")
        kernel.insert(self.table, predicted_end_s, job, procs)

    def remove(self, job: int, predicted_end_s: int) -> None:
        if kernel.remove(self.table, predicted_end_s, job) < 0:
            raise KeyError(f"job {job} with predicted end {predicted_end_s} is not running")

    def move(self, job: int, old_end_s: int, new_end_s: int) -> None:
        """A correction pushed the job's predicted end later."""
        if not kernel.move(self.table, job, old_end_s, new_end_s):
            raise KeyError(f"job {job} with predicted end {old_end_s} is not running")

    def postpone(self, moves: list[tuple[int, int]]) -> None:
        """Move jobs to new predicted ends: `moves` holds (position, new end) by increasing
        position, positions in the order `ending_by` lists the jobs (the first entries).

        The corrections before an event (`Simulation._correct_until`, 486 k job corrections on
        a SDSC-BLUE learned replay) know where their jobs are: each entry is taken out by its
        position, with no search. The result is what `move` job by job gives.
        """
        at, new_end = self._moved_at, self._moved_end
        for k, (position, new_end_s) in enumerate(moves):
            at[k] = position
            new_end[k] = new_end_s
        kernel.postpone(self.table, len(moves))

    def ends(self) -> list[tuple[int, int]]:
        """(predicted end, processors) of every running job, by predicted end."""
        size = self._meta[SIZE]
        return list(zip(self._ends[:size].tolist(), self._procs[:size].tolist()))

    def ends_by(self, now_s: int) -> bool:
        """Is some running job predicted to end at or before `now_s` (its termination pending)?"""
        return self._meta[SIZE] > 0 and self._ends[0] <= now_s

    def ending_by(self, now_s: int) -> list[tuple[int, int]]:
        """(predicted end, job) of every running job predicted to end at or before `now_s`, by
        predicted end then job: those past their prediction, and those ending now."""
        ends, jobs = self._ends, self._jobs
        ending = []
        for position in range(self._meta[SIZE]):
            end_s = ends[position]
            if end_s > now_s:
                break
            ending.append((end_s, jobs[position]))
        return ending

    def free_now(self, now_s: int) -> int:
        """Processors free for a start at `now_s` (jobs predicted to end now count as free)."""
        return kernel.free_now(self.table, now_s)

    def reservation(self, needed_procs: int, now_s: int) -> tuple[int, int]:
        """EASY's reservation for a job needing `needed_procs` that does not fit now.

        Returns (shadow time, extra processors): the earliest predicted time at which enough
        processors are free, and how many are left over then. All jobs ending at the shadow time
        count, not only the one that first makes room (the reference's time slices do the same).
        """
        shadow_s, extra = kernel.reservation(self.table, needed_procs, now_s)
        if shadow_s == NEVER:
            raise never_fits(needed_procs, self.total_procs)
        return shadow_s, extra


def never_fits(needed_procs: int, total_procs: int) -> AssertionError:
    """The error for a reservation no machine state can give."""
    return AssertionError(f"a job of {needed_procs} processors can never run on {total_procs}")
