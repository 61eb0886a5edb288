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

from hpcpredict.features import FeatureState

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

    O(users): the daemon keeps it between events (`PredictionService.history_age`).
    """
    ends = [user.last_end_s for user in features.users.values() if user.last_end_s > 0]
    return max(ends) if ends else None


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
