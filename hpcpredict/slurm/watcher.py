"""The daemon's eye on SLURM: reports jobs' lives to the service and raises limits in time.

Started by ``hpcpredict serve --slurm``, it polls SLURM every few seconds (one ``squeue --json
--states=all`` through the adapter) and, for every job the plugin marked (``admin_comment``, `tag.py`) or not:

* reports what the service has not seen yet — SUBMITTED (with the prediction the plugin gave,
  so the one recorded is the one SLURM acted on, and the token of the features it was computed
  from, so the job learns from those), STARTED, and ENDED for jobs SLURM still shows finished
  (``jobcomp.lua`` reports every end as well; the service learns each job once; an END of a job
  the service never saw carries the mark's prediction and token, and the service records the
  submission from them first), as typed
  events (`requests.py` builds them from SLURM's view);
* corrects: a running job within `margin_s` of a limit below its request gets the limit the
  correction policy gives (`corrector.py`; INCREMENTAL by default, SURVIVAL with ``correction =
  "survival"``, whose runtime history the service feeds from the events it logs), set with
  ``scontrol update`` and recorded as a LIMIT event;
* guards against starvation (`guard.py`): while a job pending for the machine has waited
  `guard_s` or more (or, with an `xfactor` X, the longest-waiting one X - 1 times its request,
  if sooner), lowered limits go back to the requests and `status` tells PREDICT to hold
  lowering; afterwards pending jobs get their lowered limits again. With a slack (`slack_s`
  from `slack_after_s` of waiting), a softer stage before it: pending jobs at their request less
  the slack, running ones below that at their request, and a job that reaches a limit within the
  slack of its request gets its request (`guard.py`'s module doc).

Everything is derived from SLURM's state and the store's, nothing from memory that a restart
would lose: after a restart the watcher asks the store how far each job got
(`PredictionService.job_status`) and the corrector decides from the job's current limit, so
nothing is reported twice and no limit is raised twice.

Jobs without a time limit (no ``--time`` in a partition without DefaultTime, so SLURM holds
none: squeue's ``UNLIMITED``, or the year its backfill scheduler gives such a job when it starts
it, `tag.BACKFILL_NO_LIMIT_S`) are left out: hpcpredict describes and predicts a job as a fraction
of its request (docs/method.md, features 1 and 5-10), and the simulator's cleaning drops a job whose
request is missing (`hpcpredict.logs.cleaning`, ``requested_time_not_positive``); so such a job is not
recorded, not learned and enters no user's history, on both drivers alike. The plugin leaves it
untouched, the watcher says so once per job (INFO) and counts it (`WatchReport.unlimited`), and
the daemon acknowledges jobcomp.lua's END for it without recording it (docs/protocol.md). A job
that gets the partition's DefaultTime has that limit as its request, and is recorded and learned
with it (the plugin, which sees no ``--time``, does not predict it).

A job first seen already running is submitted at its real submission time with the model of
now (the daemon was down at its submission): its features are an approximation, as for any
job the daemon learns without having seen its submission.

After every look in which each limit change it owed succeeded, the watcher writes its heartbeat
(`heartbeat.py`): the failsafe (`failsafe.py`, a process of its own) puts every lowered limit back
at its request once that file is older than `stale_after_s`, and `holds_lowering` tells PREDICT
not to lower new jobs over the same bound, so a watcher that is stuck (a slow squeue, a store
writer that does not answer) or failing (scontrol refused) stops the lowering it cannot follow.
A look whose only failures are in reporting (the store) still vouches for the limits.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hpcpredict.job_events import JobEvent, LimitChanged
from hpcpredict.corrections.policies import CorrectionPolicy, IncrementalCorrection, RequestWithinSlack
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.slurm import requests
from hpcpredict.slurm.adapter import ENDED_STATES, SlurmJob
from hpcpredict.slurm.corrector import DEFAULT_MARGIN_S, corrected_limit_s
from hpcpredict.slurm.failsafe import DEFAULT_STALE_AFTER_S
from hpcpredict.slurm.guard import GuardStatus, guard_limit_s, guard_status
from hpcpredict.slurm.heartbeat import Heartbeat, write_heartbeat
from hpcpredict.slurm.tag import PredictionTag, parse_tag

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
# A large queue's full listing costs slurmctld ~1 s of CPU at 100,000 jobs, whichever backend
# asks (docs/admin-guide.md, "A large site"): from this many jobs in the last listing, the
# watcher lists the whole queue once every LARGE_QUEUE_FULL_EVERY_S only, and looks in between
# at the jobs that may need it before the next listing, one by one (`SlurmWatcher`'s doc).
LARGE_QUEUE_JOBS = 5_000
LARGE_QUEUE_FULL_EVERY_S = 60.0
NEAR_READS_AT_MOST = 200  # more jobs to look at one by one than this: the look lists them all
CORRECTED_KEPT = 100  # `WatchReport.corrected_jobs`: the latest corrected jobs, for /health
FINAL_STATES = ENDED_STATES
_STAGE = {None: 0, "submitted": 1, "running": 2, "ended": 3}


class SlurmJobs(Protocol):
    def jobs(self) -> Sequence[SlurmJob]: ...

    def job(self, job_id: int) -> SlurmJob | None: ...

    def set_time_limit(self, job_id: int | str, minutes: int) -> None: ...


@dataclass
class WatchReport:
    polls: int = 0
    reported: int = 0
    corrections: int = 0
    guard_changes: int = 0  # limits the starvation guard set (raised to requests, or lowered back)
    errors: int = 0
    limit_failures: int = 0  # limit changes SLURM refused or did not answer (the look is not vouched for)
    read_failures: int = 0  # looks that could not read SLURM's jobs (slurmctld down, squeue failing)
    full_looks: int = 0  # looks that listed the whole queue
    near_looks: int = 0  # looks that read the near jobs one by one (`SlurmWatcher`'s doc)
    unlimited: int = 0  # jobs without a time limit, left out (module doc)
    last_error: str = ""
    corrected_jobs: list[int] = field(default_factory=list)  # the last CORRECTED_KEPT, oldest first


class SlurmWatcher:
    """`record(event)` has the service record a typed job event (`PredictionService.record`,
    in the thread the daemon runs events on; raising if it fails); `job_status(job_id)` reads
    how far the store has the job.

    A look lists the whole queue (a full look), or, on a large queue between full looks, reads
    one by one the jobs that may need a limit change before the next full look (a near look):
    the marked running jobs below their requests that come within the margin of their limits
    by then, and the marked pending jobs lowered below `least_lowered_s` (before the queue grew
    large), which could start now and need it. A job the plugin lowers meanwhile is seen at the
    next full look, so on a large queue PREDICT lowers no job below `least_lowered_s` (a full
    look's period, two looks and SLURM's 30 s check): the corrector sees it in time wherever it
    starts. Submissions and
    starts of other jobs are reported at full looks (ends come from jobcomp.lua as well), and the
    starvation guard is judged there. `full_every_s`: the period of full looks (None: every look
    while the last listing had fewer than LARGE_QUEUE_JOBS jobs, else LARGE_QUEUE_FULL_EVERY_S).
    """

    def __init__(
        self,
        slurm: SlurmJobs,
        record: Callable[[JobEvent], object],
        job_status: Callable[[int], str | None],
        *,
        margin_s: int = DEFAULT_MARGIN_S,
        interval_s: float = DEFAULT_INTERVAL_S,
        policy: CorrectionPolicy = IncrementalCorrection(),
        guard_settings: GuardSettings | None = GuardSettings(),
        heartbeat: str | None = None,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        full_every_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`guard_settings`: the starvation guard (None: off; the daemon's `DaemonConfig.guard`);
        `heartbeat`: the file the failsafe reads (None: none written, as in tests without one);
        `stale_after_s`: past this since the last vouched look, PREDICT holds lowering."""
        settings = guard_settings
        slack_s = None if settings is None else settings.slack_s
        self.slurm = slurm
        self.record = record
        self.job_status = job_status
        self.margin_s = margin_s
        self.interval_s = interval_s
        # With a slack, a limit reached within it of the request gives the request (guard.py).
        self.policy = policy if slack_s is None else RequestWithinSlack(policy, slack_s)
        # The guard's settings as guard.py's pure functions take them: its wait (None: off), its
        # xfactor rule (None: the wait rule), its slack stage (None: none).
        self.guard_s = None if settings is None else settings.wait_s
        self.xfactor = None if settings is None else settings.xfactor
        self.slack_s = slack_s
        self.slack_after_s = None if settings is None else settings.slack_after_s
        # Replaced whole at each poll (one attribute write): PREDICT reads it from another thread.
        self.guard = GuardStatus()
        self.clock = clock
        self.heartbeat = heartbeat
        self.stale_after_s = stale_after_s
        # The last look that vouched for every lowered limit; a new watcher counts from its
        # creation (a job lowered before its first look has a minute: the failsafe's budget).
        self.vouched_at_s = clock()
        self._troubles: set[str] = set()  # failures said once until they clear (`_trouble`)
        self.report = WatchReport()
        self._stages: dict[int, int] = {}
        self.full_every_s = full_every_s
        self._full_at_s: float | None = None  # when the last full look began
        self._listed = 0  # jobs in the last full look's listing
        self._near: dict[int, SlurmJob] = {}  # the jobs near looks read (class doc)
        self._reported: dict[int, SlurmJob] = {}  # each job as its last complete report saw it
        self._tags: dict[int, tuple[str, PredictionTag | None]] = {}  # admin_comment -> its mark
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the loop
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpcpredict-slurm", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception as error:  # noqa: BLE001 - a dead thread would stop every correction
                logger.exception("SLURM watcher: the poll failed; trying again in %g s", self.interval_s)
                self._failed(f"the poll failed: {error!r}")
            self._stop.wait(self.interval_s)

    def poll(self) -> WatchReport:
        """One look at SLURM: report what is new, correct what is due (a full look or a near
        one: the class doc)."""
        self.report.polls += 1
        began_s = self.clock()
        limit_failures = self.report.limit_failures
        if not self._full_look_due(began_s):
            return self._near_look(began_s, limit_failures)
        try:
            jobs = self.slurm.jobs()
        except Exception as error:  # noqa: BLE001 - SLURM down or slow: try again next poll
            self._read_failed(error)
            return self.report
        self._cleared("read", f"SLURM answers again ({self.report.read_failures} look(s) failed)")
        self.report.full_looks += 1
        now_s = int(began_s)
        self._update_guard(guard_status(jobs, now_s, self.guard_s, self.xfactor, self.slack_after_s))
        seen = set()
        reported = self._reported
        near: dict[int, SlurmJob] = {}  # what the near looks until the next full one read
        self._listed = len(jobs)  # (the period and the floor `_may_need_a_change` reads)
        for job in jobs:
            seen.add(job.job_id)
            # Reporting and correcting apart: a report that fails (the store writer stuck or
            # busy) must not cost the job its correction, nor one job's failure the others'.
            # A job as it was at its last report has nothing new to report (most of a large
            # queue, each poll; the lean listing gives an unchanged job as the same object).
            last = reported.get(job.job_id)
            if last is not job and last != job:
                self._step(job, self._report, job)
            tag = self._tag(job)
            if tag is None:
                continue  # not marked: no limit of hpcpredict's to guard or correct
            if self._may_need_a_change(job, tag, began_s):
                near[job.job_id] = job
            # A job whose limit the guard changes is not corrected in the same look: the
            # correction would read the limit from before the guard's (a running job the guard
            # gave its request would be "corrected" below it); the guard only raises a running
            # job, to its request, so nothing is left to correct, and the next look reads SLURM anew.
            guard_limit_s = self._guard_limit_s(job, tag)
            if guard_limit_s is not None:
                self._step(job, self._set_guard_limit, job, guard_limit_s, now_s)
            elif job.state == "RUNNING":
                self._step(job, self._correct, job, tag, now_s)
        for gone in set(self._stages) - seen:  # SLURM forgot it (MinJobAge): so can we
            del self._stages[gone]
        for gone in set(reported) - seen:
            del reported[gone]
            self._tags.pop(gone, None)
        self._full_at_s, self._near = began_s, near
        if self.report.limit_failures == limit_failures:
            self._vouch(began_s)
        return self.report

    # ------------------------------------------------------------------ full and near looks
    def full_period_s(self) -> float:
        """Seconds between full looks now (the class doc)."""
        if self.full_every_s is not None:
            return max(self.full_every_s, self.interval_s)
        return LARGE_QUEUE_FULL_EVERY_S if self._listed >= LARGE_QUEUE_JOBS else self.interval_s

    def least_lowered_s(self) -> int:
        """The shortest limit PREDICT may lower a job to (0: any): a job lowered after a full
        look is first seen at the next one, up to a period later, and must then still have two
        looks and SLURM's 30 s check before its limit (the margin's own bound, config.py)."""
        period_s = self.full_period_s()
        return 0 if period_s <= self.interval_s else int(period_s + 2 * self.interval_s + 30)

    def _full_look_due(self, now_s: float) -> bool:
        period_s = self.full_period_s()
        if (period_s <= self.interval_s or self._full_at_s is None
                or len(self._near) > NEAR_READS_AT_MOST):
            return True
        return now_s - self._full_at_s >= period_s - 0.5  # (a tick's jitter)

    def _may_need_a_change(self, job: SlurmJob, tag: PredictionTag, now_s: float) -> bool:
        """Might `job`, marked `tag`, need the corrector before the next full look (the class
        doc)?"""
        if job.time_limit_s is None or job.time_limit_s >= tag.request_s:
            return False
        if job.state == "RUNNING" and job.start_s is not None:
            horizon_s = self.full_period_s() + self.interval_s
            return job.start_s + job.time_limit_s - self.margin_s <= now_s + horizon_s
        # Pending: lowered below what PREDICT now lowers to at the least (before the queue grew
        # large): it could start now and reach its limit before the next full look.
        return job.state == "PENDING" and job.time_limit_s < self.least_lowered_s()

    def _near_look(self, began_s: float, limit_failures: int) -> WatchReport:
        """Read the near jobs one by one: report a start, correct what is due; vouch as a full
        look does."""
        now_s = int(began_s)
        for job_id in list(self._near):
            try:
                job = self.slurm.job(job_id)
            except Exception as error:  # noqa: BLE001 - as a full look's read
                self._read_failed(error)
                return self.report
            if job is None or job.state in FINAL_STATES:
                del self._near[job_id]  # ended: the next full look reports it, jobcomp.lua already has
                continue
            self._near[job_id] = job
            last = self._reported.get(job_id)
            if last is not job and last != job:
                self._step(job, self._report, job)
            tag = self._tag(job)
            if tag is not None and job.state == "RUNNING":
                self._step(job, self._correct, job, tag, now_s)
        self._cleared("read", f"SLURM answers again ({self.report.read_failures} look(s) failed)")
        self.report.near_looks += 1
        if self.report.limit_failures == limit_failures:
            self._vouch(began_s)
        return self.report

    def _read_failed(self, error: BaseException) -> None:
        self.report.read_failures += 1
        message = f"cannot read SLURM's jobs: {error}"
        self._trouble("read", message, f"{message}; trying again every {self.interval_s:g} s "
                                       f"(PREDICT holds lowering after {self.stale_after_s:g} s)")

    # ------------------------------------------------------------------ the heartbeat
    def _vouch(self, began_s: float) -> None:
        """Every limit change this look owed went through: say so in the heartbeat (the time the
        look began: SLURM's view it acted on), then in memory for `holds_lowering`."""
        if self.heartbeat is not None:
            try:
                beat = Heartbeat(began_s, os.getpid(), self.report.polls)
                try:
                    write_heartbeat(self.heartbeat, beat)
                except FileNotFoundError:  # a per-user state folder not made yet (a site's is systemd's)
                    Path(self.heartbeat).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    write_heartbeat(self.heartbeat, beat)
            except OSError as error:
                self._trouble("heartbeat", f"cannot write the heartbeat {self.heartbeat}: {error}",
                              f"cannot write the heartbeat {self.heartbeat} ({error.strerror or error}): the "
                              "failsafe will put lowered limits back and PREDICT holds lowering until it can")
                return
            self._cleared("heartbeat", f"the heartbeat {self.heartbeat} is written again")
        self.vouched_at_s = began_s

    def _trouble(self, kind: str, message: str, said: str) -> None:
        """A failure that lasts (SLURM unreadable, the heartbeat unwritable): counted and kept as
        the last error at every look, said in the log once, until `_cleared`."""
        self.report.errors += 1
        self.report.last_error = message
        if kind not in self._troubles:
            logger.error("%s", said)
            self._troubles.add(kind)

    def _cleared(self, kind: str, said: str) -> None:
        if kind in self._troubles:
            self._troubles.discard(kind)
            logger.info("%s", said)

    def heartbeat_age_s(self) -> float:
        """Seconds since the last look that vouched for every lowered limit."""
        return max(0.0, self.clock() - self.vouched_at_s)

    def is_stale(self) -> bool:
        return self.heartbeat_age_s() > self.stale_after_s

    # ------------------------------------------------------------------ reporting
    def _report(self, job: SlurmJob) -> None:
        stage = self._stages.get(job.job_id)
        if stage is None:
            stage = _STAGE[self.job_status(job.job_id)]
            if stage == 0 and not requests.has_request(job, parse_tag(job.admin_comment)):
                # No --time and no partition default: no request to describe it by (module doc,
                # "Jobs without a time limit"). Said once, then left alone for its whole life.
                logger.info("job %d has no time limit: not recorded (hpcpredict describes a job by "
                            "its request)", job.job_id)
                self.report.unlimited += 1
                self._stages[job.job_id] = _STAGE["ended"]
                self._reported[job.job_id] = job
                return
        tag = self._tag(job)
        ended = job.state in FINAL_STATES
        if stage < 1 and not ended:
            self.record(requests.submitted(job, tag))
            stage = 1
            self.report.reported += 1
        if stage < 2 and job.start_s and not ended:
            self.record(requests.started(job))
            stage = 2
            self.report.reported += 1
        if stage < 3 and ended and job.end_s:
            self.record(requests.ended(job, tag))
            stage = 3
            self.report.reported += 1
        self._stages[job.job_id] = stage
        self._reported[job.job_id] = job

    def _tag(self, job: SlurmJob) -> PredictionTag | None:
        """The plugin's mark on `job` (`tag.parse_tag`), read once per comment."""
        known = self._tags.get(job.job_id)
        if known is not None and known[0] == job.admin_comment:
            return known[1]
        tag = parse_tag(job.admin_comment)
        self._tags[job.job_id] = (job.admin_comment, tag)
        return tag

    # ------------------------------------------------------------------ the starvation guard
    def _update_guard(self, status: GuardStatus) -> None:
        if status.active != self.guard.active:
            if status.active:
                logger.warning("starvation guard on: job %s has waited %s: lowered limits go back "
                               "to the requests and new jobs are not lowered", status.job_id,
                               self._how_long(status))
            elif not status.slack:
                logger.info("starvation guard off: pending jobs get their lowered limits again")
        if status.slack and not self.guard.slack:
            logger.info("starvation guard's slack stage on: job %s has waited %.1f h (>= %.1f h): "
                        "pending jobs at their requests less %.1f h, running ones below that at "
                        "their requests", status.job_id, status.waited_s / 3600,
                        (self.slack_after_s or 0) / 3600, (self.slack_s or 0) / 3600)
        elif self.guard.slack and not status.slack and not status.active:
            logger.info("starvation guard's slack stage off: pending jobs get their lowered limits again")
        self.guard = status

    def holds_lowering(self) -> str | None:
        """Why PREDICT must tell the plugin not to lower a new job now (None: it may): the watcher
        has not vouched for the lowered limits within `stale_after_s`, or the guard is on, or its
        slack stage (the watcher gives the job its slack estimate at its next look)."""
        if self.is_stale():  # the failsafe is putting limits back, or is about to
            return "watcher_stale"
        guard = self.guard  # (one read: the poll replaces it from another thread)
        if guard.active:
            return "starvation_guard"
        if guard.slack:
            return "starvation_guard_slack"
        return None

    def _how_long(self, status: GuardStatus) -> str:
        """The wait that turned the guard on and the threshold it reached, in the log line: in
        hours by the wait rule (as ever), in seconds by the xfactor rule, whose thresholds can
        be minutes."""
        if self.xfactor is None:
            return f"{status.waited_s / 3600:.1f} h (>= {(self.guard_s or 0) / 3600:.1f} h)"
        return (f"{status.waited_s} s (>= {status.threshold_s} s: an expansion factor of "
                f"{self.xfactor:g} by its request, or {(self.guard_s or 0) / 3600:.1f} h, "
                f"whichever first)")

    def _guard_limit_s(self, job: SlurmJob, tag: PredictionTag) -> int | None:
        """The limit the guard sets for `job`, marked `tag`, now (`guard.guard_limit_s`), or None."""
        if self.guard_s is None:
            return None
        return guard_limit_s(job.state, job.time_limit_s, tag, self.guard, self.slack_s)

    def _set_guard_limit(self, job: SlurmJob, limit_s: int, now_s: int) -> None:
        self._set_limit(job, limit_s)
        self.record(LimitChanged(job.job_id, limit_s, now_s))
        self.report.guard_changes += 1
        stage = "on" if self.guard.active else "slack stage" if self.guard.slack else "off"
        logger.info("job %d (%s): time limit %d -> %d s (starvation guard %s)", job.job_id,
                    job.state.lower(), job.time_limit_s, limit_s, stage)

    # ------------------------------------------------------------------ correcting
    def _correct(self, job: SlurmJob, tag: PredictionTag, now_s: int) -> None:
        if job.start_s is None or job.time_limit_s is None:
            return  # SLURM shows no limit: nothing to correct
        limit_s = corrected_limit_s(
            request_s=tag.request_s,
            prediction_s=tag.prediction_s,
            current_limit_s=job.time_limit_s,
            elapsed_s=now_s - job.start_s,
            margin_s=self.margin_s,
            policy=self.policy,
            user_id=job.uid,
            now_s=now_s,
        )
        if limit_s is None:
            return
        self._set_limit(job, limit_s)
        self.record(LimitChanged(job.job_id, limit_s, now_s))
        self.report.corrections += 1
        corrected = self.report.corrected_jobs
        corrected.append(job.job_id)
        if len(corrected) > 2 * CORRECTED_KEPT:  # (/health shows them: months held millions)
            del corrected[:-CORRECTED_KEPT]
        logger.info("job %d: time limit %d -> %d s (elapsed %d s)", job.job_id, job.time_limit_s,
                    limit_s, now_s - job.start_s)

    def _set_limit(self, job: SlurmJob, limit_s: int) -> None:
        """SLURM's limit of `job` to `limit_s`; a failure is counted as a limit failure, which
        keeps this look from vouching for the limits (module doc)."""
        try:
            self.slurm.set_time_limit(job.update_id, limit_s // 60)
        except Exception:
            self.report.limit_failures += 1
            raise

    def _step(self, job: SlurmJob, action: Callable[..., None], *arguments: object) -> None:
        try:
            action(*arguments)
        except Exception as error:  # noqa: BLE001 - logged and counted; the poll goes on
            self._failed(f"job {job.job_id}: {error}")

    def _failed(self, message: str) -> None:
        self.report.errors += 1
        self.report.last_error = message
        logger.error("%s", message)
