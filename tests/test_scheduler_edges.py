"""Edges of the schedulers (hpcpredict/sim/easy/schedulers.py) that the invariant tests let through.
Added for the mutation run (docs/mutation.md); each test names the wrong program it catches."""

from __future__ import annotations

import numpy as np
import pytest

from hpcpredict.corrections import CORRECTIONS
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.sim import simulate
from hpcpredict.sim.engine.profile import RunningProfile
from hpcpredict.sim.easy.schedulers import Scheduler, WaitingQueue
from test_simulation import make_job
from test_starvation_guard import STREAM, OneSecond, guarded


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_wait_rule_ignores_plain_easys_promise(scheduler: str) -> None:
    """Under the "wait" rule only the wait counts: a head far from its bound is not guarded when
    it is later than plain EASY promised (1000: the "promise" rule would guard it then), so it
    starves as unguarded. Catches the promise rule applied to every rule (`or` -> `and`)."""
    free_run = simulate(STREAM, 10, guarded(scheduler, None), OneSecond(), CORRECTIONS["incremental"])
    wait = simulate(STREAM, 10, guarded(scheduler, 10**9, "wait"), OneSecond(),
                    CORRECTIONS["incremental"])
    assert wait.start_s == free_run.start_s
    assert wait.start_s[1] > 4_000


def _busy_machine() -> tuple[WaitingQueue, RunningProfile]:
    """10 processors, 6 held until 1000; the head (job 0, 10 processors) waits since 0 and a
    small job (1) waits behind it."""
    waiting = WaitingQueue(np.array([10, 1]), np.array([100, 100]), [0, 0])
    waiting.add(0, 100)
    waiting.add(1, 100)
    profile = RunningProfile(10)
    profile.add(99, 0, 1000, 6)
    return waiting, profile


@pytest.mark.parametrize("rule", ["wait", "promise"])
def test_a_guard_without_the_running_jobs_by_request_is_refused_by_name(rule: str) -> None:
    """Both rules need the running jobs by requested end (the "promise" rule as soon as a head
    is new, the "wait" rule once a head is due): without them the decision is refused, with a
    message that says what is missing. Catches the message lost or changed."""
    waiting, profile = _busy_machine()
    waiting.set_guard_wait(0)  # the head is due at once
    scheduler = Scheduler("easy", "fcfs", GuardSettings(0, rule))
    with pytest.raises(ValueError) as raised:
        scheduler.schedule(10, waiting, profile, lambda job, backfilled: None)
    assert str(raised.value) == "the starvation guard needs the running jobs by requested end"


@pytest.mark.parametrize("exhaustive", [False, True])
@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_a_job_started_in_the_extra_processors_of_a_guarded_reservation_is_pinned(
    scheduler: str, exhaustive: bool
) -> None:
    """10 processors; job 0 (6 procs) runs to 1000 by its request; the head (8 procs) is due
    for the guard at once (bound 0 s): its reservation is at 1000 with 2 extra processors. Job 2
    (1 proc, 5000 s, predicted 1 s) arrives at 20: it ends after 1000 by its request, fits in the
    extra processors and starts. It started at a guarded decision, so it is planned to its
    request for good, never corrected: by the full pass and by the O(1) path for a lone
    submission alike. Catches the reservation returned by that path losing its `guarded` flag
    (then the job is not pinned: corrected from its 1 s prediction)."""
    jobs = [make_job(1, 0, 6, 1000, 1000), make_job(2, 1, 8, 100, 100),
            make_job(3, 20, 1, 5000, 5000)]
    result = simulate(jobs, 10, guarded(scheduler, 0), OneSecond(), CORRECTIONS["incremental"],
                      exhaustive=exhaustive)
    assert result.start_s == [0, 1000, 20]
    assert result.backfilled == [False, False, True]
    assert result.final_prediction_s[2] == 5000 and result.corrections[2] == 0


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_promise_is_fixed_when_a_job_first_becomes_the_head(scheduler: str) -> None:
    """Job 0 (6 of 10 procs) runs to 1000; job 1 (4 procs, asks 3000 s) runs 100 s; the head
    (10 procs) arrives at 1: plain EASY promises it 3000 (job 1's requested end). From 101 a
    4-processor job (900 s, predicted 1 s) arrives every 50 s and is backfilled. Once job 1 has
    ended, EASY on the requests would promise 1000 (job 0's end), but the promise is the one
    made when the job became the head: the guard falls due at 3000, not 1000. Catches the
    promise recomputed at every decision (the job's `promised` flag not set)."""
    jobs = [make_job(1, 0, 6, 1000, 1000), make_job(2, 0, 4, 100, 3000),
            make_job(3, 1, 10, 100, 100)] + [make_job(4 + k, 101 + 50 * k, 4, 900, 900)
                                             for k in range(80)]
    promise = simulate(jobs, 10, guarded(scheduler, 10**9, "promise"), OneSecond(),
                       CORRECTIONS["incremental"])
    by_wait = simulate(jobs, 10, guarded(scheduler, 3000 - 1), OneSecond(),
                       CORRECTIONS["incremental"])
    assert promise.start_s == by_wait.start_s
    assert 3000 <= promise.start_s[2] <= 3000 + 900


def test_an_unknown_guard_rule_is_refused_with_the_rules_there_are() -> None:
    with pytest.raises(ValueError) as raised:
        Scheduler("easy", "fcfs", GuardSettings(60, "sometimes"))
    assert str(raised.value) == "rule: unknown guard rule 'sometimes'; one of wait, promise, xfactor"


def test_a_queue_without_submit_times_counts_them_as_zero() -> None:
    """Built without submit times (a direct user; the simulator always gives them), every job
    counts as submitted at 0: the guard falls due at 0 before `set_guard_wait`, at the wait
    after it. Catches the default's value or the initial due times changed."""
    queue = WaitingQueue(np.array([1, 2, 3]))
    assert queue.submit_list == [0, 0, 0] and queue.guard_due_list == [0, 0, 0]
    queue.set_guard_wait(50)
    assert queue.guard_due_list == [50, 50, 50]
    timed = WaitingQueue(np.array([1, 2]), submit_s=[5, 7])
    assert timed.guard_due_list == [5, 7]
    timed.set_guard_wait(50)
    assert timed.guard_due_list == [55, 57]


def test_a_job_added_twice_or_out_of_order_and_the_head_of_an_empty_queue_are_refused() -> None:
    """Job indices are submission order (the FCFS order and every tie-break): a job added again
    or before a later one is a bug of the caller, refused by name, as is asking an empty queue
    for its head. Catches `<=` -> `<` and the messages lost."""
    queue = WaitingQueue(np.array([1, 1, 1]))
    with pytest.raises(IndexError) as empty:
        queue.head()
    assert str(empty.value) == "head of an empty queue"
    queue.add(1, 5)
    for job in (1, 0):
        with pytest.raises(AssertionError) as raised:
            queue.add(job, 5)
        assert str(raised.value) == f"job {job} submitted out of order"
    assert queue.head() == 1 and len(queue) == 1
