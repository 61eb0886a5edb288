"""The running profile's table and the compiled operations on it (`profile.RunningProfile`).

Why a table that compiled code owns: the full scheduling pass (`backfill_kernel.schedule_pass`)
reads the running jobs for the processors free now and the head's reservation, and adds the
jobs it starts, in one compiled call; with the running jobs in Python lists of tuples each of
those was Python work per decision and per start (docs/journal/performance-2026-11.md,
"Issue 31, round 3: the scheduling pass compiled").

The table is one int64 array of `PROFILE_ROWS` rows: the running jobs sorted by (predicted end,
job index) in the first `size` columns of END_ROW, JOB_ROW and PROCS_ROW; the sizes in META_ROW
(SIZE, USED, TOTAL: entries, processors held, processors of the machine); and scratch rows for
`postpone`. The sort key (end, job) is unique (one entry per job), so the order is the one
`bisect.insort` of (end, job, procs) tuples gave, whatever order the entries were put in.
Each running job holds at least one processor, and the jobs predicted to end later than now
hold at most the machine; those predicted to end at or before now (their terminations pending
at this instant: the simulation corrects the others first) held at most the machine when they
started. So the entries never exceed twice the machine's size: the table has 2 * total + 4
columns and never grows (`insert` refuses to overflow it).

Only integers are involved: the compiled operations decide exactly what the Python ones they
replace decided (tests/test_running_profile.py checks them against EASY's definitions).
"""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled

END_ROW, JOB_ROW, PROCS_ROW, META_ROW, MOVED_AT_ROW, MOVED_END_ROW, MOVED_JOB_ROW, MOVED_PROCS_ROW = range(8)
PROFILE_ROWS = 8
SIZE, USED, TOTAL = range(3)  # columns of META_ROW
NEVER = -1  # the shadow time of a job that can never run (more processors than the machine)


def new_profile_table(total_procs: int) -> np.ndarray:
    """An empty profile for a machine of `total_procs` processors."""
    table = np.zeros((PROFILE_ROWS, 2 * max(total_procs, 0) + 4), dtype=np.int64)
    table[META_ROW, TOTAL] = total_procs
    return table


@compiled
def position_of(table: np.ndarray, end_s: int, job: int) -> int:  # pragma: no cover - compiled
    """The first position whose (end, job) is not below (end_s, job): bisect_left."""
    ends, jobs = table[END_ROW], table[JOB_ROW]
    low, high = 0, table[META_ROW, SIZE]
    while low < high:
        middle = (low + high) >> 1
        middle_end = ends[middle]
        if middle_end < end_s or (middle_end == end_s and jobs[middle] < job):
            low = middle + 1
        else:
            high = middle
    return low


@compiled
def insert(table: np.ndarray, end_s: int, job: int, procs: int) -> None:  # pragma: no cover - compiled
    """Add a running job at its place in (end, job) order."""
    size = table[META_ROW, SIZE]
    if size == table.shape[1]:
        raise AssertionError("running profile full: more running jobs than twice the machine")
    position = position_of(table, end_s, job)
    for row in (END_ROW, JOB_ROW, PROCS_ROW):
        line = table[row]
        for k in range(size, position, -1):
            line[k] = line[k - 1]
    table[END_ROW, position] = end_s
    table[JOB_ROW, position] = job
    table[PROCS_ROW, position] = procs
    table[META_ROW, SIZE] = size + 1
    table[META_ROW, USED] += procs


@compiled
def delete(table: np.ndarray, end_s: int, job: int) -> int:  # pragma: no cover - compiled
    """Take a running job out (processors still counted as held); returns its processors, or -1
    when no job `job` is predicted to end at `end_s`."""
    size = table[META_ROW, SIZE]
    position = position_of(table, end_s, job)
    if position == size or table[END_ROW, position] != end_s or table[JOB_ROW, position] != job:
        return -1
    procs = table[PROCS_ROW, position]
    for row in (END_ROW, JOB_ROW, PROCS_ROW):
        line = table[row]
        for k in range(position, size - 1):
            line[k] = line[k + 1]
    table[META_ROW, SIZE] = size - 1
    return procs


