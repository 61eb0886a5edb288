"""Replay a cleaned log through a scheduler, a predictor and a correction policy.

`Simulation` owns the machine state (waiting queue, running profile, per-job outcome), orders the
events and has one handler per kind of event; the scheduler decides, the predictor predicts and
learns, the correction policy extends predictions. Same-instant order is
`hpcpredict.instants.Instant`'s (the reference's, docs/method.md §10): prediction-over, then
submission, then termination; jobs decided to start at an instant start at that instant. Only
terminations go through a heap: submissions come in the log's order, and predictions running
out are read off the running profile before each event (`Simulation._correct_until`).

Decisions are taken at every submission and every termination. At a submission, when nothing but
that submission changed since the last decision (no job predicted to end at this instant, and
no correction since, or corrections that left the head's shadow time where it was and its extra
processors no more: `Simulation._still_valid`), every other waiting job is exactly as
(in)eligible as it was then, so only the new job is considered: the same decisions as a full
pass, at O(1) instead of O(queue). After a correction the reference takes no decision (the
longer prediction only moves the reservation at the next event); `decide_on_correction=True`
measures the alternative.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import dataclass, field
from functools import cached_property
from heapq import heappop, heappush
from itertools import count as counter

import numpy as np

from hpcpredict.collector import collector_paused
from hpcpredict.logs.job_table import JobTable
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.baselines import Predictor, clip_prediction
from hpcpredict.replay_state import history_attribute
from hpcpredict.corrections.policies import CorrectionPolicy, RequestWithinSlack
from hpcpredict.corrections.starvation import guard_slack_estimate_s
from hpcpredict.sim.engine.profile import RunningProfile
from hpcpredict.sim.easy.backfill_kernel import (
    ESTIMATED, ESTIMATES_AS_LIMITS, GUARDED, PREDICTION_ROW, in_estimate_stage,
)
from hpcpredict.sim.easy.schedulers import Reservation, Scheduler, WaitingQueue

# `SimulationResult.loop_reason` when the caller asked for the Python loop (`compiled=False`).
PYTHON_LOOP_ASKED = "asked for"


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
    # Which event loop replayed it: "compiled" (`compiled_replay`, `compiled_slurm_replay`: the
    # configurations `compiled_replay.why_python_loop` lets through) or "python"
    # (`Simulation._run`, `slurm_backfill`'s loop: every option), and then why (`loop_reason`).
    # Same schedules either way (tests/test_replay_kernel.py); said so that a reader knows which
    # code ran.
    loop: str = "python"
    loop_reason: str | None = None
    # The guard's slack stage: the jobs started in front of a
    # head on an estimate below their request, how many outlived it (each moved that head's
    # start), and by how much in all (their runtimes beyond their estimates).
    estimated_starts: int = 0
    estimates_outlived: int = 0
    estimate_overrun_s: int = 0

    def wait_s(self, index: int) -> int:
        return self.start_s[index] - self.jobs[index].submit_s

    def schedule_digest(self) -> str:
        """A short hash of every job's (start, end, last planned runtime, corrections), in log
        order: two replays agree on it exactly when they scheduled every job alike, which is how
        a change that must not move any job is checked (benchmarks/schedule_hashes.py) and how the
        simulator's semantics are pinned (`runner.SEMANTICS_VERSION`)."""
        digest = hashlib.sha256()
        for index, job in enumerate(self.jobs):
            start_s = self.start_s[index]
            digest.update(f"{start_s},{start_s + job.run_s},{self.final_prediction_s[index]},"
                          f"{self.corrections[index]};".encode())
        return digest.hexdigest()[:16]


def simulate(
    *args: Any,
    progress: ProgressCallback | None = None,
    progress_every: int = 5000,
    **options: Any,
) -> SimulationResult:
    """Run the whole log: `Simulation(*args, **options)` (its parameters, not repeated here),
    then `Simulation.run` with the progress callback. `jobs` must be sorted by submission time
    (cleaning does that)."""
    return Simulation(*args, **options).run(progress=progress, progress_every=progress_every)


