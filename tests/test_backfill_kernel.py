"""The compiled backfilling pass against EASY's rule written out slowly in Python.

The reference is the rule as docs/method.md §7 states it, with no shortcut: among the waiting
jobs other than the head, in backfilling order, start the first one that fits now and either
ends by the shadow time or fits in the extra processors; take what it uses; repeat until none
is eligible. The kernel's one pass must start the same jobs in the same order and leave the
same extra processors, on queues with stale entries, ties in prediction, guarded durations and
a head inside the candidates.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.sim.easy.backfill_kernel import (
    CANDIDATES_ROW,
    PREDICTION_ROW,
    PROCS_ROW,
    QUEUE_ROWS,
    REQUESTED_ROW,
    SJBF_KEY_ROW,
    WAITING_ROW,
    WORK_ROW,
    backfill_pass,
)


def slow_backfill(
    candidates: list[int],
    procs: list[int],
    durations: list[int],
    predictions: list[int],
    waiting: list[bool],
    head: int,
    free: int,
    horizon_s: int,
    extra: int,
    shortest_first: bool,
) -> tuple[list[int], int]:
    """EASY's backfilling rule, one start at a time (O(n²)); returns (started, extra left)."""
    queue = [job for job in candidates if waiting[job] and job != head]
    if shortest_first:
        queue.sort(key=lambda job: (predictions[job], job))  # stable: submission order on ties
    started: list[int] = []
    while True:
        for job in queue:
            ends = durations[job] <= horizon_s
            if procs[job] <= free and (ends or procs[job] <= extra):
                break
        else:
            return started, extra
        queue.remove(job)
        started.append(job)
        free -= procs[job]
        if not ends:
            extra -= procs[job]


@st.composite
def passes(draw):
    """A waiting queue as the simulator keeps it, and a reservation around its head."""
    jobs = draw(st.integers(1, 40))
    machine = draw(st.integers(1, 64))
    procs = draw(st.lists(st.integers(1, machine), min_size=jobs, max_size=jobs))
    # Few distinct values, so ties (same prediction, same duration as the horizon) are common.
    predictions = draw(st.lists(st.integers(1, 12), min_size=jobs, max_size=jobs))
    guarded = draw(st.booleans())
    requested = [prediction + draw(st.integers(0, 6)) for prediction in predictions]
    # Candidates: an increasing run of job indices, some of them no longer waiting (stale).
    candidates = sorted(draw(st.sets(st.integers(0, jobs - 1), min_size=1)))
    waiting = [False] * jobs
    for job in candidates:
        waiting[job] = draw(st.booleans())
    head = draw(st.sampled_from(candidates))
    waiting[head] = True
    free = draw(st.integers(0, machine))
    extra = draw(st.integers(0, machine))
    horizon_s = draw(st.integers(0, 15))
    shortest_first = draw(st.booleans())
    # How many candidates the last pass left in key order (the rest came since, behind them).
    sorted_size = draw(st.integers(0, len(candidates)))
    return (candidates, procs, requested if guarded else predictions, predictions, waiting,
            head, free, horizon_s, extra, shortest_first, sorted_size)


def compiled_backfill(candidates, procs, durations, predictions, waiting, head, free, horizon_s,
                      extra, shortest_first, sorted_size=0):
    """The kernel on the table WaitingQueue keeps (sjbf_key = prediction << 32 | index); the
    durations go in the request row, as the starvation guard's do. For SJBF the first
    `sorted_size` candidates are given in key order, as a previous pass leaves them."""
    size = len(procs)
    table = np.full((QUEUE_ROWS, size), -1, dtype=np.int64)
    table[PROCS_ROW] = procs
    table[PREDICTION_ROW] = predictions
    table[REQUESTED_ROW] = durations
    table[SJBF_KEY_ROW] = (np.asarray(predictions, dtype=np.int64) << 32) | np.arange(size)
    table[WAITING_ROW] = waiting
    by_key = lambda job: (predictions[job], job)  # noqa: E731
    listed = list(candidates)
    if shortest_first:
        listed[:sorted_size] = sorted(listed[:sorted_size], key=by_key)
    table[CANDIDATES_ROW, : len(listed)] = listed
    count, extra_left, kept = backfill_pass(
        table, len(listed), sorted_size if shortest_first else 0, REQUESTED_ROW, head, free,
        horizon_s, extra, shortest_first,
    )
    # The pass also drops the stale candidates, keeping the others in backfilling order.
    still_waiting = [job for job in candidates if waiting[job]]
    if shortest_first:
        still_waiting.sort(key=by_key)
    assert table[CANDIDATES_ROW, :kept].tolist() == still_waiting
    return table[WORK_ROW, :count].tolist(), extra_left


