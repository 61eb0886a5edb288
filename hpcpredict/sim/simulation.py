"""Replay a cleaned log through a scheduler, a predictor and a correction policy.

`Simulation` owns the machine state (waiting queue, running profile, per-job outcome), orders the
events in a heap and has one handler per kind of event; the scheduler decides, the predictor
predicts and learns, the correction policy extends predictions. Same-instant order is
`hpcpredict.instants.Instant`'s (the reference's, docs/method.md §10): prediction-over, then
submission, then termination; jobs decided to start at an instant start at that instant.

Decisions are taken at every submission and every termination. At a submission, when nothing but
that submission changed since the last decision (no correction since, no job predicted to end at
this instant), every other waiting job is exactly as (in)eligible as it was then, so only the new
job is considered: the same decisions as a full pass, at O(1) instead of O(queue). After a
correction the reference takes no decision (the longer prediction only moves the reservation at the next event);
`decide_on_correction=True` measures the alternative.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from heapq import heappop, heappush
from itertools import count as counter

import numpy as np

from hpcpredict.instants import Instant
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.predictors import Predictor, clip_prediction
from hpcpredict.corrections.policies import CorrectionPolicy
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
    simulation = Simulation(jobs, machine_procs, scheduler, predictor, correction,
                            decide_on_correction=decide_on_correction, exhaustive=exhaustive)
    return simulation.run(progress=progress, progress_every=progress_every)


class Simulation:
    """One replay's machine state, with one handler per kind of event (`Instant`).

    Per-job state lives in plain lists indexed by the job's position in the log (the result's
    columns); the running jobs in a `RunningProfile` by predicted end, the waiting ones in a
    `WaitingQueue`. The event heap holds (time, `Instant`, sequence, job index) tuples: the
    submissions are already in heap order (sorted by time, then by sequence), so no heapify.
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        machine_procs: int,
        scheduler: Scheduler,
        predictor: Predictor,
        correction: CorrectionPolicy,
        *,
        decide_on_correction: bool = False,
        exhaustive: bool = False,
    ) -> None:
        self.jobs = jobs
        self.machine_procs = machine_procs
        self.scheduler = scheduler
        self.predictor = predictor
        self.correction = correction
        self.decide_on_correction = decide_on_correction
        self.exhaustive = exhaustive
        count = len(jobs)
        self.requests, self.submit_s, self.run_s, self.procs, self.requested_s = job_columns(
            jobs, machine_procs
        )
        self.start_s = [-1] * count
        self.prediction_s = [0] * count
        self.initial_prediction_s = [0] * count
        self.corrections = [0] * count
        self.backfilled = [False] * count
        self.first_reserved_start_s = [-1] * count
        self.sequence = counter(count)
        self.events: list[tuple[int, int, int, int]] = [
            (self.submit_s[index], SUBMISSION, index, index) for index in range(count)
        ]
        self.waiting = WaitingQueue(
            np.asarray(self.procs, dtype=np.int64), np.asarray(self.requested_s, dtype=np.int64),
            self.submit_s,
        )
        self.profile = RunningProfile(machine_procs)
        # The running jobs by requested end, for the starvation guard's reservations (requests,
        # unlike predictions, never move: Scheduler's docstring).
        self.by_request = (
            RunningProfile(machine_procs) if scheduler.starvation_guard_s is not None else None
        )
        # After a guarded decision every running job is planned to its requested end for good,
        # as the live corrector raises their SLURM limits back to their requests and cannot
        # safely lower a running job's limit again (Scheduler's docstring): `pinned` jobs, and
        # the running ones not pinned yet.
        self.pinned = [False] * count
        self.unpinned_running: set[int] = set()
        self.finished = 0
        self.now_s = 0
        # The head's reservation after the last decision; None when a correction has changed the
        # plan since (or there was no head), which forces a full decision at the next submission.
        self.reservation: Reservation | None = None

    def run(
        self, *, progress: ProgressCallback | None = None, progress_every: int = 5000
    ) -> SimulationResult:
        wall_start = time.perf_counter()
        handlers = {
            PREDICTION_OVER: self._prediction_over,
            SUBMISSION: self._submission,
            TERMINATION: self._termination,
        }
        events = self.events
        finished_before = 0
        while events:
            now_s, kind, _, index = heappop(events)
            self.now_s = now_s
            handlers[kind](index)
            if progress is not None and self.finished - finished_before >= progress_every:
                finished_before = self.finished - self.finished % progress_every
                progress(finished_before)
        if progress is not None:
            progress(self.finished)
        count = len(self.jobs)
        if len(self.waiting) or len(self.profile) or self.finished != count:
            raise AssertionError(f"{count - self.finished} jobs never finished")
        return SimulationResult(
            jobs=self.jobs,
            machine_procs=self.machine_procs,
            scheduler=self.scheduler.name,
            predictor=self.predictor.name,
            correction=self.correction.name,
            start_s=self.start_s,
            initial_prediction_s=self.initial_prediction_s,
            final_prediction_s=self.prediction_s,
            corrections=self.corrections,
            backfilled=self.backfilled,
            first_reserved_start_s=self.first_reserved_start_s,
            wall_time_s=time.perf_counter() - wall_start,
            settings={"decide_on_correction": self.decide_on_correction,
                      "exhaustive": self.exhaustive},
        )

    # ------------------------------------------------------------------ the three events
    def _submission(self, index: int) -> None:
        now_s, waiting, reservation = self.now_s, self.waiting, self.reservation
        predicted = clip_prediction(
            self.predictor.predict(self.requests[index], now_s), self.requested_s[index]
        )
        self.prediction_s[index] = self.initial_prediction_s[index] = predicted
        queue_was_empty = len(waiting) == 0
        waiting.add(index, predicted)
        if (
            not self.exhaustive
            and not queue_was_empty
            and reservation is not None
            and not self.profile.ends_by(now_s)
            # the head just became due for the guard: its reservation changes rule
            and (reservation.guarded or not self.scheduler.guard_due(now_s, waiting, reservation.head))
        ):
            self._remember(self.scheduler.consider_new_job(
                now_s, waiting, self.profile, reservation, index, self._start
            ))
        else:
            self._decide()

    def _termination(self, index: int) -> None:
        now_s, request, run_s = self.now_s, self.requests[index], self.run_s[index]
        self.predictor.job_ended(request, run_s, now_s)
        self.correction.job_ended(request, run_s, now_s)
        start_s = self.start_s[index]
        self.profile.remove(index, start_s + self.prediction_s[index])
        if self.by_request is not None:
            self.by_request.remove(index, start_s + self.requested_s[index])
            self.unpinned_running.discard(index)
        self.finished += 1
        self._decide()

    def _prediction_over(self, index: int) -> None:
        now_s = self.now_s
        if self.pinned[index]:
            # Planned to its request since a guarded decision: nothing to correct. A correction
            # earlier at this instant left its decision to the instant's last one: take it here.
            if self.decide_on_correction and self.reservation is None and not self._more_corrections_now():
                self._decide()
            return
        start_s, requested_s, run_s = self.start_s[index], self.requested_s[index], self.run_s[index]
        initial_s, user_id = self.initial_prediction_s[index], self.requests[index].user_id
        # The job's next corrections that fall before the next event are taken here at once:
        # nothing reads the job's prediction in between (no decision follows a correction unless
        # decide_on_correction), so only its last value matters: one profile move instead of one
        # event, one move and one heap push per correction.
        horizon_s = self.events[0][0] if not self.decide_on_correction else now_s
        corrections, at_s = self.corrections[index], now_s
        while True:
            elapsed = at_s - start_s
            new_prediction = self.correction.corrected_prediction_s(
                requested_s, initial_s, corrections, elapsed, user_id=user_id, now_s=at_s,
            )
            if not elapsed < new_prediction <= requested_s:
                raise AssertionError(
                    f"correction {self.correction.name} gave {new_prediction} s for job "
                    f"{self.jobs[index].job_id} that has run {elapsed} s (request {requested_s} s)"
                )
            corrections += 1
            at_s = start_s + new_prediction
            if new_prediction >= run_s or at_s >= horizon_s:
                break
        self.corrections[index] = corrections
        self.profile.move(index, now_s, at_s)
        self.prediction_s[index] = new_prediction
        if new_prediction < run_s:
            heappush(self.events,
                     (start_s + new_prediction, PREDICTION_OVER, next(self.sequence), index))
        # Deciding now while another prediction runs out at this same instant would count that
        # job's processors as free (it is predicted to end now) before its correction: wait for
        # the last correction of the instant.
        if self.decide_on_correction and not self._more_corrections_now():
            self._decide()
        else:
            self.reservation = None

    # ------------------------------------------------------------------ decisions
    def _more_corrections_now(self) -> bool:
        events = self.events
        return bool(events) and events[0][:2] == (self.now_s, PREDICTION_OVER)

    def _decide(self) -> None:
        """A full scheduling pass at this instant."""
        self._remember(self.scheduler.schedule(
            self.now_s, self.waiting, self.profile, self._start, self.by_request
        ))

    def _start(self, index: int, was_backfilled: bool) -> None:
        now_s, request = self.now_s, self.requests[index]
        self.waiting.remove(index)
        self.start_s[index] = now_s
        self.backfilled[index] = was_backfilled
        prediction_s, run_s = self.prediction_s[index], self.run_s[index]
        procs = self.procs[index]
        self.profile.add(index, now_s, now_s + prediction_s, procs)
        if self.by_request is not None:
            self.by_request.add(index, now_s, now_s + self.requested_s[index], procs, checked=False)
            self.unpinned_running.add(index)
        self.predictor.job_started(request, now_s)
        self.correction.job_started(request, now_s)
        events, sequence = self.events, self.sequence
        heappush(events, (now_s + run_s, TERMINATION, next(sequence), index))
        if prediction_s < run_s:
            heappush(events, (now_s + prediction_s, PREDICTION_OVER, next(sequence), index))

    def _remember(self, reservation: Reservation | None) -> None:
        """Keep the head's reservation after a decision; after a guarded one, pin the running."""
        self.reservation = reservation
        if reservation is None:
            return
        if self.first_reserved_start_s[reservation.head] < 0:
            self.first_reserved_start_s[reservation.head] = reservation.shadow_s
        if reservation.guarded and self.unpinned_running:
            start_s, prediction_s, requested_s = self.start_s, self.prediction_s, self.requested_s
            for index in self.unpinned_running:
                self.profile.move(index, start_s[index] + prediction_s[index],
                                  start_s[index] + requested_s[index])
                prediction_s[index] = requested_s[index]
                self.pinned[index] = True
            self.unpinned_running.clear()


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
