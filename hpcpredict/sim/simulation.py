"""Replay a cleaned log through a scheduler, a predictor and a correction policy.

The simulation owns the machine state (waiting queue, running profile, per-job outcome) and
wires the parts: the engine orders events, the scheduler decides, the predictor predicts and
learns, the correction policy extends predictions. Same-instant order is the reference's
(docs/method.md §10): prediction-over, then submission, then termination; jobs decided to start at an
instant start at that instant.

Decisions are taken at every submission and every termination. At a submission, when nothing but
that submission changed since the last decision (no correction since, no job predicted to end at
this instant), every other waiting job is exactly as (in)eligible as it was then, so only the new
job is considered: the same decisions as a full pass, at O(1) instead of O(queue). After a correction the reference
takes no decision (the longer prediction only moves the reservation at the next event);
`decide_on_correction=True` measures the alternative.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from hpcpredict.instants import Instant
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.predictors import Predictor, clip_prediction
from hpcpredict.sim.corrections import CorrectionPolicy
from heapq import heappop, heappush
from itertools import count as counter
from hpcpredict.sim.profile import RunningProfile
from hpcpredict.sim.schedulers import Reservation, Scheduler, WaitingQueue

# Plain ints in the heap's tuples (hpcpredict/instants.py gives the order).
PREDICTION_OVER, SUBMISSION, TERMINATION = (
    int(Instant.PREDICTION_OVER), int(Instant.SUBMISSION), int(Instant.TERMINATION)
)

ProgressCallback = Callable[[int], None]  # called with the number of jobs finished so far


@dataclass
class SimulationResult:
    """Per-job outcome, aligned with `jobs` (index i is jobs[i])."""

    jobs: Sequence[Job]
    machine_procs: int
    scheduler: str
    predictor: str
    correction: str
    start_s: list[int]
    initial_prediction_s: list[int]
    final_prediction_s: list[int]
    corrections: list[int]
    backfilled: list[bool]
    first_reserved_start_s: list[int]  # shadow time first promised as head of the queue, or -1
    wall_time_s: float = 0.0
    settings: dict[str, object] = field(default_factory=dict)

    def wait_s(self, index: int) -> int:
        return self.start_s[index] - self.jobs[index].submit_s


def simulate(
    jobs: Sequence[Job],
    machine_procs: int,
    scheduler: Scheduler,
    predictor: Predictor,
    correction: CorrectionPolicy,
    *,
    decide_on_correction: bool = False,
    exhaustive: bool = False,
    progress: ProgressCallback | None = None,
    progress_every: int = 5000,
) -> SimulationResult:
    """Run the whole log; `jobs` must be sorted by submission time (cleaning does that).

    `exhaustive=True` rescans the whole queue at every event instead of taking the O(1) path
    for a lone new submission: slower, the same decisions (the tests check that).
    """
    wall_start = time.perf_counter()
    count = len(jobs)
    requests, submit_s, run_s, procs, requested_s = job_columns(jobs, machine_procs)

    start_s = [-1] * count
    prediction_s = [0] * count
    initial_prediction_s = [0] * count
    corrections = [0] * count
    backfilled = [False] * count
    first_reserved_start_s = [-1] * count

    # The event heap of engine.EventQueue, inlined: (time, same-instant priority, sequence,
    # job index); a method call per push and pop was a tenth of a replay. The submissions
    # are already in heap order (sorted by time, then by sequence), so no heapify is needed.
    sequence = counter(count)
    events: list[tuple[int, int, int, int]] = [
        (submit_s[index], SUBMISSION, index, index) for index in range(count)
    ]
    waiting = WaitingQueue(
        np.asarray(procs, dtype=np.int64), np.asarray(requested_s, dtype=np.int64), submit_s
    )
    profile = RunningProfile(machine_procs)
    # The running jobs by requested end, for the starvation guard's reservations (requests,
    # unlike predictions, never move: Scheduler's docstring).
    by_request = RunningProfile(machine_procs) if scheduler.starvation_guard_s is not None else None
    # After a guarded decision every running job is planned to its requested end for good, as the
    # live corrector raises their SLURM limits back to their requests and cannot safely lower a
    # running job's limit again (Scheduler's docstring): `pinned` jobs, and the running ones not
    # pinned yet.
    pinned = [False] * count
    unpinned_running: set[int] = set()
    finished = 0
    now_s = 0
    # The head's reservation after the last decision; None when a correction has changed the plan
    # since (or there was no head), which forces a full decision at the next submission.
    reservation: Reservation | None = None

    def start(index: int, was_backfilled: bool) -> None:
        waiting.remove(index)
        start_s[index] = now_s
        backfilled[index] = was_backfilled
        profile.add(index, now_s, now_s + prediction_s[index], procs[index])
        if by_request is not None:
            by_request.add(index, now_s, now_s + requested_s[index], procs[index], checked=False)
            unpinned_running.add(index)
        predictor.job_started(requests[index], now_s)
        correction.job_started(requests[index], now_s)
        heappush(events, (now_s + run_s[index], TERMINATION, next(sequence), index))
        if prediction_s[index] < run_s[index]:
            over_s = now_s + prediction_s[index]
            heappush(events, (over_s, PREDICTION_OVER, next(sequence), index))

    def remember(reservation: Reservation | None) -> None:
        if reservation is None:
            return
        if first_reserved_start_s[reservation.head] < 0:
            first_reserved_start_s[reservation.head] = reservation.shadow_s
        if reservation.guarded and unpinned_running:
            for index in unpinned_running:
                profile.move(index, start_s[index] + prediction_s[index],
                             start_s[index] + requested_s[index])
                prediction_s[index] = requested_s[index]
                pinned[index] = True
            unpinned_running.clear()

    while events:
        now_s, kind, _, index = heappop(events)
        if kind == SUBMISSION:
            predicted = clip_prediction(predictor.predict(requests[index], now_s), requested_s[index])
            prediction_s[index] = initial_prediction_s[index] = predicted
            queue_was_empty = len(waiting) == 0
            waiting.add(index, predicted)
            if (
                not exhaustive
                and not queue_was_empty
                and reservation is not None
                and not profile.ends_by(now_s)
                # the head just became due for the guard: its reservation changes rule
                and (reservation.guarded or not scheduler.guard_due(now_s, waiting, reservation.head))
            ):
                reservation = scheduler.consider_new_job(
                    now_s, waiting, profile, reservation, index, start
                )
                remember(reservation)
            else:
                reservation = scheduler.schedule(now_s, waiting, profile, start, by_request)
                remember(reservation)
        elif kind == TERMINATION:
            predictor.job_ended(requests[index], run_s[index], now_s)
            correction.job_ended(requests[index], run_s[index], now_s)
            profile.remove(index, start_s[index] + prediction_s[index])
            if by_request is not None:
                by_request.remove(index, start_s[index] + requested_s[index])
                unpinned_running.discard(index)
            finished += 1
            if progress is not None and finished % progress_every == 0:
                progress(finished)
            reservation = scheduler.schedule(now_s, waiting, profile, start, by_request)
            remember(reservation)
        elif pinned[index]:
            # Planned to its request since a guarded decision: nothing to correct. A correction
            # earlier at this instant left its decision to the instant's last one: take it here.
            if decide_on_correction and reservation is None and events[0][:2] != (now_s, PREDICTION_OVER):
                reservation = scheduler.schedule(now_s, waiting, profile, start, by_request)
                remember(reservation)
        else:
            elapsed = now_s - start_s[index]
            new_prediction = correction.corrected_prediction_s(
                requested_s[index], initial_prediction_s[index], corrections[index], elapsed,
                user_id=requests[index].user_id, now_s=now_s,
            )
            if not elapsed < new_prediction <= requested_s[index]:
                raise AssertionError(
                    f"correction {correction.name} gave {new_prediction} s for job "
                    f"{jobs[index].job_id} that has run {elapsed} s (request {requested_s[index]} s)"
                )
            corrections[index] += 1
            profile.move(index, now_s, start_s[index] + new_prediction)
            prediction_s[index] = new_prediction
            if new_prediction < run_s[index]:
                heappush(
                    events, (start_s[index] + new_prediction, PREDICTION_OVER, next(sequence), index)
                )
            # Deciding now while another prediction runs out at this same instant would count
            # that job's processors as free (it is predicted to end now) before its correction:
            # wait for the last correction of the instant.
            if decide_on_correction and events[0][:2] != (now_s, PREDICTION_OVER):
                reservation = scheduler.schedule(now_s, waiting, profile, start, by_request)
                remember(reservation)
            else:
                reservation = None

    if progress is not None:
        progress(finished)
    if len(waiting) or len(profile) or finished != count:
        raise AssertionError(f"{count - finished} jobs never finished")
    return SimulationResult(
        jobs=jobs,
        machine_procs=machine_procs,
        scheduler=scheduler.name,
        predictor=predictor.name,
        correction=correction.name,
        start_s=start_s,
        initial_prediction_s=initial_prediction_s,
        final_prediction_s=prediction_s,
        corrections=corrections,
        backfilled=backfilled,
        first_reserved_start_s=first_reserved_start_s,
        wall_time_s=time.perf_counter() - wall_start,
        settings={"decide_on_correction": decide_on_correction, "exhaustive": exhaustive},
    )


def job_columns(
    jobs: Sequence[Job], machine_procs: int
) -> tuple[list[JobRequest], list[int], list[int], list[int], list[int]]:
    """The jobs' requests, submit times, runtimes, processors and requested times as plain lists
    (the replay loops index them), checked for what a replay needs (`_check_input`)."""
    requests = [job.request for job in jobs]
    submit_s = [request.submit_s for request in requests]
    run_s = [job.run_s for job in jobs]
    procs = [request.procs for request in requests]
    requested_s = [request.requested_s for request in requests]
    _check_input(jobs, machine_procs, submit_s, run_s, procs, requested_s)
    return requests, submit_s, run_s, procs, requested_s


def _check_input(
    jobs: Sequence[Job],
    machine_procs: int,
    submit_s: list[int],
    run_s: list[int],
    procs: list[int],
    requested_s: list[int],
) -> None:
    """Refuse input the cleaning step should have fixed, naming the first offending job."""
    previous_submit = None
    for index, job in enumerate(jobs):
        problem = None
        if not 1 <= procs[index] <= machine_procs:
            problem = f"needs {procs[index]} processors on a machine of {machine_procs}"
        elif run_s[index] < 1:
            problem = f"has run time {run_s[index]} s (< 1)"
        elif not run_s[index] <= requested_s[index]:
            problem = f"runs {run_s[index]} s, longer than its request {requested_s[index]} s"
        elif previous_submit is not None and submit_s[index] < previous_submit:
            problem = "is submitted before the job listed before it (jobs must be sorted)"
        if problem:
            raise ValueError(f"job {job.job_id} {problem}; clean the log first (hpcpredict info)")
        previous_submit = submit_s[index]
