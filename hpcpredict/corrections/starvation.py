"""The starvation guard's settings (`GuardSettings`), default, rules and how people write it,
shared by the simulator's two models, a run's spec, `tune`, the daemon's configuration and the
live guard (`hpcpredict.slurm.guard`): one default, one validation, one syntax (docs/method.md §7)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# The starvation guard the daemon uses unless told otherwise (docs/results.md says how it was
# chosen: leave-one-log-out under the max-wait bound).
DEFAULT_STARVATION_GUARD_S = 86_400
# When the guard falls due for a job (`GuardSettings.rule`): "wait", once it has
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


def guard_slack_estimate_s(prediction_s: int, requested_s: int, slack_s: int) -> int:
    """The guard's slack estimate (the slack stage, live and simulated): what a candidate in
    front of an aged head is judged on instead of its request, its request less `slack_s`, never below its
    prediction. Why: a job judged so can outlive it by at most `slack_s` (no job outlives its
    request), so each job started in front of the head can delay it by at most that much,
    whatever the prediction's error; slack-based backfilling (Talby & Feitelson, IPPS 1999)
    bounds the delay a reservation may take the same way."""
    return min(requested_s, max(prediction_s, requested_s - slack_s))


class GuardSettingsError(ValueError):
    """A guard setting that cannot mean anything: `setting` is GuardSettings' name for it, and
    `worded` says the same in a door's own names (a campaign key, a daemon.toml key, an option)."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting, self.problem = setting, problem

    def worded(self, names: Mapping[str, str]) -> str:
        problem = self.problem  # (a door without a name for a setting, the daemon's rule: its own)
        for setting, name in names.items():
            problem = problem.replace(f"<{setting}>", name)
        return f"{names.get(self.setting, self.setting)}: {problem}"


