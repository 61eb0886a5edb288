"""Replay a log *as it happened* into a predictor: how ``hpcpredict train`` warms the daemon.

The simulator re-schedules a log's jobs, so their start times are its own; a history replay
instead takes each job's start from the log (submission + SWF wait) — what the site's real
scheduler did, which is what a daemon that had been running then would have seen. Each job gives
the predictor the three events the daemon receives live (submitted, started, ended), in time
order, with the same-instant order of every replay (hpcpredict/instants.py: submission, termination, start),
so a model trained here is the model the daemon would have had.

A job with an unknown wait (SWF -1) is taken to start at its submission: it then counts in its
user's running jobs a little early, never late (features 11-15); the count is reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hpcpredict.instants import Instant
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.baselines import Predictor



@dataclass(frozen=True, slots=True)
class HistoryEvent:
    time_s: int
    kind: Instant  # SUBMISSION, TERMINATION or START
    request: JobRequest  # times shifted by the offset
    run_s: int


@dataclass(frozen=True, slots=True)
class HistoryReplay:
    jobs: int
    unknown_wait: int  # jobs whose SWF wait was -1 (started at submission)
    first_submit_s: int | None  # in the predictor's clock (log time + offset)
    last_end_s: int | None


def history_events(jobs: Sequence[Job], *, offset_s: int = 0) -> tuple[list[HistoryEvent], int]:
    """The submitted/started/ended events of `jobs` in replay order, and how many jobs had an
    unknown wait. `offset_s` is added to every time (see `replay_history`)."""
    keys: list[tuple[int, Instant, int]] = []  # (time, kind, index): sorts without comparing jobs
    requests = []
    unknown_wait = 0
    for index, job in enumerate(jobs):
        request = dataclasses.replace(job.request, submit_s=job.request.submit_s + offset_s)
        requests.append(request)
        wait_s = job.wait_s
        if wait_s < 0:
            unknown_wait += 1
            wait_s = 0
        start_s = request.submit_s + wait_s
        keys.append((request.submit_s, Instant.SUBMISSION, index))
        keys.append((start_s, Instant.START, index))
        keys.append((start_s + job.run_s, Instant.TERMINATION, index))
    keys.sort()
    events = [HistoryEvent(t, kind, requests[i], jobs[i].run_s) for t, kind, i in keys]
    return events, unknown_wait


def replay_history(
    jobs: Sequence[Job],
    predictor: Predictor,
    *,
    offset_s: int = 0,
    progress: Callable[[int], None] | None = None,
) -> HistoryReplay:
    """Feed `jobs` to `predictor` as submitted/started/ended events, in time order.

    `offset_s` is added to every time: the log's UnixStartTime, so that a daemon (whose clock is
    Unix seconds) continues from the history without a jump. `progress` is called with the
    number of jobs ended since its last call.
    """
    events, unknown_wait = history_events(jobs, offset_s=offset_s)
    ended = 0
    for event in events:
        if event.kind is Instant.SUBMISSION:
            predictor.predict(event.request, event.time_s)
        elif event.kind is Instant.START:
            predictor.job_started(event.request, event.time_s)
        else:
            predictor.job_ended(event.request, event.run_s, event.time_s)
            ended += 1
            if progress is not None and ended % 1000 == 0:
                progress(1000)
    if progress is not None and ended % 1000:
        progress(ended % 1000)
    return HistoryReplay(
        jobs=len(jobs),
        unknown_wait=unknown_wait,
        first_submit_s=events[0].time_s if events else None,
        last_end_s=events[-1].time_s if events else None,
    )
