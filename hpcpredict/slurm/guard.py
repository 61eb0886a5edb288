"""The starvation guard, live: SLURM's time limits put back to the requests while a job starves.

Backfilling with lowered limits breaks the promise a backfilling scheduler makes to the job at the
head of its queue: a job started because its lowered limit ended before the head's planned start
outlives that limit, the corrector raises it, the head's start slides, and can slide again and
again (docs/method.md §7). The simulator bounds it with `Scheduler.guard` (GuardSettings); live, the
only lever is the limits SLURM plans with, so the same rule reads:

* the guard is **on** while, of the jobs pending for the machine (reason ``Priority`` or
  ``Resources``: not held, not waiting on a dependency, a begin time or a QOS limit), the one
  eligible longest has waited its threshold (`guard_threshold_s`): by default (the "wait" rule)
  `guard_s` seconds; with ``starvation_guard_xfactor`` X (the "xfactor" rule) as soon as its
  expansion factor by its request, (wait + request) / request, reaches X, i.e. after
  ceil((X - 1) * request) seconds, or after `guard_s` (the cap), whichever comes first. Its
  request is the one the plugin recorded in its mark, else its time limit;
* while it is on, every running job whose limit hpcpredict lowered gets its request back (and
  keeps it: a running job's limit is never lowered again), every pending job still at the limit
  the plugin set gets its request, and the daemon tells the plugin not to lower new jobs
  (``lower=0`` in PREDICT's answer), so SLURM plans the starving job's start with requests, which
  no job outlives: plain EASY's promise;
* once it is off, pending jobs the plugin marked in lower mode and that sit at their request (or
  at their slack estimate, below) get their lowered limit again (they have not started: nothing
  can be killed early).

With a **slack** (``starvation_guard_slack`` S from ``starvation_guard_slack_after`` A;
docs/method.md §7), a softer stage comes first: while the longest-waiting job has waited A or more
but not yet its threshold, every pending job the plugin lowered gets its *slack estimate*, its
request less S, never below its lowered limit (`slack_limit_s`), every running job whose limit is
below its own slack estimate gets its request, and PREDICT holds lowering (the watcher sets the
new job's estimate at its next look). SLURM then backfills a job in front of the starving one
only if it ends by its start on that estimate; a job that outlives it gets its request
(`corrections.policies.RequestWithinSlack`, the corrector's policy with a slack), which it cannot
outlive: each moves the starving job's start once, by at most S. A job keeps the limit it started
with when the stage ends; once the guard itself is on, every lowered limit goes to the request.

The simulator models exactly this (`hpcpredict.sim.easy.simulation`: running jobs at a guarded decision
are planned to their requests for good; `hpcpredict.sim.slurm_model.slurm_backfill` judges its head, the job
that has waited longest, by the xfactor rule; the slack is `GuardSettings.slack_s` in both models,
whose estimates are planned as these limits: one set of settings, `DaemonConfig.guard`). Every decision is a pure function of what SLURM shows — the jobs, their limits and the plugin's mark — so after a restart
the guard decides the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from hpcpredict.corrections.starvation import (
    DEFAULT_STARVATION_GUARD_S, guard_slack_estimate_s, xfactor_guard_wait_one_s,
)
from hpcpredict.slurm.corrector import whole_minutes_s
from hpcpredict.slurm.requests import request_s
from hpcpredict.slurm.tag import PredictionTag, parse_tag

DEFAULT_GUARD_S = DEFAULT_STARVATION_GUARD_S  # the simulator's and the daemon's: one default
# Why a pending job waits, as squeue says it: only these mean "waiting for processors". A job
# held, waiting on a dependency or a begin time, or over a QOS/association limit is not starved by
# backfilling and must not turn the guard on.
WAITING_FOR_MACHINE = frozenset({"Priority", "Resources", "None"})


class PendingView(Protocol):
    job_id: int
    state: str
    submit_s: int
    eligible_s: int | None
    state_reason: str
    time_limit_s: int | None
    admin_comment: str


@dataclass(frozen=True, slots=True)
class GuardStatus:
    """The guard as the last look at SLURM found it (`job_id` the longest-waiting such job, and
    `threshold_s` the wait at which it turns the guard on: `guard_s`, or less by the xfactor rule;
    `slack` whether the slack's stage is on: that job has waited the stage's time, not its
    threshold)."""

    active: bool = False
    job_id: int | None = None
    waited_s: int = 0
    threshold_s: int | None = None
    slack: bool = False


def guard_threshold_s(job: PendingView, guard_s: int, xfactor: float | None) -> int:
    """How long `job` waits before it turns the guard on: `guard_s` by the wait rule (no
    `xfactor`), else the simulator's xfactor rule capped at `guard_s`
    (`xfactor_guard_wait_s`). A job without a positive request has none to measure its
    expansion factor by (the simulator's cleaning drops such jobs): `guard_s`."""
    if xfactor is None:
        return guard_s
    requested_s = request_s(parse_tag(job.admin_comment), job.time_limit_s)
    if requested_s is None or requested_s <= 0:
        return guard_s
    return xfactor_guard_wait_one_s(requested_s, xfactor, guard_s)


def guard_status(jobs: Iterable[PendingView], now_s: int, guard_s: int | None,
                 xfactor: float | None = None, slack_after_s: int | None = None) -> GuardStatus:
    """On when the job pending for the machine that has waited longest since it became eligible
    has waited its threshold (`guard_threshold_s`: `guard_s` seconds, or less with an
    `xfactor`); None `guard_s`: never. Only that job is judged, as the simulator judges its head.
    The slack's stage is on while that job has waited `slack_after_s` (None: no stage) but not
    its threshold."""
    if guard_s is None:
        return GuardStatus()
    longest: tuple[int, PendingView] | None = None
    for job in jobs:
        if job.state != "PENDING" or job.state_reason not in WAITING_FOR_MACHINE:
            continue
        waited_s = now_s - (job.eligible_s or job.submit_s)
        if longest is None or waited_s > longest[0]:
            longest = (waited_s, job)
    if longest is None:
        return GuardStatus()
    waited_s, job = longest
    threshold_s = guard_threshold_s(job, guard_s, xfactor)
    active = waited_s >= threshold_s
    slack = not active and slack_after_s is not None and waited_s >= slack_after_s
    return GuardStatus(active, job.job_id, max(0, waited_s), threshold_s, slack)


def plugin_limit_s(tag: PredictionTag) -> int:
    """The limit job_submit.lua sets in lower mode: the prediction in whole minutes, within the
    request."""
    return min(tag.request_s, whole_minutes_s(tag.prediction_s))


def slack_limit_s(tag: PredictionTag, slack_s: int) -> int:
    """The slack's estimate as a limit: the request less `slack_s`, never below the plugin's
    lowered limit (the simulator's `guard_slack_estimate_s`, on the limit SLURM holds: whole
    minutes when the slack is)."""
    return guard_slack_estimate_s(plugin_limit_s(tag), tag.request_s, slack_s)


def guard_limit_s(state: str, limit_s: int | None, tag: PredictionTag, status: GuardStatus,
                  slack_s: int | None = None) -> int | None:
    """The limit the guard sets now for a job the plugin marked, or None (leave it). A pending
    job is changed only from a limit hpcpredict gave it (not one the user changed since)."""
    lowered_s = plugin_limit_s(tag)
    if limit_s is None or lowered_s >= tag.request_s:
        return None  # no limit, or a prediction that lowered nothing
    estimate_s = lowered_s if slack_s is None else slack_limit_s(tag, slack_s)
    held = tag.mode == "lower" and limit_s == tag.request_s  # the plugin's hold, or the guard's
    if status.active:
        if state == "RUNNING" and limit_s < tag.request_s:
            return tag.request_s
        if state == "PENDING" and limit_s in (lowered_s, estimate_s):
            return tag.request_s
        return None
    if status.slack and slack_s is not None:
        if state == "RUNNING" and limit_s < estimate_s:
            return tag.request_s
        if state == "PENDING" and limit_s != estimate_s and (limit_s == lowered_s or held):
            return estimate_s
        return None
    if state == "PENDING" and limit_s != lowered_s and (held or limit_s == estimate_s):
        return lowered_s
    return None
