"""May the daemon's predictions be acted on? The one place that decides, and says why not.

In lower mode the SLURM plugin sets a job's time limit to the prediction. A model that cannot be
trusted must therefore not answer with its own number: while it is *not ready*, every PREDICT is
answered with the user's request (what SLURM uses without hpcpredict, so nothing is lowered) and
the answer says so (``ready=0 reason=...``), as do PING, ``/health``, the metrics, and a log line
each time readiness changes. The reasons, each a `FallbackReason`:

* ``untrained`` — the model has learned fewer than ``min_trained_jobs`` jobs. An untrained
  model (w = 0) predicts 1 s for every job: in lower mode every limit dropped to one minute.
* ``stale`` — the newest job it learned ended more than 30 days ago (staleness.py): its
  time-since-last-job features are far outside what it learned. Measured on the bundled 1996
  sample trained and asked today: every known user's prediction is capped at the request, but a
  user the model never saw gets 7 s, so the cap is not a guarantee; this reason is. It holds
  for a learner with robust features too (which does not extrapolate): what it knows of its
  users is as old.

The default floor, `DEFAULT_MIN_TRAINED_JOBS` = 231, is one learned job per weight of the model
(the degree-2 expansion of 20 features has 231 terms, docs/method.md §3): below that, many
combinations of features have hardly been corrected by any job. It is a floor against starting
blind, not a quality bar: a fresh model keeps moving long after it (benchmarks/model_warmup.py;
after 231 learned jobs, 4% to 39% of its predictions on the three archive logs are within a factor
2 of what it predicts after 2,000, docs/daemon.md). The cost of waiting is only the gain not yet
taken (the requests are what the scheduler used before hpcpredict); a site bootstraps with
``hpcpredict train`` on its history, thousands of jobs, and is ready at once.
``min_trained_jobs = 0`` removes the floor.

Another reason not to trust the model belongs here: one more `FallbackReason` and one more
argument of `assess`, so that every front end reports it the same way. The SLURM watcher's
starvation guard is not one: its predictions can be trusted but must not be acted on *now*
(PREDICT answers the model's prediction with ``lower=0 hold=starvation_guard``,
`Handlers.lowering_hold`), and the watcher lowers the job later from the plugin's mark. A job
answered while not ready is marked with its request as the prediction, so the guard's later
lowering leaves it at its request too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hpcpredict.daemon.core.staleness import HistoryAge

DEFAULT_MIN_TRAINED_JOBS = 231  # one learned job per weight of the degree-2 model (module doc)


class FallbackReason(StrEnum):
    """Why PREDICT answers the user's request instead of the model's prediction."""

    UNTRAINED = "untrained"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether predictions may be acted on (`ready`), and the reasons they may not."""

    trained_jobs: int
    min_trained_jobs: int
    history: HistoryAge
    reasons: tuple[FallbackReason, ...]

    @property
    def ready(self) -> bool:
        return not self.reasons

    @property
    def reason_text(self) -> str:
        """The reasons as one protocol value, e.g. ``untrained,stale`` ("" when ready)."""
        return ",".join(reason.value for reason in self.reasons)

    def describe(self) -> str:
        """One sentence for a log line or ``/health``."""
        if self.ready:
            age = "" if self.history.age_days is None else f", the newest ended {self.history.age_days:,} days ago"
            return (f"ready: the model has learned {self.trained_jobs:,} jobs (min_trained_jobs "
                    f"{self.min_trained_jobs:,}){age}; predictions are the model's")
        parts = []
        if FallbackReason.UNTRAINED in self.reasons:
            parts.append(f"untrained: the model has learned {self.trained_jobs:,} jobs, fewer than "
                         f"min_trained_jobs = {self.min_trained_jobs:,}")
        if FallbackReason.STALE in self.reasons:
            parts.append(f"stale: {self.history.warning()}")
        return "not ready, every PREDICT answers the user's request (" + "; ".join(parts) + ")"


def assess(*, trained_jobs: int, min_trained_jobs: int, history: HistoryAge) -> Readiness:
    """The readiness of a model that took `trained_jobs` learning steps, with `history`'s age.

    Stale needs a history: a model that learned nothing is ``untrained`` (unless the floor is 0,
    the operator's explicit choice to act on an untrained model).
    """
    reasons = []
    if trained_jobs < min_trained_jobs:
        reasons.append(FallbackReason.UNTRAINED)
    if history.newest_end_s is not None and history.stale:
        reasons.append(FallbackReason.STALE)
    return Readiness(trained_jobs, min_trained_jobs, history, tuple(reasons))
