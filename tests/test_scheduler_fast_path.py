"""The O(1) decision for a lone new submission (`Scheduler.consider_new_job`) against a
hand-worked schedule and against the exhaustive replay, backfilled flags included. Added for
the mutation run (docs/mutation.md): the fast path's start in the extra processors, and the
reservation it leaves for the next submission, could change unseen."""

from __future__ import annotations

import pytest

from hpcpredict.corrections import CORRECTIONS
from hpcpredict.learn.baselines import RequestedPredictor
from hpcpredict.sim import SCHEDULERS, simulate
from test_simulation import make_job

# 10 processors. Job 1 (6 procs) runs until 1000; the head (job 2, 8 procs) is reserved at 1000
# with 10 - 8 = 2 extra processors there. Jobs 3, 4 and 5 (1 proc, 5000 s: they run past 1000)
# arrive one by one: 3 and 4 take the two extra processors at once, 5 finds none left and
# waits, though a processor is free, until the head has started and ended (1000 + 100).
JOBS = [
    make_job(1, 0, 6, 1000, 1000),
    make_job(2, 10, 8, 100, 100),
    make_job(3, 20, 1, 5000, 5000),
    make_job(4, 30, 1, 5000, 5000),
    make_job(5, 40, 1, 5000, 5000),
]


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
@pytest.mark.parametrize("exhaustive", [False, True])
def test_jobs_take_the_extra_processors_one_by_one_and_are_backfilled(scheduler: str, exhaustive: bool) -> None:
    result = simulate(JOBS, 10, SCHEDULERS[scheduler], RequestedPredictor(), CORRECTIONS["requested"],
                      exhaustive=exhaustive)
    # The head starts at 1000 beside jobs 3 and 4 (8 + 1 + 1 = 10 processors); job 5 starts
    # when the head ends (1100).
    assert result.start_s == [0, 1000, 20, 30, 1100]
    assert result.backfilled == [False, False, True, True, False]
