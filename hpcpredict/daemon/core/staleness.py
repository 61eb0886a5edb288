"""Is the model's knowledge of its users out of date?

The learner's features include the time since each user's last job ended. A daemon trained on an
old history (the bundled 1996 sample, or a site's export from last year) meets its users again
with those features far beyond anything it learned from: the model extrapolates, and the
predictions hit their cap, the user's own request. Nothing is wrong with the daemon, yet it
predicts nothing useful. So the age of the newest thing it learned is measured and said: by
`hpcpredict train`, in the start log line, in PING and in /health, until recent jobs have been
learned. A learner with ``feature_scaling = "robust"`` does not extrapolate (it reads the break time
as log(1 + s) and clamps its terms to the range learned): its histories are still old, and the
warning says so without promising requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcpredict.learn.features import FeatureState

STALE_AFTER_S = 30 * 86_400  # a month without a single learned job


@dataclass(frozen=True)
class HistoryAge:
    newest_end_s: float | None  # end time of the newest job learned (None: nothing learned)
    age_s: float | None  # now - newest_end_s
    stale: bool
    extrapolates: bool = True  # raw features: a long break sends predictions to the request

    @property
    def age_days(self) -> int | None:
        return None if self.age_s is None else int(self.age_s // 86_400)

    def warning(self) -> str | None:
        """A sentence for a sysadmin when stale, else None."""
        if not self.stale:
            return None
        if self.newest_end_s is None:
            return "the model has learned no job yet: predictions are the users' requests"
        advice = "train on recent history (hpcpredict slurm-convert --sacct --starttime ...)"
        if not self.extrapolates:
            return (
                f"the newest job the model learned ended {self.age_days:,} days ago: users' "
                f"histories are that old (robust features: no extrapolation); {advice}"
            )
        return (
            f"the newest job the model learned ended {self.age_days:,} days ago: for users with no "
            "recent job the time-since features extrapolate and predictions fall back to their "
            f"requests; {advice}"
        )


def newest_learned_end_s(features: FeatureState) -> float | None:
    """The end time of the newest job in the learner's user histories (None: no job yet).

    O(users): the daemon keeps it up to date event by event instead (`NewestEnd`).
    """
    ends = [end_s for end_s in map(features.last_end_s, features.users) if end_s > 0]
    return max(ends) if ends else None


class NewestEnd:
    """`newest_learned_end_s` of a learner's histories, kept in O(1) per event.

    PREDICT asks the history's age at every request (readiness.py); scanning every user after
    each event cost a PREDICT O(users) while events flow. Only a job's end changes a user's
    ``last_end_s`` (`FeatureState.job_ended`), and it *sets* it: an end reported late, older
    than the user's last, lowers it. So the newest end is raised in O(1) by `user_ended`, and
    when the user holding it goes back in time the next read scans once (rare: an out-of-order
    end of the very user with the newest one). Equal to `newest_learned_end_s` at every read
    (tests/test_daemon_newest_end.py).
    """

    __slots__ = ("_features", "_end_s", "_holder", "_rescan")

    def __init__(self, features: FeatureState) -> None:
        self._features = features
        self._end_s: float | None = None
        self._holder: int | None = None  # a user whose last end is `_end_s`
        self._rescan = True

    @property
    def end_s(self) -> float | None:
        if self._rescan:
            self._scan()
        return self._end_s

    def user_ended(self, user_id: int) -> None:
        """After a job of `user_id` ended in the histories (its ``last_end_s`` was set)."""
        end_s = self._features.last_end_s(user_id)
        if end_s is None or self._rescan:
            return
        if end_s > 0 and (self._end_s is None or end_s >= self._end_s):
            self._end_s, self._holder = end_s, user_id
        elif user_id == self._holder:
            self._rescan = True  # the newest end went back in time: someone else may hold it

    def saved(self) -> tuple[float | None, int | None, bool]:
        """What `restore` puts back (the undo of an event whose transaction failed)."""
        return self._end_s, self._holder, self._rescan

    def restore(self, saved: tuple[float | None, int | None, bool]) -> None:
        self._end_s, self._holder, self._rescan = saved

    def _scan(self) -> None:
        self._end_s, self._holder = None, None
        for user_id in self._features.users:
            end_s = self._features.last_end_s(user_id)
            if end_s > 0 and (self._end_s is None or end_s > self._end_s):
                self._end_s, self._holder = end_s, user_id
        self._rescan = False


def age_at(
    newest_end_s: float | None,
    now_s: float,
    stale_after_s: float = STALE_AFTER_S,
    *,
    extrapolates: bool = True,
) -> HistoryAge:
    """The age of a history whose newest job ended at `newest_end_s`, at `now_s`.

    `extrapolates` is False for a learner with robust features (the module doc)."""
    if newest_end_s is None:
        return HistoryAge(None, None, True, extrapolates)
    age = now_s - newest_end_s
    return HistoryAge(newest_end_s, age, age > stale_after_s, extrapolates)


def history_age(
    features: FeatureState,
    now_s: float,
    stale_after_s: float = STALE_AFTER_S,
    *,
    extrapolates: bool = True,
) -> HistoryAge:
    """The age of the newest job end in the learner's user histories, at `now_s`."""
    return age_at(newest_learned_end_s(features), now_s, stale_after_s, extrapolates=extrapolates)
