"""The starvation guard's default and how people write it, shared by the simulator
(`Scheduler.starvation_guard_s`), the daemon's configuration and the live guard (`hpcpredict.slurm.guard`):
one default, one syntax (docs/method.md §7)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# The starvation guard the daemon uses unless told otherwise (docs/results.md says how it was
# chosen: leave-one-log-out under the max-wait bound).
DEFAULT_STARVATION_GUARD_S = 86_400
# When the guard falls due for a job (the simulator's `Scheduler.guard_rule`): "wait", once it has
# waited DEFAULT_STARVATION_GUARD_S; "promise", as soon as it is later than the start plain EASY
# promised it when it became the head (or has waited the guard's duration, whichever first).
# "xfactor" (live too: the daemon's `starvation_guard_xfactor`): once its expansion factor by its
# request reaches a threshold (`xfactor_guard_wait_s`), or it has waited the guard's duration,
# whichever first. Once due, the guard protects the whole machine: every job then running is
# planned to its request for good, and every backfilling decision uses requests while the head
# is due (the daemon's guard, and the only scope the simulator models).
STARVATION_RULES = ("wait", "promise", "xfactor")  # the first is the default (RunSpec relies on it)
# Predictors whose schedulers the literature names and publishes unbounded (EASY, EASY-SJBF,
# EASY++, clairvoyant EASY / EASY-SJBF: docs/reproduction.md): their names mean no guard, so a
# replay under their name runs without one unless asked; the bounded variant says so in its name.
PUBLISHED_PREDICTORS = frozenset({"requested", "ave2", "clairvoyant"})


def default_starvation_guard_s(scheduler: str, predictor: str) -> int | None:
    """The guard a replay runs when none is given: hpcpredict's own default (the learned
    predictor, as the daemon runs it) is bounded; a published baseline (an EASY scheduler with
    requested, AVE2 or clairvoyant times) is replayed as published, unbounded; FCFS has no
    backfilling to guard. Under the SLURM model (`slurm-backfill`, no published baseline) the
    guard is the daemon's, which acts on any lowered limit: on unless the times are the requests
    (where it changes nothing)."""
    if scheduler == "fcfs" or predictor == "requested":
        return None
    if scheduler in ("easy", "easy-sjbf") and predictor in PUBLISHED_PREDICTORS:
        return None
    return DEFAULT_STARVATION_GUARD_S


def is_expansion_factor(value: object) -> bool:
    """Whether `value` can be the "xfactor" rule's threshold: a finite number above 1 (a factor of
    1 is reached at submission, the guard always on; an infinite one is never reached). One test
    for the simulator's runs, `tune`'s grid and the daemon's configuration, which each say it in
    their own words."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 1 < value < math.inf


def xfactor_guard_wait_s(requested_s: np.ndarray, xfactor: float, cap_s: int) -> np.ndarray:
    """How long each job waits before the "xfactor" rule's guard protects it: until its expansion
    factor by its request, (wait + request) / request, reaches `xfactor`, i.e. `xfactor` - 1 times
    its request, and at most `cap_s`.

    Why relative to the job: a wait is long or short for what the job asked for. A fixed 24 h
    treats a job that asked for ten minutes, waiting 20 h, like one that asked for two days; the
    expansion factor is the threshold of selective reservation (Srinivasan et al., JSSPP 2002),
    and the request, not the prediction, makes it fixed at submission and known to SLURM.
    """
    import numpy as np  # (here: the CLI's --help imports this module, and stays light)

    waits = np.ceil((xfactor - 1.0) * np.asarray(requested_s, dtype=np.float64))
    return np.minimum(waits, cap_s).astype(np.int64)


def xfactor_guard_wait_one_s(requested_s: int, xfactor: float, cap_s: int) -> int:
    """`xfactor_guard_wait_s` for one job (the live guard judges one job per look at SLURM): the
    same arithmetic, so the daemon and the simulator cannot disagree by a rounding."""
    return int(xfactor_guard_wait_s([requested_s], xfactor, cap_s)[0])  # type: ignore[arg-type]


def check_slack_stage(guard_s: int | None, slack_s: int | None, after_s: int | None) -> None:
    """The slack stage's settings as the live guard and the SLURM model take them: the slack and
    the wait from which it applies together or not at all, and only with a guard (the stage comes
    before it). Raises ValueError."""
    if (slack_s is None) != (after_s is None) or (slack_s is not None and guard_s is None):
        raise ValueError("the guard's slack and its stage's start go together, with a guard")


def guard_slack_estimate_s(prediction_s: int, requested_s: int, slack_s: int) -> int:
    """The guard's slack estimate (the slack stage, live and simulated): what a candidate in
    front of an aged head is judged on instead of its request, its request less `slack_s`, never below its
    prediction. Why: a job judged so can outlive it by at most `slack_s` (no job outlives its
    request), so each job started in front of the head can delay it by at most that much,
    whatever the prediction's error; slack-based backfilling (Talby & Feitelson, IPPS 1999)
    bounds the delay a reservation may take the same way."""
    return min(requested_s, max(prediction_s, requested_s - slack_s))


_DURATION = re.compile(r"(\d+)\s*(s|m|h|d)?")
_UNIT_S = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_starvation_guard(value: object) -> int | None:
    """A guard as people write it: ``off`` (None), seconds (``86400``), or ``90m``, ``24h``,
    ``2d``. Raises ValueError naming what was expected."""
    if isinstance(value, bool):
        raise ValueError(f"a starvation guard is a duration such as 24h, or off; got {value!r}")
    if isinstance(value, int):
        seconds = value
    else:
        text = str(value).strip().lower()
        if text in ("off", "none", "no"):
            return None
        match = _DURATION.fullmatch(text)
        if match is None:
            raise ValueError(f"a starvation guard is a duration such as 24h, 90m, 86400 or off; got {value!r}")
        seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds < 0:
        raise ValueError(f"a starvation guard is at least 0 s, got {value!r}")
    return seconds