class Simulation:
    """One replay's machine state, with one handler per kind of event (`Instant`).

    Per-job state lives in plain lists indexed by the job's position in the log (the result's
    columns); the running jobs in a `RunningProfile` by predicted end, the waiting ones in a
    `WaitingQueue`. The event heap holds (time, sequence, job index) tuples for the terminations
    only: the submissions, sorted already, are read in the log's order by an index
    (`next_submission`), and a prediction running out is found in the running profile before
    each event (`_correct_until`) rather than pushed as an event of its own.

    `jobs` must be sorted by submission time (cleaning does that). `exhaustive=True` rescans the
    whole queue at every event instead of taking the O(1) path for a lone new submission:
    slower, the same decisions (the tests check that). `compiled=True` runs the configurations
    `compiled_replay` models in one compiled loop (the same schedules and predictions, bit for
    bit); False keeps every replay in the Python loop (the reference the tests compare it to).
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
        compiled: bool = True,
    ) -> None:
        self.jobs = jobs
        self.machine_procs = machine_procs
        self.scheduler = scheduler
        self.predictor = predictor
        # The slack's estimates are time limits (`Scheduler.estimate_planning`): a job that
        # outlives one gets its request, not `correction`'s next step (`RequestWithinSlack`).
        self.estimates_are_limits = scheduler.estimate_planning == ESTIMATES_AS_LIMITS
        if self.estimates_are_limits:
            assert scheduler.guard is not None and scheduler.guard.slack_s is not None
            correction = RequestWithinSlack(correction, scheduler.guard.slack_s)
        self.correction = correction
        # A pure policy (`policies._Stateless`) ignores starts and ends: not called for them.
        self.correction_hears_jobs = not getattr(correction, "ignores_jobs", False)
        self.decide_on_correction = decide_on_correction
        self.exhaustive = exhaustive
        self.compiled = compiled
        count = len(jobs)
        self.submit_s, self.run_s, self.procs, self.requested_s = number_columns(jobs, machine_procs)
        self.start_s = [-1] * count
        self.prediction_s = [0] * count
        self.initial_prediction_s = [0] * count
        self.corrections = [0] * count
        self.backfilled = [False] * count
        self.first_reserved_start_s = [-1] * count
        self.sequence = counter()
        # Terminations only; the submissions, already sorted, are fed from `next_submission`
        # (a heap of N submissions costs log N a pop), the corrections by `_correct_until`.
        self.events: list[tuple[int, int, int]] = []
        self.next_submission = 0
        self.waiting = WaitingQueue(
            np.asarray(self.procs, dtype=np.int64), np.asarray(self.requested_s, dtype=np.int64),
            self.submit_s,
        )
        if scheduler.guard is not None:
            self.waiting.set_guard_wait(scheduler.guard.due_after_s(self.waiting.requested_s))
        # The guard's slack stage (`GuardSettings.slack_s`, None: off): the jobs
        # started by the current decision (`just_started`, with whether backfilled), the
        # guard-profile end of each running job planned there on its estimate (`estimate_end_s`),
        # and those that will outlive it, by estimated end (`outliving`: moved to their request
        # then, or when a head is guarded: `_plan_estimates_to_requests`).
        self.estimate_slack_s = scheduler.guard.slack_s if scheduler.has_estimate_stage else None
        if self.estimate_slack_s is not None:
            assert scheduler.guard is not None and scheduler.guard.slack_after_s is not None
            self.waiting.set_estimate_wait(scheduler.guard.slack_after_s)
        self.just_started: list[tuple[int, bool]] = []
        self.estimated_starts = self.estimates_outlived = self.estimate_overrun_s = 0
        self.estimate_end_s: dict[int, int] = {}
        self.outliving: list[tuple[int, int]] = []
        self.profile = RunningProfile(machine_procs)
        # The running jobs by requested end, for the starvation guard's reservations (requests,
        # unlike predictions, never move: Scheduler's docstring).
        self.by_request = (
            RunningProfile(machine_procs) if scheduler.guard is not None else None
        )
        # After a guarded decision every running job is planned to its requested end for good,
        # as the live corrector raises their SLURM limits back to their requests and cannot
        # safely lower a running job's limit again (Scheduler's docstring): the running jobs
        # not pinned yet. A pinned job's prediction is its request, never below its runtime, so
        # it is never corrected again.
        self.unpinned_running: set[int] = set()
        self.finished = 0
        self.now_s = 0
        # The head's reservation after the last decision (None when there was no head, which
        # forces a full decision at the next submission), and whether corrections have moved
        # predicted ends since (the reservation is then checked again before it is used).
        self.reservation: Reservation | None = None
        self.plan_moved = False
        self.loop_reason: str | None = None  # why the Python loop replays (`run` decides)

    def run(
        self, *, progress: ProgressCallback | None = None, progress_every: int = 5000
    ) -> SimulationResult:
        self.loop_reason = self.why_python_loop() if self.compiled else PYTHON_LOOP_ASKED
        if self.loop_reason is None:
            from hpcpredict.sim.easy import compiled_replay

            wall_start = time.perf_counter()
            columns = compiled_replay.replay(
                compiled_replay.Machine(
                    *map(self._job_column, ("job_id", "user_id", "submit_s", "run_s", "procs",
                                            "requested_s")),
                    self.waiting.table, self.profile.table,
                    None if self.by_request is None else self.by_request.table,
                    history_attribute(self.predictor, self._job_column)),
                self.scheduler, self.predictor, self.correction, progress, progress_every)
            self.finished = len(self.jobs)
            return self._result(columns.start_s, columns.initial_prediction_s,
                                columns.final_prediction_s, columns.corrections,
                                columns.backfilled, columns.first_reserved_start_s, wall_start,
                                loop="compiled")
        # The cycle collector paused for the replay (`hpcpredict.collector`: it makes tuples at
        # every event and no cycle).
        with collector_paused():
            return self._run(progress, progress_every)

    def _run(self, progress: ProgressCallback | None, progress_every: int) -> SimulationResult:
        wall_start = time.perf_counter()
        events, submit_s, count = self.events, self.submit_s, len(self.jobs)
        profile, decide_on_correction = self.profile, self.decide_on_correction
        finished_before = 0
        outliving = self.outliving
        while True:
            # The next event: a submission goes before a termination at the same instant
            # (Instant order); the heap holds only terminations.
            index = self.next_submission
            if index < count and (not events or submit_s[index] <= events[0][0]):
                now_s, is_submission = submit_s[index], True
            elif events:
                now_s, is_submission = events[0][0], False
            else:
                break
            if outliving and outliving[0][0] <= now_s:
                self._plan_outliving_to_requests(now_s)
            # Predictions running out by then are corrected first (prediction-over is the first
            # kind of event at an instant).
            if profile.ends_by(now_s):
                if decide_on_correction:
                    due_s = self._next_correction_s(now_s)
                    if due_s is not None:
                        self._correct_and_decide(due_s)
                        continue  # its decision may have started jobs ending before now_s
                else:
                    self._correct_until(now_s)
            self.now_s = now_s
            if is_submission:
                self.next_submission = index + 1
                self._submission(index)
            else:
                self._termination(heappop(events)[2])
            if progress is not None and self.finished - finished_before >= progress_every:
                finished_before = self.finished - self.finished % progress_every
                progress(finished_before)
        if progress is not None:
            progress(self.finished)
        count = len(self.jobs)
        if len(self.waiting) or len(self.profile) or self.finished != count:
            raise AssertionError(f"{count - self.finished} jobs never finished")
        return self._result(self.start_s, self.initial_prediction_s, self.prediction_s,
                            self.corrections, self.backfilled, self.first_reserved_start_s,
                            wall_start)

    def _result(
        self, start_s: list[int], initial_prediction_s: list[int], final_prediction_s: list[int],
        corrections: list[int], backfilled: list[bool], first_reserved_start_s: list[int],
        wall_start: float, loop: str = "python",
    ) -> SimulationResult:
        return SimulationResult(
            jobs=self.jobs,
            machine_procs=self.machine_procs,
            scheduler=self.scheduler.name,
            predictor=self.predictor.name,
            correction=self.correction.name,
            start_s=start_s,
            initial_prediction_s=initial_prediction_s,
            final_prediction_s=final_prediction_s,
            corrections=corrections,
            backfilled=backfilled,
            first_reserved_start_s=first_reserved_start_s,
            wall_time_s=time.perf_counter() - wall_start,
            settings={"decide_on_correction": self.decide_on_correction,
                      "exhaustive": self.exhaustive},
            estimated_starts=self.estimated_starts,
            estimates_outlived=self.estimates_outlived,
            estimate_overrun_s=self.estimate_overrun_s,
            loop=loop,
            loop_reason=self.loop_reason,
        )

    @cached_property
    def requests(self) -> list[JobRequest]:
        """The jobs' requests, built when the Python loop first needs them."""
        return job_requests(self.jobs)

    def why_python_loop(self) -> str | None:
        """Why this configuration replays in the Python loop, or None when `compiled_replay`'s
        loop models it (`compiled_replay.why_python_loop`, the one declaration)."""
        from hpcpredict.sim.easy import compiled_replay

        return compiled_replay.why_python_loop(
            self.scheduler, self.predictor, self.correction, self._job_column("job_id"),
            exhaustive=self.exhaustive, decide_on_correction=self.decide_on_correction)

    def _job_column(self, name: str) -> np.ndarray:
        """A field of every job (its request's, or `run_s`) as an int64 array (a `JobTable`'s own
        column, else the replay's own list of it where there is one)."""
        if not isinstance(self.jobs, JobTable) and name in NUMBER_COLUMNS:
            return np.asarray(getattr(self, name), dtype=np.int64)
        return job_column(self.jobs, name)

    # ------------------------------------------------------------------ the two events
    def _submission(self, index: int) -> None:
        now_s, waiting, reservation = self.now_s, self.waiting, self.reservation
        predicted = clip_prediction(
            self.predictor.predict(self.requests[index], now_s), self.requested_s[index]
        )
        self.prediction_s[index] = self.initial_prediction_s[index] = predicted
        queue_was_empty = waiting.count == 0
        if self.estimate_slack_s is not None:
            waiting._estimate_view[index] = guard_slack_estimate_s(
                predicted, self.requested_s[index], self.estimate_slack_s
            )
        waiting.add(index, predicted)
        scheduler = self.scheduler
        if (
            not self.exhaustive
            and not queue_was_empty
            and reservation is not None
            and not self.profile.ends_by(now_s)
            # the head just became due for the guard: its reservation changes rule
            and (reservation.guarded == GUARDED or scheduler.guard is None
                 or scheduler.guard_stage(now_s, waiting, reservation.head) == reservation.guarded)
            and (not self.plan_moved or (reservation := self._still_valid(reservation)) is not None)
        ):
            self._remember(scheduler.consider_new_job(
                now_s, waiting, self.profile, reservation, index, self._start, self.by_request
            ))
        else:
            self._decide()

    def _still_valid(self, reservation: Reservation) -> Reservation | None:
        """The head's reservation as a full decision would compute it now, after corrections,
        if the last decision's other outcomes still hold for it; else None (decide in full).

        Corrections only push running jobs' predicted ends later, past `now_s`: the processors
        free now, the head and every waiting job's size are what they were at the last decision.
        A job that could not start then cannot start now if the shadow time is the same (now is
        later, so fewer jobs end by it) and the extra processors at it are no more: only the new
        submission can start, and `consider_new_job` with the reservation recomputed here takes
        the full pass's decision. About four in five corrected plans keep their shadow time
        (SDSC-BLUE learned replay: 77 k of 95 k full passes saved). A guarded reservation is
        read off requested ends and pins jobs: not handled here (full pass, as before).
        """
        if reservation.guarded:
            return None
        head = reservation.head
        shadow_s, extra = self.profile.reservation(self.waiting.procs_list[head], self.now_s)
        if shadow_s != reservation.shadow_s or extra > reservation.extra:
            return None
        return Reservation(head, shadow_s, extra)

    def _termination(self, index: int) -> None:
        now_s, request, run_s = self.now_s, self.requests[index], self.run_s[index]
        self.predictor.job_ended(request, run_s, now_s)
        if self.correction_hears_jobs:
            self.correction.job_ended(request, run_s, now_s)
        start_s = self.start_s[index]
        guard_end_s = start_s + self.requested_s[index]
        if self.by_request is not None:
            self.unpinned_running.discard(index)
            if self.estimate_end_s:
                guard_end_s = self.estimate_end_s.pop(index, guard_end_s)
                self._plan_estimates_to_requests_if_guarded(now_s)
        self.finished += 1
        # The decision takes the job out of the running profiles first (one compiled call).
        self._remember(self.scheduler.schedule(
            now_s, self.waiting, self.profile, self._start, self.by_request,
            (index, start_s + self.prediction_s[index], guard_end_s),
        ))

    def _note_estimated_starts(self, estimated: bool) -> None:
        """After a decision: a job backfilled in front of a head in the guard's estimate stage
        entered the guard's profile at its estimated end (`schedule_pass`); remember that end,
        and when it will outlive it. When the estimates are limits, it entered the running
        profile there too, as did a job started from the head in its own stage: its prediction
        is its estimate from now on, and it is not pinned to its request (the live guard leaves a
        running job at its estimate, `hpcpredict.slurm.guard`)."""
        waiting = self.waiting
        estimates, limits = waiting.estimate_s, self.estimates_are_limits
        for index, backfilled in self.just_started:
            if backfilled:
                if not estimated:
                    continue
            elif not (limits and in_estimate_stage(waiting.table, index, self.start_s[index])):
                continue
            estimate_s = int(estimates[index])
            if limits:
                self.prediction_s[index] = int(waiting.table[PREDICTION_ROW, index])
                self.unpinned_running.discard(index)
            if estimate_s >= self.requested_s[index]:
                continue
            end_s = self.start_s[index] + estimate_s
            self.estimate_end_s[index] = end_s
            self.estimated_starts += 1
            # (a job ending at its estimate too: at that instant, before its own termination,
            # another may be decided, and the guard's profile must not count it as ended while
            # the running profile does not: every entry a decision reads ends later than now)
            if self.run_s[index] >= estimate_s:
                heappush(self.outliving, (end_s, index))
        self.just_started = []

    def _plan_outliving_to_requests(self, now_s: int) -> None:
        """Jobs planned on their estimate in the guard's profile and still running when it ran
        out are planned to their requests there from then on (at the instant each estimate ran
        out, before any decision at `now_s`): a head's shadow time moves then, once per job."""
        outliving, planned = self.outliving, self.estimate_end_s
        while outliving and outliving[0][0] <= now_s:
            end_s, index = heappop(outliving)
            if planned.get(index) == end_s:  # (not planned to its request already)
                self._plan_to_request(index, end_s)
                overrun_s = self.run_s[index] - (end_s - self.start_s[index])
                if overrun_s > 0:  # (not one that ends at its estimate, at this instant)
                    self.estimates_outlived += 1
                    self.estimate_overrun_s += overrun_s
                del planned[index]
                self.plan_moved = True  # a reservation on the guard's profile is stale

    def _plan_estimates_to_requests_if_guarded(self, now_s: int) -> None:
        """Before a decision in which the guard is due for the head: every running job planned
        on its estimate is planned to its request, so that the guard's reservation is plain
        EASY's, on requests alone, and cannot slide (the estimate stage is the softer one)."""
        waiting = self.waiting
        if not waiting.count or not self.scheduler.guard_due(now_s, waiting, waiting.head()):
            return
        for index, end_s in self.estimate_end_s.items():
            self._plan_to_request(index, end_s)
            if self.estimates_are_limits:
                self._pin(index)
        self.estimate_end_s.clear()

    def _plan_to_request(self, index: int, estimate_end_s: int) -> None:
        """Move a running job planned on its estimate to its requested end in the guard's
        profile."""
        assert self.by_request is not None
        self.by_request.move(index, estimate_end_s, self.start_s[index] + self.requested_s[index])

    # ------------------------------------------------------------------ corrections
    # No event marks a prediction running out: before each event, the running profile (by
    # predicted end) tells which running jobs are past their prediction, and they are corrected
    # as their prediction-over events would have been, at the instant each prediction ran out.
    # A job whose prediction is at least its runtime (a correct one, or pinned to its request)
    # ends by its termination event, never by a correction.

    def _correct_until(self, now_s: int) -> None:
        """Correct every running job whose predicted end is at or before `now_s`, the next
        event's instant, until its prediction covers its runtime or runs past `now_s`.

        Nothing reads a prediction between two events (no decision follows a correction, the
        reference's rule), so a job's corrections up to the next event are taken at once: one
        profile move however many corrections. The policy is asked at each correction's own
        instant (`now_s=at_s`), with the state the events before `now_s` left it in, as a
        prediction-over event at that instant would have asked it.
        """
        prediction_s, run_s, corrected_prediction_s = (
            self.prediction_s, self.run_s, self.correction.corrected_prediction_s
        )
        moves: list[tuple[int, int]] = []  # (position in the profile, new predicted end)
        for position, (end_s, index) in enumerate(self.profile.ending_by(now_s)):
            job_run_s = run_s[index]
            if prediction_s[index] >= job_run_s:
                continue
            start_s, requested_s = self.start_s[index], self.requested_s[index]
            initial_s, user_id = self.initial_prediction_s[index], self.requests[index].user_id
            corrections, at_s = self.corrections[index], end_s
            while True:
                elapsed = at_s - start_s
                new_prediction = corrected_prediction_s(
                    requested_s, initial_s, corrections, elapsed, user_id=user_id, now_s=at_s,
                )
                if not elapsed < new_prediction <= requested_s:
                    self._bad_correction(index, new_prediction, elapsed)
                corrections += 1
                at_s = start_s + new_prediction
                if new_prediction >= job_run_s or at_s > now_s:
                    break
            self.corrections[index] = corrections
            moves.append((position, at_s))
            prediction_s[index] = new_prediction
        if moves:
            self.profile.postpone(moves)
            # The plan changed: the next submission checks the reservation again (`_still_valid`).
            self.plan_moved = True

    def _next_correction_s(self, now_s: int) -> int | None:
        """The first instant at or before `now_s` at which a running job's prediction runs out
        before its runtime (`decide_on_correction`), or None."""
        prediction_s, run_s = self.prediction_s, self.run_s
        for end_s, index in self.profile.ending_by(now_s):
            if prediction_s[index] < run_s[index]:
                return end_s
        return None

    def _correct_and_decide(self, due_s: int) -> None:
        """`decide_on_correction`: correct once every job whose prediction runs out at `due_s`,
        then decide at `due_s`, after the instant's last correction: deciding between two of them
        would count the second job's processors as free (it is predicted to end now)."""
        self.now_s = due_s
        start_s, prediction_s, run_s = self.start_s, self.prediction_s, self.run_s
        for end_s, index in self.profile.ending_by(due_s):
            if end_s < due_s or prediction_s[index] >= run_s[index]:
                continue
            elapsed, requested_s = due_s - start_s[index], self.requested_s[index]
            new_prediction = self.correction.corrected_prediction_s(
                requested_s, self.initial_prediction_s[index], self.corrections[index], elapsed,
                user_id=self.requests[index].user_id, now_s=due_s,
            )
            if not elapsed < new_prediction <= requested_s:
                self._bad_correction(index, new_prediction, elapsed)
            self.corrections[index] += 1
            self.profile.move(index, due_s, start_s[index] + new_prediction)
            prediction_s[index] = new_prediction
        self._decide()

    def _bad_correction(self, index: int, new_prediction: int, elapsed: int) -> None:
        """A policy must extend the prediction past the time run, within the request."""
        raise AssertionError(
            f"correction {self.correction.name} gave {new_prediction} s for job "
            f"{self.jobs[index].job_id} that has run {elapsed} s "
            f"(request {self.requested_s[index]} s)"
        )

    # ------------------------------------------------------------------ decisions
    def _decide(self) -> None:
        """A full scheduling pass at this instant."""
        if self.estimate_end_s:
            self._plan_estimates_to_requests_if_guarded(self.now_s)
        self._remember(self.scheduler.schedule(
            self.now_s, self.waiting, self.profile, self._start, self.by_request
        ))

    def _start(self, index: int, was_backfilled: bool) -> None:
        """A job the scheduler started (it moved it from the waiting queue into the running
        profiles): its outcome, the predictor, the correction policy, its termination event."""
        now_s, request = self.now_s, self.requests[index]
        self.start_s[index] = now_s
        self.backfilled[index] = was_backfilled
        run_s = self.run_s[index]
        if self.by_request is not None:
            self.unpinned_running.add(index)
            if self.scheduler.has_estimate_stage:
                self.just_started.append((index, was_backfilled))
        self.predictor.job_started(request, now_s)
        if self.correction_hears_jobs:
            self.correction.job_started(request, now_s)
        heappush(self.events, (now_s + run_s, next(self.sequence), index))

    def _remember(self, reservation: Reservation | None) -> None:
        """Keep the head's reservation after a decision; after a guarded one, pin the running."""
        self.reservation = reservation
        self.plan_moved = False
        if self.just_started:
            self._note_estimated_starts(reservation is not None and reservation.guarded == ESTIMATED)
        if self.estimate_end_s and reservation is not None and reservation.guarded == GUARDED:
            # A head the guard is due for only after this pass's head starts: its reservation
            # was read off estimates still; plan them to requests now, and decide in full next
            # time (as `_decide` does before a pass whose head is due).
            self._plan_estimates_to_requests_if_guarded(self.now_s)
            self.plan_moved = True
        if reservation is None:
            return
        if self.first_reserved_start_s[reservation.head] < 0:
            self.first_reserved_start_s[reservation.head] = reservation.shadow_s
        if reservation.guarded and self.unpinned_running:
            if reservation.guarded == ESTIMATED and self.estimates_are_limits:
                self._pin_below_slack()
                return
            for index in self.unpinned_running:
                self._pin(index)
            self.unpinned_running.clear()

    def _pin_below_slack(self) -> None:
        """A decision in the slack's stage pins the running jobs planned further than the slack
        below their requests, as the live guard raises a running job's limit below its slack
        estimate to its request (`hpcpredict.slurm.guard`); the others (started on their
        estimates, or planned within the slack) keep their plan, and get their request when
        they outlive it (`RequestWithinSlack`) or the guard falls due."""
        slack_s, requested_s, prediction_s = self.estimate_slack_s, self.requested_s, self.prediction_s
        assert slack_s is not None
        pinned = [index for index in self.unpinned_running
                  if prediction_s[index] < requested_s[index] - slack_s]
        for index in pinned:
            self._pin(index)
        self.unpinned_running.difference_update(pinned)

    def _pin(self, index: int) -> None:
        """Plan a running job to its requested end in the running profile, for good."""
        start_s, requested_s = self.start_s[index], self.requested_s[index]
        self.profile.move(index, start_s + self.prediction_s[index], start_s + requested_s)
        self.prediction_s[index] = requested_s


