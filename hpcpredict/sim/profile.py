"""The running jobs as the scheduler sees them: processors held until each job's *predicted* end.

Backfilling plans with predicted ends, not true ones: a job occupies its processors from its
start until start + current prediction in the plan, and until it really ends on the machine.
The two differ only at one instant: a job whose predicted end is exactly now and whose
termination event has not been processed yet (same-instant order: prediction-over, submission,
termination; docs/method.md §10). The reference's CPU snapshot already counts such processors as free
at that instant, so `free_now` does too; a job whose predicted end is past but which is still
running never exists here when a decision reads the profile, because the simulation corrects
it first (`ending_by` finds such jobs before each event).

Invariant (checked by the tests): 0 <= used <= total, and `used` is the sum of the processors of
the jobs in the profile.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class RunningProfile:
    """Running jobs ordered by predicted end; O(log n) search, O(n) memmove insert/remove."""

    __slots__ = ("total_procs", "used_procs", "_by_end", "_procs")

    def __init__(self, total_procs: int) -> None:
        self.total_procs = total_procs
        self.used_procs = 0
        # (predicted_end_s, job index, procs), sorted; procs rides along so that the scans of
        # free_now and reservation (the hot loops of a replay) need no dict lookup.
        self._by_end: list[tuple[int, int, int]] = []
        self._procs: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._by_end)

    def add(
        self, job: int, now_s: int, predicted_end_s: int, procs: int, *, checked: bool = True
    ) -> None:
        """Start `job` at `now_s`; it must fit in what is free now (never over-allocate).

        `checked=False` is for a second view of the same running jobs (the starvation guard's,
        by requested end): there a job whose termination is pending at `now_s` still looks busy,
        and the first view has already checked the allocation.
        """
        # (free_now only when the processors not held do not suffice: it can only add to them)
        if checked and procs > self.total_procs - self.used_procs:
            free = self.free_now(now_s)
            if procs > free:
                raise AssertionError(f"over-allocation at {now_s}: job {job} needs {procs}, {free} free")
        insort(self._by_end, (predicted_end_s, job, procs))
        self._procs[job] = procs
        self.used_procs += procs

    def remove(self, job: int, predicted_end_s: int) -> None:
        self._delete(job, predicted_end_s)
        self.used_procs -= self._procs.pop(job)

    def move(self, job: int, old_end_s: int, new_end_s: int) -> None:
        """A correction pushed the job's predicted end later."""
        self._delete(job, old_end_s)
        insort(self._by_end, (new_end_s, job, self._procs[job]))

    def postpone(self, moves: list[tuple[int, int]]) -> None:
        """Move jobs to new predicted ends: `moves` holds (position, new end) by increasing
        position, positions in the order `ending_by` lists the jobs (the first entries).

        The corrections before an event (`Simulation._correct_until`, 486 k job corrections on
        a SDSC-BLUE learned replay) know where their jobs are: each entry is taken out by its
        position, with no search (`move` bisects for it), then put back in order. The result
        is what `move` job by job gives (entries are distinct: one per job).
        """
        by_end = self._by_end
        if len(moves) == 1:
            position, new_end_s = moves[0]
            _, job, procs = by_end.pop(position)
            insort(by_end, (new_end_s, job, procs))
            return
        moved = []
        for position, new_end_s in reversed(moves):  # from the back: positions stay valid
            _, job, procs = by_end.pop(position)
            moved.append((new_end_s, job, procs))
        for entry in moved:
            insort(by_end, entry)

    def _delete(self, job: int, predicted_end_s: int) -> None:
        by_end = self._by_end
        entry = (predicted_end_s, job, self._procs.get(job, -1))
        position = bisect_left(by_end, entry)
        if position == len(by_end) or by_end[position] != entry:
            raise KeyError(f"job {job} with predicted end {predicted_end_s} is not running")
        del by_end[position]

    def ends(self) -> list[tuple[int, int]]:
        """(predicted end, processors) of every running job, by predicted end."""
        return [(end_s, procs) for end_s, _, procs in self._by_end]

    def ends_by(self, now_s: int) -> bool:
        """Is some running job predicted to end at or before `now_s` (its termination pending)?"""
        return bool(self._by_end) and self._by_end[0][0] <= now_s

    def ending_by(self, now_s: int) -> list[tuple[int, int]]:
        """(predicted end, job) of every running job predicted to end at or before `now_s`, by
        predicted end then job: those past their prediction, and those ending now."""
        ending = []
        for end_s, job, _ in self._by_end:
            if end_s > now_s:
                break
            ending.append((end_s, job))
        return ending

    def free_now(self, now_s: int) -> int:
        """Processors free for a start at `now_s` (jobs predicted to end now count as free)."""
        free = self.total_procs - self.used_procs
        for end_s, _, procs in self._by_end:
            if end_s > now_s:
                break
            free += procs
        return free

    def reservation(self, needed_procs: int, now_s: int) -> tuple[int, int]:
        """EASY's reservation for a job needing `needed_procs` that does not fit now.

        Returns (shadow time, extra processors): the earliest predicted time at which enough
        processors are free, and how many are left over then. All jobs ending at the shadow time
        count, not only the one that first makes room (the reference's time slices do the same).
        """
        free = self.total_procs - self.used_procs
        by_end = self._by_end
        if 2 * (needed_procs - free) > self.used_procs:
            return self._reservation_from_the_end(needed_procs, now_s)
        # Two plain loops (find the shadow time, then take the rest of its instant) instead of
        # one loop with a branch per job.
        taken = 0
        for end_s, _, procs in by_end:
            free += procs
            taken += 1
            if free >= needed_procs and end_s > now_s:
                break
        else:
            raise AssertionError(
                f"a job of {needed_procs} processors can never run on {self.total_procs}"
            )
        return self._rest_of_instant(end_s, taken, free - needed_procs)

    def _reservation_from_the_end(self, needed_procs: int, now_s: int) -> tuple[int, int]:
        """`reservation` for a job that needs more than half of the busy processors.

        Free processors after the k-th predicted end are the total minus what the later jobs
        hold, so the first k where the job fits is found by walking back from the last end while
        the later jobs leave room. On CEA-Curie the waiting head is often nearly machine-wide:
        the forward scan read ~120 of ~130 running jobs per reservation (the hottest loop of a
        replay); this walk reads the ~10 others.
        """
        by_end = self._by_end
        slack = self.total_procs - needed_procs  # fits after k  <=>  held after k <= slack
        held_after = 0
        position = len(by_end) - 1
        while position > 0:
            procs = by_end[position][2]
            if held_after + procs > slack:
                break
            held_after += procs
            position -= 1
        # The job fits after `position` and not before it (at `position` = 0, nothing has ended:
        # it does not fit now, or reservation would not be asked). Its shadow time is the first
        # end from there that is still to come.
        free = self.total_procs - held_after
        end_s = by_end[position][0]
        while end_s <= now_s:
            position += 1
            if position == len(by_end):
                raise AssertionError(
                    f"a job of {needed_procs} processors can never run on {self.total_procs}"
                )
            end_s, _, procs = by_end[position]
            free += procs
        return self._rest_of_instant(end_s, position + 1, free - needed_procs)

    def _rest_of_instant(self, shadow_s: int, start: int, extra: int) -> tuple[int, int]:
        """(shadow, extra) once every job predicted to end at the shadow time, from the entry
        `start` on, has given its processors back too."""
        by_end = self._by_end
        for position in range(start, len(by_end)):
            end_s, _, procs = by_end[position]
            if end_s != shadow_s:
                break
            extra += procs
        return shadow_s, extra
