"""What happens first when events share an instant: one order for every replay.

The simulator (`sim/easy/simulation.py`, `sim/slurm_model/slurm_backfill.py`), the learner's history replay
(`learn/history.py`) and the daemon's error replay (`daemon/core/judged_errors.py`) all order events by
(time, `Instant`, then arrival). The order is the reference's (docs/method.md §10): a prediction
running out is corrected before anything else happens at that instant; a submission is seen
before a termination, so a job ending as another is submitted is not yet in the history the
submission sees; jobs decided to start at an instant start after its terminations; the SLURM
model's periodic backfill pass sees the whole instant.

>>> sorted([(5, Instant.TERMINATION, "a ends"), (5, Instant.SUBMISSION, "b arrives"),
...         (4, Instant.START, "c starts")])[1:]
[(5, <Instant.SUBMISSION: 1>, 'b arrives'), (5, <Instant.TERMINATION: 2>, 'a ends')]
"""

from __future__ import annotations

from enum import IntEnum


class Instant(IntEnum):
    """Kinds of events, in their order at one instant (module doc)."""

    PREDICTION_OVER = 0
    SUBMISSION = 1
    TERMINATION = 2
    START = 3
    BACKFILL_PASS = 4