NUMBER_COLUMNS = ("submit_s", "run_s", "procs", "requested_s")  # `number_columns`' order


def job_columns(
    jobs: Sequence[Job], machine_procs: int
) -> tuple[list[JobRequest], list[int], list[int], list[int], list[int]]:
    """The jobs' requests, submit times, runtimes, processors and requested times as plain lists
    (the replay loops index them), checked for what a replay needs (`_check_input`)."""
    return (job_requests(jobs), *number_columns(jobs, machine_procs))


def job_column(jobs: Sequence[Job], name: str) -> np.ndarray:
    """A field of every job as an int64 array: a `JobTable`'s own column, else its request's
    field read from each job (what the compiled loops need that `number_columns` does not give)."""
    if isinstance(jobs, JobTable):
        return np.asarray(jobs.columns[name], dtype=np.int64)
    return np.fromiter((getattr(job.request, name) for job in jobs), dtype=np.int64,
                       count=len(jobs))


def job_requests(jobs: Sequence[Job]) -> list[JobRequest]:
    """The jobs' requests (from a `JobTable`, the only objects it builds: the predictors read
    them in the Python loop)."""
    return jobs.requests() if isinstance(jobs, JobTable) else [job.request for job in jobs]


def number_columns(
    jobs: Sequence[Job], machine_procs: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The jobs' submit times, runtimes, processors and requested times as plain lists, checked
    for what a replay needs (`_check_input`). From a `JobTable`, from its columns: no object is
    built (the compiled loop needs none, and 300 k requests cost ~1 s)."""
    if isinstance(jobs, JobTable):
        columns = [jobs.columns[name] for name in NUMBER_COLUMNS]
        _check_input(jobs, machine_procs, *columns)
        submit_s, run_s, procs, requested_s = (column.tolist() for column in columns)
        return submit_s, run_s, procs, requested_s
    requests = [job.request for job in jobs]
    submit_s = [request.submit_s for request in requests]
    run_s = [job.run_s for job in jobs]
    procs = [request.procs for request in requests]
    requested_s = [request.requested_s for request in requests]
    _check_input(jobs, machine_procs, submit_s, run_s, procs, requested_s)
    return submit_s, run_s, procs, requested_s


def _check_input(
    jobs: Sequence[Job],
    machine_procs: int,
    submit_s: Sequence[int] | np.ndarray,
    run_s: Sequence[int] | np.ndarray,
    procs: Sequence[int] | np.ndarray,
    requested_s: Sequence[int] | np.ndarray,
) -> None:
    """Refuse input the cleaning step should have fixed, naming the first offending job (the
    job objects are read only then). The checks run on arrays (a Python loop over 300 k jobs
    costs ~0.15 s); the loop runs only to name the job when one fails."""
    if len(submit_s):
        submits, runs, sizes, limits = (np.asarray(column, dtype=np.int64)
                                        for column in (submit_s, run_s, procs, requested_s))
        if ((sizes >= 1).all() and (sizes <= machine_procs).all() and (runs >= 1).all()
                and (runs <= limits).all() and (np.diff(submits) >= 0).all()):
            return
    previous_submit = None
    for index in range(len(submit_s)):
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
            raise ValueError(f"job {jobs[index].job_id} {problem}; clean the log first (hpcpredict info)")
        previous_submit = submit_s[index]
