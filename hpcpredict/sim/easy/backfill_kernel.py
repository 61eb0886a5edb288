"""The EASY / EASY-SJBF scheduling pass (`schedulers.Scheduler.schedule`) as compiled loops.

Why compiled: a backfilling pass visits the whole waiting queue at every scheduling decision
(hundreds to thousands of jobs on SDSC-BLUE and CEA-Curie), and as numpy calls or a Python loop
each pass cost tens of microseconds of interpreter and call overhead; this loop reads the
waiting queue's arrays directly (figures: docs/journal/performance-2026-11.md, "Issue 13's three
steps").

The rule is EASY's (schedulers.py's module doc): a waiting job other than the head may start now
if it fits in the free processors and either ends, by its duration, by the shadow time or fits in
the extra processors left at the shadow time. Starting a job only lowers the free and extra
processors, so a job that is not eligible stays so for the rest of the pass, and "start the
first eligible job in backfilling order, repeat" is one pass in backfilling order re-checking
each job against what is left. Backfilling order is submission order (the candidates' order),
or for EASY-SJBF increasing `sjbf_key`, (prediction << 32) | index: shortest prediction first,
submission order among equals.

Only integers are involved, so the compiled pass decides exactly what the Python rule decides
(tests/test_backfill_kernel.py checks it against a direct transcription of the rule).
"""

from __future__ import annotations

import numpy as np
from hpcpredict.compiled import compiled
from hpcpredict.sim.engine.profile_kernel import NEVER, free_now, insert, remove, reservation


_JOB_MASK = (1 << 32) - 1  # sjbf_key's low half: the job index


# Rows of the waiting queue's table (`schedulers.WaitingQueue.table`: one int64 column per job
# index). numba's dispatch costs ~0.2 us per array argument, and the pass runs at every
# decision: one 2-D table instead of six 1-D arrays (docs/journal/performance-2026-11.md,
# "Issue 13, item 5: the learner's glue and numba's dispatch").
# GUARD_DUE_ROW: when the starvation guard falls due for each job; PROMISED_ROW: 1 once the
# "promise" rule has fixed it; STARTED_ROW: the jobs a `schedule_pass` started, in start order;
# CANDIDATES_ROW: the waiting queue's list of candidates (job indices; each job is added once,
# so the list never outgrows the row); ESTIMATE_ROW and ESTIMATE_DUE_ROW, the guard's slack
# stage (`GuardSettings.slack_s`): what a candidate in front of a head in
# that stage is judged on and planned to, and when the stage falls due.
(PROCS_ROW, PREDICTION_ROW, REQUESTED_ROW, SJBF_KEY_ROW, WAITING_ROW, WORK_ROW, GUARD_DUE_ROW,
 PROMISED_ROW, STARTED_ROW, CANDIDATES_ROW, ESTIMATE_ROW, ESTIMATE_DUE_ROW) = range(12)
QUEUE_ROWS = 12
# A head's guard stage (`schedule_pass`'s last answer, `schedulers.Reservation.guarded`): none;
# the guard (requests, plain EASY's rule); the slack stage before it (estimates in front).
UNGUARDED, GUARDED, ESTIMATED = range(3)
_FULL_SORT_ABOVE = 32  # unsorted candidates beyond which `order_by_key` sorts the whole list
# Backfilling orders as `schedule_pass` takes them (`Scheduler.backfill_order`).
NO_BACKFILLING, SUBMISSION_ORDER, SHORTEST_FIRST = range(3)
ENDED_NOT_RUNNING = -1  # `schedule_pass`'s answer when the job said to have ended was not running
# How the guard's slack stage plans the jobs started in it (`Scheduler.estimate_planning`):
# none (no stage); or at their estimate in both profiles, as the one time limit the live daemon
# gives them, where a job started from the head while it was itself in the stage (waited from
# its ESTIMATE_DUE_ROW, the guard not due) is planned at its estimate too, as its pending limit
# had been lowered to it.
NO_ESTIMATES, ESTIMATES_AS_LIMITS = range(2)