@compiled
def remove(table: np.ndarray, end_s: int, job: int) -> int:  # pragma: no cover - compiled
    """A running job ended: `delete` and give its processors back; -1 if it is not there."""
    procs = delete(table, end_s, job)
    if procs >= 0:
        table[META_ROW, USED] -= procs
    return procs


@compiled
def move(table: np.ndarray, job: int, old_end_s: int, new_end_s: int) -> bool:  # pragma: no cover - compiled
    """A job's predicted end moved; False if it is not running with end `old_end_s`."""
    procs = delete(table, old_end_s, job)
    if procs < 0:
        return False
    table[META_ROW, USED] -= procs  # insert adds them again
    insert(table, new_end_s, job, procs)
    return True


@compiled
def postpone(table: np.ndarray, count: int) -> None:  # pragma: no cover - compiled
    """Move `count` jobs given by position: MOVED_AT_ROW holds their positions (increasing),
    MOVED_END_ROW their new ends. The entries are taken out in one compaction, then put back in
    order (the result is what moving them one by one gives: the order is unique)."""
    size = table[META_ROW, SIZE]
    at, new_ends = table[MOVED_AT_ROW], table[MOVED_END_ROW]
    moved_jobs, moved_procs = table[MOVED_JOB_ROW], table[MOVED_PROCS_ROW]
    ends, jobs, procs = table[END_ROW], table[JOB_ROW], table[PROCS_ROW]
    kept = at[0]
    next_moved = 0
    for position in range(at[0], size):
        if next_moved < count and position == at[next_moved]:
            moved_jobs[next_moved] = jobs[position]
            moved_procs[next_moved] = procs[position]
            next_moved += 1
            continue
        ends[kept], jobs[kept], procs[kept] = ends[position], jobs[position], procs[position]
        kept += 1
    table[META_ROW, SIZE] = kept
    table[META_ROW, USED] -= moved_procs[:count].sum()
    for k in range(count):
        insert(table, new_ends[k], moved_jobs[k], moved_procs[k])


@compiled
def free_now(table: np.ndarray, now_s: int) -> int:  # pragma: no cover - compiled
    """Processors free for a start at `now_s` (jobs predicted to end now count as free)."""
    free = table[META_ROW, TOTAL] - table[META_ROW, USED]
    ends, procs = table[END_ROW], table[PROCS_ROW]
    for position in range(table[META_ROW, SIZE]):
        if ends[position] > now_s:
            break
        free += procs[position]
    return free


@compiled
def reservation(table: np.ndarray, needed_procs: int, now_s: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """EASY's reservation for a job needing `needed_procs` that does not fit now: (shadow time,
    extra processors), the earliest predicted end still to come after which enough processors
    are free, and how many are left over once every job ending at that instant has given its
    processors back (the reference's time slices count them all). (NEVER, 0) when the job needs
    more than the machine.

    Two scans with the same answer: forward from the first predicted end, or, when the job needs
    more than half of the busy processors, back from the last one (free processors after the
    k-th end are the total minus what the later jobs hold): on CEA-Curie the waiting head is
    often nearly machine-wide, and the forward scan read ~120 of ~130 running jobs per
    reservation where the backward one reads the ~10 others.
    """
    total, used, size = table[META_ROW, TOTAL], table[META_ROW, USED], table[META_ROW, SIZE]
    if needed_procs > total:
        return NEVER, 0
    ends, procs = table[END_ROW], table[PROCS_ROW]
    free = total - used
    if 2 * (needed_procs - free) > used:
        slack = total - needed_procs  # fits after k  <=>  held after k <= slack
        held_after = 0
        position = size - 1
        while position > 0:
            if held_after + procs[position] > slack:
                break
            held_after += procs[position]
            position -= 1
        # The job fits after `position` and not before it; its shadow time is the first end
        # from there that is still to come.
        free = total - held_after
        while ends[position] <= now_s:
            position += 1
            if position == size:
                return NEVER, 0
            free += procs[position]
        position += 1
    else:
        position = 0
        while True:
            if position == size:
                return NEVER, 0
            free += procs[position]
            position += 1
            if free >= needed_procs and ends[position - 1] > now_s:
                break
    shadow_s = ends[position - 1]
    extra = free - needed_procs
    while position < size and ends[position] == shadow_s:  # the rest of the shadow's instant
        extra += procs[position]
        position += 1
    return shadow_s, extra