@settings(max_examples=600, deadline=None)
@given(passes())
def test_the_kernel_starts_what_the_slow_rule_starts(case):
    assert compiled_backfill(*case) == slow_backfill(*case[:-1])


def test_sjbf_takes_the_shortest_first_and_fcfs_the_oldest():
    # Job 0 is the head. Jobs 1 (prediction 9) and 2 (prediction 3) both end by the shadow time
    # and each needs the one free processor: FCFS starts 1, SJBF starts 2.
    case = dict(candidates=[0, 1, 2], procs=[4, 1, 1], durations=[5, 9, 3], predictions=[5, 9, 3],
                waiting=[True, True, True], head=0, free=1, horizon_s=10, extra=0)
    assert compiled_backfill(**case, shortest_first=False) == ([1], 0)
    assert compiled_backfill(**case, shortest_first=True) == ([2], 0)


def test_a_job_past_the_shadow_time_takes_the_extra_processors():
    # Nothing ends by the shadow time (horizon 2); 3 extra processors: job 1 (2 procs) takes
    # two of them, job 2 (2 procs) no longer fits in the one left, job 3 (1 proc) does.
    case = dict(candidates=[0, 1, 2, 3], procs=[8, 2, 2, 1], durations=[5, 9, 9, 9],
                predictions=[5, 9, 9, 9], waiting=[True] * 4, head=0, free=6, horizon_s=2,
                extra=3, shortest_first=False)
    assert compiled_backfill(**case) == ([1, 3], 0)
    assert slow_backfill(**case) == ([1, 3], 0)


def test_a_copied_waiting_queue_keeps_its_rows_in_its_own_table():
    """The named arrays are views of the table the pass reads; pickle and deepcopy rebind them."""
    import copy
    import pickle

    from hpcpredict.sim.easy.schedulers import WaitingQueue

    queue = WaitingQueue(np.array([4, 2, 1], dtype=np.int64), np.array([9, 8, 7], dtype=np.int64))
    queue.add(0, 5)
    for twin in (copy.deepcopy(queue), pickle.loads(pickle.dumps(queue))):
        twin.add(1, 3)
        assert twin.table[PREDICTION_ROW].tolist() == [5, 3, 0]
        assert twin.prediction_s.base is twin.table and twin.is_waiting.tolist() == [1, 1, 0]
        assert twin.requested_s.tolist() == [9, 8, 7] and twin.procs.tolist() == [4, 2, 1]
        assert twin.candidates().tolist() == [0, 1]  # written through the twin's own views
    assert queue.table[PREDICTION_ROW].tolist() == [5, 0, 0]
    assert queue.candidates().tolist() == [0]


def test_a_waiting_queue_grows_its_candidate_list_and_keeps_writing_to_it():
    """Past its first capacity (16 here) the candidate list is reallocated; `add` writes
    through a memoryview, which must follow the new list."""
    from hpcpredict.sim.easy.schedulers import WaitingQueue

    queue = WaitingQueue(np.ones(40, dtype=np.int64))
    for job in range(40):
        queue.add(job, job + 1)
    assert queue.candidates().tolist() == list(range(40))
    assert queue.prediction_s.tolist() == list(range(1, 41))
    queue.remove(3)
    assert queue.is_waiting[3] == 0 and len(queue) == 39