@compiled
def judged_row(stage: int) -> int:  # pragma: no cover - compiled
    """The row a candidate's "ends by the shadow time" is judged on when the head is in guard
    `stage`: its prediction, its request (GUARDED) or its estimate (ESTIMATED)."""
    if stage == GUARDED:
        return REQUESTED_ROW
    if stage == ESTIMATED:
        return ESTIMATE_ROW
    return PREDICTION_ROW


@compiled
def guard_planned_row(stage: int) -> int:  # pragma: no cover - compiled
    """The row a job started in front of a head in guard `stage` is planned to in the guard's
    profile: its estimate in the estimate stage, else its request."""
    return ESTIMATE_ROW if stage == ESTIMATED else REQUESTED_ROW


@compiled
def in_estimate_stage(table: np.ndarray, job: int, now_s: int) -> bool:  # pragma: no cover - compiled
    """Is `job` itself in the guard's estimate stage at `now_s` (waited from its
    ESTIMATE_DUE_ROW on, the guard not yet due for it)?"""
    return table[ESTIMATE_DUE_ROW, job] <= now_s < table[GUARD_DUE_ROW, job]


@compiled
def order_by_key(table: np.ndarray, size: int, sorted_size: int) -> None:  # pragma: no cover - compiled
    """Put the first `size` candidates in increasing `sjbf_key` order, the first `sorted_size`
    of them being in that order already (the list kept from the last pass; new submissions are
    appended behind it). A few new ones are inserted, each by a backward walk; many (after a
    compaction or aging reset the order) are sorted with the rest, keys in the scratch row."""
    candidates = table[CANDIDATES_ROW]
    sjbf_key = table[SJBF_KEY_ROW]
    if size - sorted_size > _FULL_SORT_ABOVE:
        work = table[WORK_ROW]
        for position in range(size):
            work[position] = sjbf_key[candidates[position]]
        work[:size].sort()
        for position in range(size):
            candidates[position] = work[position] & _JOB_MASK
        return
    for position in range(sorted_size, size):
        job = candidates[position]
        key = sjbf_key[job]
        place = position
        while place > 0 and sjbf_key[candidates[place - 1]] > key:
            candidates[place] = candidates[place - 1]
            place -= 1
        candidates[place] = job


