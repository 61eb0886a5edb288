"""The starvation guard's default and how people write it, shared by the simulator
(`Scheduler.starvation_guard_s`), the daemon's configuration and the live guard (`hpcpredict.slurm.guard`):
one default, one syntax (docs/method.md §7)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# The starvation guard the daemon uses unless told otherwise (docs/results.md says how it was
# chosen: leave-one-log-out under the max-wait bound).
DEFAULT_STARVATION_GUARD_S = 86_400
# When the guard falls due for a job (the simulator's `Scheduler.guard_rule`): "wait", once it has
# waited DEFAULT_STARVATION_GUARD_S; "promise", as soon as it is later than the start plain EASY
# promised it when it became the head (or has waited the guard's duration, whichever first).
# "recent" (simulator only, issue 30): once it has waited a multiple of the p99 wait of the jobs
# started in the last four weeks (`recent_guard_wait_s`), or the guard's duration, whichever first.
# "xfactor" (issue 30; live too: the daemon's `starvation_guard_xfactor`): once its expansion
# factor by its request reaches a threshold (`xfactor_guard_wait_s`), or it has waited the guard's
# duration, whichever first.
STARVATION_RULES = ("wait", "promise", "recent", "xfactor")  # the first is the default (RunSpec relies on it)
# What the guard protects once it is due (the simulator's `Scheduler.guard_scope`): "machine"
# (the daemon's, and the default), every job then running is planned to its request for good and
# every backfilling decision uses requests while the head is due; "head" (simulator only, issue
# 30), only the aged head's reservation and the candidates that would start in front of it use
# requests: the running jobs keep their predicted ends, and the next head is planned as usual.
STARVATION_SCOPES = ("machine", "head")  # the first is the default
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


# The "recent" rule: the waits it follows (jobs started in the last RECENT_WINDOW_S), their
# quantile, the shortest wait it ever protects at, how many starts it needs before it trusts the
# quantile (fewer: the guard's own duration), and how often it is recomputed (a daemon would do it
# on a timer, not at every event).
RECENT_WINDOW_S = 28 * 86_400
RECENT_QUANTILE = 0.99
RECENT_FLOOR_S = 3_600
RECENT_MIN_STARTS = 100
RECENT_EVERY_S = 86_400


def recent_guard_wait_s(recent_waits_s: Sequence[int], multiple: float, cap_s: int) -> int:
    """How long a job waits before the "recent" rule's guard protects it: `multiple` times the
    p99 of the waits of the jobs started recently, within [RECENT_FLOOR_S, `cap_s`].

    Why relative: a fixed threshold protects nobody in a calm period (plain EASY's longest wait
    there is below it) and too many in a busy one; the site's own recent waits say which waits are
    exceptional now. With fewer than RECENT_MIN_STARTS starts the quantile means little: `cap_s`.
    """
    if len(recent_waits_s) < RECENT_MIN_STARTS:
        return cap_s
    import numpy as np  # (here: the CLI's --help imports this module, and stays light)

    quantile = float(np.quantile(np.asarray(recent_waits_s, dtype=np.float64), RECENT_QUANTILE))
    return int(min(cap_s, max(RECENT_FLOOR_S, round(multiple * quantile))))


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


def guard_estimate_s(prediction_s: int, requested_s: int, multiple: float) -> int:
    """The guard's estimate option (simulator only, issue 30): what a candidate in front of a
    guarded head is judged on instead of its request, `multiple` times its prediction within
    [prediction, request]. Why: requests are far above most runtimes, so judging on them stops
    nearly all backfilling while a job is protected, which is what the guard costs
    (docs/results.md); a generous multiple of the prediction keeps most of it."""
    return min(requested_s, max(prediction_s, math.ceil(multiple * prediction_s)))


def check_slack_stage(guard_s: int | None, slack_s: int | None, after_s: int | None) -> None:
    """The slack stage's settings as the live guard and the SLURM model take them: the slack and
    the wait from which it applies together or not at all, and only with a guard (the stage comes
    before it). Raises ValueError."""
    if (slack_s is None) != (after_s is None) or (slack_s is not None and guard_s is None):
        raise ValueError("the guard's slack and its stage's start go together, with a guard")


def guard_slack_estimate_s(prediction_s: int, requested_s: int, slack_s: int) -> int:
    """The guard's slack estimate (simulator only, issue 30): what a candidate in front of a
    guarded head is judged on instead of its request, its request less `slack_s`, never below its
    prediction. Why: a job judged so can outlive it by at most `slack_s` (no job outlives its
    request), so each job started in front of the head can delay it by at most that much,
    whatever the prediction's error; slack-based backfilling (Talby & Feitelson, IPPS 1999)
    bounds the delay a reservation may take the same way."""
    return min(requested_s, max(prediction_s, requested_s - slack_s))


# The guard's evidence option (simulator only, issue 30): how many of a user's last runtimes are
# the evidence, and the multiple of their longest a candidate is judged on.
EVIDENCE_RUNS = 5
EVIDENCE_MULTIPLE = 2


def evidence_estimate_s(prediction_s: int, requested_s: int, recent_runs_s: Sequence[int],
                        tiny_s: int) -> int:
    """The guard's evidence option (simulator only, issue 30): what a candidate in front of a
    protected head is judged on. Its request, unless its user's last EVIDENCE_RUNS runtimes say
    the job is tiny: EVIDENCE_MULTIPLE times the longest of them is at most `tiny_s`; then that
    (never below its prediction, never above its request).

    Why: on CEA-Curie, AVEbsld under any guard that fires more often than the 24 h one is carried
    by bursts of thousands of 5-second jobs that ask for a day (docs/results.md, "A threshold
    relative to the job's request"); judged on their requests they wait out the protected head.
    A user whose last jobs all ran seconds is a safe bet for seconds, and if one runs longer the
    head loses at most what it overran (it is planned to its request from then on); a multiple of
    the model's prediction is not such a bet (the estimate stage's jobs outlive 4x theirs often
    enough to starve a head)."""
    if len(recent_runs_s) < EVIDENCE_RUNS:
        return requested_s
    count = len(recent_runs_s)
    envelope_s = EVIDENCE_MULTIPLE * max(recent_runs_s[k] for k in range(count - EVIDENCE_RUNS, count))
    if envelope_s > tiny_s:
        return requested_s
    return min(requested_s, max(prediction_s, envelope_s, 1))


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
