"""Edges of the schedulers (hpcpredict/sim/schedulers.py) that the invariant tests let through.
Added for the mutation run (docs/mutation.md); each test names the wrong program it catches."""

from __future__ import annotations

import numpy as np
import pytest

from hpcpredict.corrections import CORRECTIONS
from hpcpredict.sim import simulate
from hpcpredict.sim.profile import RunningProfile
from hpcpredict.sim.schedulers import Scheduler, WaitingQueue
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
    scheduler = Scheduler("easy", "fcfs", starvation_guard_s=0, guard_rule=rule)
    with pytest.raises(ValueError) as raised:
        scheduler.schedule(10, waiting, profile, lambda job, backfilled: None)
    assert str(raised.value) == "the starvation guard needs the running jobs by requested end"