@compiled
def backfill_pass(
    table: np.ndarray,
    size: int,
    sorted_size: int,
    duration_row: int,
    head: int,
    free: int,
    horizon_s: int,
    extra: int,
    shortest_first: bool,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Backfill around the head's reservation.

    `table`: per job index, the rows named by the *_ROW constants (processors, prediction,
    request, SJBF key, waiting 1 / 0, scratch space, ..., the candidates); `duration_row` is
    the row that "ends by the shadow time" is judged on (`judged_row`), and a job ends by the
    shadow time when its duration is at most `horizon_s` (shadow - now). The first `size` entries of the candidate row are job indices,
    stale (no longer waiting) ones included, in submission order, or for SJBF
    (`shortest_first`) with the first `sorted_size` in key order and the rest (new ones) in
    submission order: the pass puts them in backfilling order first (`order_by_key`), then
    reads them in that order, starting each job that is eligible against what the jobs started
    before it left. It reads every entry anyway, so it also drops the stale ones, moving the
    waiting ones to the front in the same order (a separate compaction cost one numpy pass and
    its own call, ~3% of a learned replay); for SJBF the list is left in key order, so the next
    pass only places the jobs submitted since, instead of sorting the eligible jobs at every
    pass (CEA-Curie under EASY++, ~350 candidates: docs/journal/performance-2026-11.md, "Issue 31,
    round 3: the scheduling pass compiled").
    Returns (how many jobs to start, extra processors left at the shadow time, how many
    candidates were waiting: the row's first `kept` after the call); the jobs to start, in start
    order, are `table[WORK_ROW, :count]` (the scratch row is as long as the table, so that a
    pass allocates nothing).
    """
    if shortest_first:
        order_by_key(table, size, sorted_size)
    candidates = table[CANDIDATES_ROW]
    procs = table[PROCS_ROW]
    durations = table[duration_row]
    is_waiting = table[WAITING_ROW]
    work = table[WORK_ROW]
    # The waiting candidates are written back over the list as it is read (kept <= position),
    # the jobs started into the scratch row. Starting a job only lowers the free and extra
    # processors, so a job found ineligible stays so: one pass in backfilling order decides
    # what "start the first eligible job, repeat" decides (the module's docstring).
    kept = 0
    count = 0
    for position in range(size):
        job = candidates[position]
        if is_waiting[job] == 0:
            continue
        candidates[kept] = job
        kept += 1
        need = procs[job]
        if job != head and need <= free:
            ends = durations[job] <= horizon_s
            if ends or need <= extra:
                work[count] = job
                count += 1
                free -= need
                if not ends:
                    extra -= need
    return count, extra, kept


@compiled
def schedule_pass(
    table: np.ndarray,
    candidate_count: int,
    sorted_count: int,
    profile: np.ndarray,
    by_request: np.ndarray,
    now_s: int,
    head: int,
    waiting_count: int,
    order: int,
    guard: bool,
    promise_rule: bool,
    estimates: int,
    ended_job: int,
    ended_end_s: int,
    ended_request_end_s: int,
) -> tuple[int, int, int, int, int, int, int, int]:  # pragma: no cover - compiled
    """EASY's full scheduling pass at `now_s` (`schedulers.Scheduler.schedule`, whose docstring
    says what it decides), in one compiled call: start the waiting jobs from the head while they
    fit, fix the head's reservation, backfill around it.

    `table` is the waiting queue's (`schedulers.WaitingQueue`), `candidate_count` the length of
    its candidate list, of which the first `sorted_count` in key order (`backfill_pass`), `head`
    its head cursor (at or below the oldest waiting job) and `waiting_count` how many
    jobs wait; `profile` the running jobs by predicted end and `by_request` by requested end
    (`profile_kernel` tables; read and extended only when `guard`: the starvation guard is on,
    its rule "promise" when `promise_rule`, with its estimate stage unless `estimates` is
    NO_ESTIMATES: before the guard falls due for the head, from its ESTIMATE_DUE_ROW on, the
    head's reservation is on the guard's profile and candidates are judged on, and planned in
    both profiles to, their ESTIMATE_ROW, as is a job started from the head in its own stage,
    and their PREDICTION_ROW says so);
    `order` one of NO_BACKFILLING, SUBMISSION_ORDER, SHORTEST_FIRST. Every job started leaves the waiting row and enters the running profiles,
    and is listed in `table[STARTED_ROW]`, in start order. `ended_job` (-1: none) is a job that
    ended at `now_s`, with its predicted and requested ends: taken out of the running profiles
    first (a termination's pass, one call for both).

    Returns (head cursor, jobs started, of which from the head, candidates kept (-1: the pass
    did not read them), 1 if there is a reservation (ENDED_NOT_RUNNING: `ended_job` was not
    running with those ends, nothing done), its shadow time (NEVER: the head can never run),
    its extra processors, the head's guard stage: UNGUARDED, GUARDED or ESTIMATED).
    """
    if ended_job >= 0:
        if remove(profile, ended_end_s, ended_job) < 0 or (
            guard and remove(by_request, ended_request_end_s, ended_job) < 0
        ):
            return head, 0, 0, -1, ENDED_NOT_RUNNING, 0, 0, 0
    procs = table[PROCS_ROW]
    predictions = table[PREDICTION_ROW]
    requests = table[REQUESTED_ROW]
    is_waiting = table[WAITING_ROW]
    started = table[STARTED_ROW]
    free = free_now(profile, now_s)
    count = 0
    while waiting_count > 0:
        while is_waiting[head] == 0:
            head += 1
        need = procs[head]
        if need > free:
            break
        free -= need
        started[count] = head
        count += 1
        waiting_count -= 1
        is_waiting[head] = 0
        guard_end_s = now_s + requests[head]
        if estimates == ESTIMATES_AS_LIMITS and in_estimate_stage(table, head, now_s):
            predictions[head] = table[ESTIMATE_ROW, head]
            guard_end_s = now_s + predictions[head]
        insert(profile, now_s + predictions[head], head, need)
        if guard:
            insert(by_request, guard_end_s, head, need)
    from_head = count
    if order == NO_BACKFILLING or waiting_count == 0:
        return head, count, from_head, -1, 0, 0, 0, 0
    while is_waiting[head] == 0:
        head += 1
    need = procs[head]
    stage = UNGUARDED
    if guard:
        if promise_rule and table[PROMISED_ROW, head] == 0:
            # The "promise" rule fixes when the guard falls due the first time a job is the
            # head: at plain EASY's promise (its shadow time on the requested ends, which
            # cannot slide), unless its wait reaches the guard's bound first.
            table[PROMISED_ROW, head] = 1
            promise_s = reservation(by_request, need, now_s)[0]
            if promise_s == NEVER:
                return head, count, from_head, -1, 1, NEVER, 0, 0
            if promise_s < table[GUARD_DUE_ROW, head]:
                table[GUARD_DUE_ROW, head] = promise_s
        if now_s >= table[GUARD_DUE_ROW, head]:
            stage = GUARDED
        elif estimates != NO_ESTIMATES and now_s >= table[ESTIMATE_DUE_ROW, head]:
            stage = ESTIMATED
    shadow_s, extra = reservation(profile if stage == UNGUARDED else by_request, need, now_s)
    kept = -1
    if shadow_s != NEVER and waiting_count > 1 and free > 0:
        backfilled, extra, kept = backfill_pass(
            table, candidate_count, sorted_count, judged_row(stage),
            head, free, shadow_s - now_s, extra, order == SHORTEST_FIRST,
        )
        work = table[WORK_ROW]
        for position in range(backfilled):
            job = work[position]
            need = procs[job]
            started[count] = job
            count += 1
            is_waiting[job] = 0
            if estimates == ESTIMATES_AS_LIMITS and stage == ESTIMATED:
                predictions[job] = table[ESTIMATE_ROW, job]
            insert(profile, now_s + predictions[job], job, need)
            if guard:
                insert(by_request, now_s + table[guard_planned_row(stage), job], job, need)
    return head, count, from_head, kept, 1, shadow_s, extra, stage


@compiled
def consider_new_job_pass(
    table: np.ndarray,
    profile: np.ndarray,
    by_request: np.ndarray,
    now_s: int,
    job: int,
    shadow_s: int,
    extra: int,
    stage: int,
    guard: bool,
    estimates: int,
) -> tuple[bool, int]:  # pragma: no cover - compiled
    """`schedulers.Scheduler.consider_new_job`'s decision for a new submission `job` when only it
    changed since the last decision (the head's reservation `shadow_s`, `extra` and guard
    `stage` still hold), in one compiled call: it starts if it fits now and ends by the shadow
    time (by its request when the head is GUARDED, its estimate when ESTIMATED) or fits in the
    extra processors. A job started leaves the waiting row and enters the running profiles
    (`by_request` too when `guard`; at its estimate in both when the head is ESTIMATED and
    `estimates` is ESTIMATES_AS_LIMITS, as `schedule_pass` plans it). Returns (started?, extra
    processors left).
    """
    need = table[PROCS_ROW, job]
    if need > free_now(profile, now_s):
        return False, extra
    if now_s + table[judged_row(stage), job] > shadow_s:
        if need > extra:
            return False, extra
        extra -= need
    table[WAITING_ROW, job] = 0
    if estimates == ESTIMATES_AS_LIMITS and stage == ESTIMATED:
        table[PREDICTION_ROW, job] = table[ESTIMATE_ROW, job]
    insert(profile, now_s + table[PREDICTION_ROW, job], job, need)
    if guard:
        insert(by_request, now_s + table[guard_planned_row(stage), job], job, need)
    return True, extra
