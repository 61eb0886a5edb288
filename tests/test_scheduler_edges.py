"""Edges of the schedulers (hpcpredict/sim/schedulers.py) that the invariant tests let through.
Added for the mutation run (docs/mutation.md); each test names the wrong program it catches."""

from __future__ import annotations

import pytest

from hpcpredict.corrections import CORRECTIONS
from hpcpredict.sim import simulate
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