def _whole_seconds(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class GuardSettings:
    """The starvation guard, one set of names and one validation for every door: the simulator's
    two models (`Scheduler`, `SlurmBackfill`), a run's spec, the daemon's configuration, `tune`'s
    grid and the TOML it writes. Each door reads its own words at its edge (`guard_from`, the
    daemon's durations) and says errors in them (`GuardSettingsError.worded`). No guard is None,
    not a GuardSettings: there is nothing to set then.

    A job that has waited `wait_s` turns the guard on (the "wait" rule); or, by `rule`, sooner:
    "promise" (the EASY models only) once it is later than plain EASY promised it when it became
    the head; "xfactor" once its expansion factor by its request, (wait + request) / request,
    reaches `xfactor`. The slack stage (`slack_s` from `slack_after_s` of waiting, both or
    neither): until the guard is due, jobs started in front of the waiting head are judged on,
    and limited to, their request less `slack_s`, never below their prediction.
    """

    wait_s: int = DEFAULT_STARVATION_GUARD_S
    rule: str = "wait"
    xfactor: float | None = None
    slack_s: int | None = None
    slack_after_s: int | None = None

    def __post_init__(self) -> None:
        if not _whole_seconds(self.wait_s) or self.wait_s < 0:
            raise GuardSettingsError("wait_s", f"expected a whole number of seconds >= 0, got {self.wait_s!r}")
        if self.rule not in STARVATION_RULES:
            raise GuardSettingsError("rule", f"unknown guard rule {self.rule!r}; one of {', '.join(STARVATION_RULES)}")
        if self.rule == "xfactor":
            if not is_expansion_factor(self.xfactor):
                raise GuardSettingsError("xfactor", "expected a number above 1 such as 5 (the expansion "
                                         "factor, (wait + request) / request, that turns the guard on), "
                                         f"got {self.xfactor!r}")
            object.__setattr__(self, "xfactor", float(self.xfactor))  # one key however it is spelt
        elif self.xfactor is not None:
            raise GuardSettingsError("xfactor", f"the \"xfactor\" rule's setting, and the rule is {self.rule!r}")
        if (self.slack_s is None) != (self.slack_after_s is None):
            raise GuardSettingsError("slack_s" if self.slack_after_s is None else "slack_after_s",
                                     "<slack_s> and <slack_after_s> go together (the slack, and the wait "
                                     "from which it applies); set both or neither")
        if self.slack_s is not None:
            if not _whole_seconds(self.slack_s) or self.slack_s < 1:
                raise GuardSettingsError("slack_s", f"expected a whole number of seconds >= 1, got {self.slack_s!r}")
            if not _whole_seconds(self.slack_after_s) or not 0 <= self.slack_after_s <= self.wait_s:
                raise GuardSettingsError("slack_after_s", "expected a whole number of seconds within the "
                                         f"guard's wait ({self.wait_s} s): the slack's stage comes before "
                                         f"the guard, got {self.slack_after_s!r}")

    @property
    def has_slack_stage(self) -> bool:
        return self.slack_s is not None

    def due_after_s(self, requested_s: np.ndarray) -> int | np.ndarray:
        """How long each job (by its request) waits before the guard is due for it: `wait_s`, or
        per job by the xfactor rule (`xfactor_guard_wait_s`, capped at `wait_s`). The promise
        rule's sooner times depend on the plan: the scheduler's pass finds them."""
        if self.xfactor is None:
            return self.wait_s
        return xfactor_guard_wait_s(requested_s, self.xfactor, self.wait_s)

    @property
    def label(self) -> str:
        """``guard 24 h``, ``guard xfactor 5 or 24 h, request - 2 h in front after 4 h``."""
        rule = "" if self.rule == "wait" else f"{self.rule} or "
        if self.rule == "xfactor":
            rule = f"xfactor {self.xfactor:g} or "
        stage = ""
        if self.slack_s is not None:
            stage = (f", request - {self.slack_s / 3600:g} h in front after "
                     f"{(self.slack_after_s or 0) / 3600:g} h")
        return f"guard {rule}{self.wait_s / 3600:g} h{stage}"

    def to_keys(self) -> dict[str, object]:
        """The campaign keys (`RunSpec.to_dict`), each only when it is not what a guard had before
        it existed, so that the keys of runs stored earlier stay valid."""
        keys: dict[str, object] = {KEY_NAMES["wait_s"]: self.wait_s}
        if self.rule != "wait":
            keys[KEY_NAMES["rule"]] = self.rule
        if self.xfactor is not None:
            keys[KEY_NAMES["xfactor"]] = self.xfactor
        if self.slack_s is not None:
            keys[KEY_NAMES["slack_after_s"]] = self.slack_after_s
            keys[KEY_NAMES["slack_s"]] = self.slack_s
        return keys

    def daemon_toml_lines(self) -> list[str]:
        """The guard as daemon.toml's [daemon] keys say it (`hpcpredict tune`'s fragment)."""
        lines = [f'{DAEMON_NAMES["wait_s"]} = "{duration_text(self.wait_s)}"']
        if self.slack_s is not None:
            lines += [f'{DAEMON_NAMES["slack_s"]} = "{duration_text(self.slack_s)}"',
                      f'{DAEMON_NAMES["slack_after_s"]} = "{duration_text(self.slack_after_s or 0)}"']
        if self.xfactor is not None:
            lines.append(f"{DAEMON_NAMES['xfactor']} = {self.xfactor:g}")
        return lines


# Each door's names for GuardSettings' fields: a campaign's and RunSpec's keys, daemon.toml's.
KEY_NAMES = {"wait_s": "starvation_guard_s", "rule": "guard_rule", "xfactor": "guard_xfactor",
             "slack_s": "guard_estimate_slack_s", "slack_after_s": "guard_estimate_after_s"}
DAEMON_NAMES = {"wait_s": "starvation_guard", "xfactor": "starvation_guard_xfactor",
                "slack_s": "starvation_guard_slack", "slack_after_s": "starvation_guard_slack_after"}


def guard_from(wait_s: int | None, *, rule: str = "wait", xfactor: float | None = None,
               slack_s: int | None = None, slack_after_s: int | None = None,
               names: Mapping[str, str] = KEY_NAMES) -> GuardSettings | None:
    """A door's guard: None when `wait_s` is None (off), where any other setting is an error
    (the guard's wait is the xfactor rule's cap, and the slack's stage comes before it). Errors
    say the door's `names`."""
    if wait_s is None:
        given = [setting for setting, value in (("xfactor", xfactor), ("slack_s", slack_s),
                                                ("slack_after_s", slack_after_s),
                                                ("rule", None if rule == "wait" else rule)) if value is not None]
        if given:
            raise ValueError(f"{names.get(given[0], given[0])} needs a starvation guard: "
                             f"{names['wait_s']} is off (set it, e.g. 24 h, or drop "
                             f"{names.get(given[0], given[0])})")
        return None
    try:
        return GuardSettings(wait_s, rule, xfactor, slack_s, slack_after_s)
    except GuardSettingsError as error:
        raise ValueError(error.worded(names)) from None


def duration_text(seconds: int) -> str:
    """``24h``, ``90m`` or seconds: whole hours or minutes where they are, as the daemon's
    configuration reads them back (`parse_starvation_guard`)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return str(seconds)


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
