"""A SLURM-like scheduler: Slurm 22.05's sched/backfill with its main scheduler (docs/method.md §7).

What SLURM does, as read in slurmctld's job_scheduler.c and plugins/sched/backfill/backfill.c
(22.05) and the slurm.conf man page of Debian's 22.05.8, and what is modelled here:

* **Priority order.** Pending jobs are walked by decreasing priority. `priority/basic` (the
  default `PriorityType`) is first in, first out; `priority/multifactor` with only
  `PriorityWeightAge` is the same order (every pending job ages at the same rate, capped at
  `PriorityMaxAge`, ties by job id). `PriorityWeightJobSize` adds a size factor (processors over
  the machine, or its complement with `PriorityFavorSmall`), which changes the order as jobs age.
  Fair-share and QOS are not modelled (one account, one QOS).
* **The main scheduler** runs on events (a submission, a job's end): in priority order it starts
  jobs while they fit *now* and stops at the first that does not ("once any job in a partition is
  left pending, no other jobs in that partition will be scheduled", sched_config.html). One
  partition, so the first blocked job stops it.
* **The backfill scheduler** runs every `bf_interval` seconds, only when something changed since
  its last pass (backfill.c's `_more_work`). It tests at most `bf_max_job_test` jobs in priority
  order and plans each at its earliest start given the running jobs (until start + time limit) and
  the reservations of the jobs tested before it; a job that can start now, without touching those
  reservations, starts; any other whose start falls within `bf_window` minutes gets a reservation
  (SLURM reserves for *every* job it tests, not only the head: `bf_job_part_count_reserve=0`).
  Reservations end at `bf_resolution` boundaries (backfill.c's `_set_slot_time` rounds the end
  up) and are cut at the window's end, beyond which the backfill map knows nothing.

The time limit SLURM plans with is the job's *current prediction* here, exactly as EASY plans with
it: with the `requested` predictor that is the user's limit (plain SLURM), with a learned one the
limit hpcpredict's plugin lowered, raised by the correction policy as the corrector raises it.

Approximations, stated so that the validation against a real slurmctld (docs/slurm-replay.md)
can be read: processors are counted, not placed, which is exact for nodes of one CPU (the replay's
cluster) as long as placement never fragments; a reservation starts at its exact start (SLURM
rounds it down to `bf_resolution`, which on nodes both busy and reserved changes nothing); the
select plugin's coarsening of far running-job ends (`bf_window_linear`) and the passes' own
duration, lock yields and `batch_sched_delay` are not modelled; the periodic main pass
(`sched_interval`) is not either, since in FIFO order it starts nothing the event passes would not.

The backfill pass runs compiled (`slurm_backfill_kernel.backfill_pass`), and so does the whole
event loop where it models the predictor and the correction (`compiled_slurm_replay`: the
defaults and the published baselines; 1-4x faster, docs/performance.md). The loop below is the
reference it is held to bit for bit (tests/test_slurm_replay_kernel.py), and replays the rest.

Invariants (checked as the simulation runs and by tests/test_slurm_backfill.py): no start ever
over-allocates the machine (`RunningProfile.add` checks it), every job starts at or after its
submission, and with exact runtimes, `bf_resolution=1`, `bf_interval=1` and no test limit no job
starts after the first start it was promised (conservative backfilling).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from itertools import count as counter

import numpy as np

from hpcpredict.instants import Instant
from hpcpredict.jobs import Job
from hpcpredict.learn.baselines import Predictor, clip_prediction
from hpcpredict.replay_state import history_attribute
from hpcpredict.corrections.policies import CorrectionPolicy, RequestWithinSlack
from hpcpredict.corrections.starvation import GuardSettings, guard_slack_estimate_s
from hpcpredict.sim.engine.profile import RunningProfile, never_fits
from hpcpredict.sim.slurm_model.slurm_backfill_kernel import NEVER_FITS, backfill_pass as planned_pass, priority_order
from hpcpredict.sim.easy.compiled_replay import ReplayColumns, why_python_for_jobs
from hpcpredict.sim.easy.simulation import (
    NUMBER_COLUMNS,
    PYTHON_LOOP_ASKED,
    ProgressCallback,
    SimulationResult,
    job_column,
    job_columns,
    number_columns,
)
from hpcpredict.sim.slurm_model.slurm_params import NAME, SlurmParams, SlurmParamsError  # re-exported

# Same-instant order (hpcpredict/instants.py): the periodic backfill pass comes last, seeing every
# submission and end of its instant, as slurmctld's backfill thread would. Plain ints in the heap.
PREDICTION_OVER, SUBMISSION, TERMINATION, BACKFILL = (
    int(Instant.PREDICTION_OVER), int(Instant.SUBMISSION), int(Instant.TERMINATION),
    int(Instant.BACKFILL_PASS),
)


@dataclass(frozen=True)
class SlurmBackfill:
    """The scheduler's settings; `simulate_slurm` runs it."""

    params: SlurmParams = SlurmParams()
    name: str = NAME
    # The daemon's live starvation guard (None: off; `simulate_slurm` says what it does): its
    # wait, its "xfactor" rule and its slack stage, the daemon's own (no "promise" rule).
    guard: GuardSettings | None = None

    def __post_init__(self) -> None:
        if self.guard is not None and self.guard.rule == "promise":
            raise ValueError(f"the guard rule 'promise' is modelled for the EASY schedulers only, not {NAME}")

    def order(self, now_s: int, pending: list[int], submit_s: np.ndarray, procs: np.ndarray,
              machine_procs: int) -> list[int]:
        """Pending jobs (in submission order) by decreasing priority, ties by submission: the
        multifactor priority is PriorityWeightAge x the age (capped at PriorityMaxAge, as a
        share of it) + PriorityWeightJobSize x the share of the machine the job asks for (or
        its complement with PriorityFavorSmall), computed and sorted compiled
        (`slurm_backfill_kernel.priority_order`: a pass sorts every pending job)."""
        p = self.params
        if not p.multifactor:
            return pending  # FIFO: kept in submission order
        return priority_order(
            np.array(pending, dtype=np.int64), now_s, submit_s, procs, machine_procs,
            p.priority_weight_age, p.priority_weight_job_size, p.priority_max_age_s,
            p.priority_favor_small).tolist()


def simulate_slurm(
    jobs: Sequence[Job],
    machine_procs: int,
    scheduler: SlurmBackfill,
    predictor: Predictor,
    correction: CorrectionPolicy,
    *,
    correction_lead_s: int = 0,
    progress: ProgressCallback | None = None,
    progress_every: int = 5000,
    compiled: bool = True,
) -> SimulationResult:
    """Replay a cleaned log (sorted by submission) through the SLURM-like scheduler.

    `correction_lead_s`: corrections happen this long before the limit instead of at it, as
    hpcpredict's corrector raises a limit `--correction-margin-s` seconds ahead of SLURM's check
    (docs/admin-guide.md); the policy is asked as if the job had reached its limit. 0: at the
    predicted end, as in the EASY simulations.

    The starvation guard (`scheduler.guard`) is the daemon's, as it acts on SLURM
    (hpcpredict/slurm/guard.py): while some pending job has waited that long, every running job
    still on a lowered limit gets its request back for good (it is never corrected or lowered
    again), pending jobs are planned with their requests (the plugin keeps new jobs at their
    requests), and once no job has waited that long, pending jobs go back to their predictions.
    SLURM itself is unchanged: the guard only moves time limits, which backfill then plans with.
    With the guard's `xfactor`, the job that has waited longest turns the guard on once it
    has waited that many times its request less one, or the guard's time, whichever first (the
    daemon's `starvation_guard_xfactor`). With the guard's `slack_s` (the daemon's slack
    stage), while the longest-waiting job has waited its `slack_after_s` but not its guard's
    time, pending jobs are planned with their slack estimates (the request less the slack, never
    below the prediction) and start with them as limits, running jobs below theirs get their
    requests for good, and a limit reached within the slack of the request is corrected to the
    request (`RequestWithinSlack`); once it is off, pending jobs go back to their predictions.
    The Python loop replays it.

    `compiled`: replay in the compiled loop (`compiled_slurm_replay`) when it models the
    predictor and the correction, as it does the defaults; the Python loop below otherwise, or
    with False (the reference the tests hold the compiled loop to).
    """
    if correction_lead_s < 0:
        raise ValueError(f"the correction lead must be >= 0 s, got {correction_lead_s}")
    wall_start = time.perf_counter()
    params = scheduler.params
    count = len(jobs)
    guard = scheduler.guard
    slack_s, slack_after_s = (None, None) if guard is None else (guard.slack_s, guard.slack_after_s)
    if slack_s is not None:
        correction = RequestWithinSlack(correction, slack_s)  # (not modelled compiled: the Python loop)
    loop_reason = (why_python_for_jobs(predictor, correction, job_column(jobs, "job_id"))
                   if compiled else PYTHON_LOOP_ASKED)
    if loop_reason is None:
        from hpcpredict.sim.slurm_model import compiled_slurm_replay

        columns = {name: np.asarray(column, dtype=np.int64) for name, column in
                   zip(NUMBER_COLUMNS, number_columns(jobs, machine_procs))}
        columns.update(job_id=job_column(jobs, "job_id"), user_id=job_column(jobs, "user_id"))
        attribute = history_attribute(predictor, lambda name: job_column(jobs, name))
        if attribute is not None:
            columns["history_attribute"] = attribute
        replayed = compiled_slurm_replay.replay(
            columns, machine_procs, RunningProfile(machine_procs).table, params,
            _guard_wait_s(scheduler, columns["requested_s"]), predictor, correction,
            correction_lead_s, progress, progress_every)
        return _result(jobs, machine_procs, scheduler, predictor, correction, correction_lead_s,
                       replayed, wall_start, loop="compiled")
    requests, submit_s, run_s, procs, requested_s = job_columns(jobs, machine_procs)

    start_s = [-1] * count
    # Arrays the compiled backfill pass reads (limits, widths) and writes (first reservations).
    prediction_s = np.zeros(count, dtype=np.int64)
    requested_array = np.asarray(requested_s, dtype=np.int64)
    procs_array = np.asarray(procs, dtype=np.int64)
    submit_array = np.asarray(submit_s, dtype=np.int64)
    first_reserved_start_s = np.full(count, -1, dtype=np.int64)
    started = np.zeros(params.bf_max_job_test, dtype=np.int64)
    jumped = np.zeros(params.bf_max_job_test, dtype=np.bool_)
    initial_prediction_s = [0] * count
    corrections = [0] * count
    backfilled = [False] * count

    sequence = counter(count)
    events: list[tuple[int, int, int, int]] = [
        (submit_s[index], SUBMISSION, index, index) for index in range(count)
    ]
    pending: list[int] = []  # submission order; removal is O(queue), queues are short
    profile = RunningProfile(machine_procs)
    finished = 0
    now_s = 0
    changed = False  # since the last backfill pass (backfill.c `_more_work`)
    pass_scheduled = False
    guard_s = None if guard is None else guard.wait_s
    waits = _guard_wait_s(scheduler, requested_array)
    guard_wait_s = [None] * count if waits is None else waits.tolist()
    guarded = False  # the longest-waiting pending job has waited its guard_wait_s: limits at the requests
    staged = False  # it has waited slack_after_s, not its guard_wait_s: pending limits at the estimates
    estimate_s = np.zeros(count, dtype=np.int64)  # each job's slack estimate (with a slack)
    lowered_running: set[int] = set()  # running jobs whose limit is below their request

    def start(index: int, jumped: bool) -> None:
        pending.remove(index)
        start_s[index] = now_s
        backfilled[index] = jumped
        if guarded:  # it waited at its request: it runs with it
            prediction_s[index] = requested_s[index]
        elif staged:  # it waited at its slack estimate: it runs with it
            prediction_s[index] = estimate_s[index]
        if prediction_s[index] < requested_s[index]:
            lowered_running.add(index)
        profile.add(index, now_s, now_s + prediction_s[index], procs[index])
        predictor.job_started(requests[index], now_s)
        correction.job_started(requests[index], now_s)
        heappush(events, (now_s + run_s[index], TERMINATION, next(sequence), index))
        plan_correction(index)

    def check_guard() -> None:
        """The live guard's test (pending jobs in submission order: the first waited longest),
        and what it does when it holds: running jobs back to their requests, for good."""
        nonlocal guarded, staged
        if guard_s is None:
            return
        waited_s = now_s - submit_s[pending[0]] if pending else -1
        guarded = bool(pending) and waited_s >= guard_wait_s[pending[0]]
        staged = slack_after_s is not None and not guarded and waited_s >= slack_after_s
        if guarded and lowered_running:
            raise_to_requests(list(lowered_running))
        elif staged and lowered_running:  # the live guard's stage: below the estimate, the request
            raise_to_requests([index for index in lowered_running if prediction_s[index] < estimate_s[index]])

    def raise_to_requests(raised: list[int]) -> None:
        """Running jobs given their requests, for good."""
        for index in raised:
            profile.move(index, start_s[index] + prediction_s[index],
                         start_s[index] + requested_s[index])
            prediction_s[index] = requested_s[index]
            lowered_running.discard(index)
        if raised:
            note_change()  # raised limits are job updates: the next pass re-plans

    def plan_correction(index: int) -> None:
        """The next correction, if the job is still running when it falls due and its limit is
        below its request (the corrector never raises a limit above the request)."""
        due_s = max(0, int(prediction_s[index]) - correction_lead_s)
        if due_s < run_s[index] and prediction_s[index] < requested_s[index]:
            heappush(events, (start_s[index] + due_s, PREDICTION_OVER, next(sequence), index))

    def main_pass() -> None:
        free = profile.free_now(now_s)
        for job in scheduler.order(now_s, pending, submit_array, procs_array, machine_procs)[:]:
            if procs[job] > free:
                return
            free -= procs[job]
            start(job, False)

    def backfill_pass() -> None:
        """The compiled pass plans; the jobs it starts are started here, in its order (starting
        a job changes nothing the pass reads: the plan is its own, the limits fixed)."""
        order = scheduler.order(now_s, pending, submit_array, procs_array, machine_procs)
        tested = np.array(order[: params.bf_max_job_test], dtype=np.int64)
        starting = planned_pass(
            profile.table, now_s, tested,
            requested_array if guarded else estimate_s if staged else prediction_s,
            procs_array, params.bf_window_s, params.bf_resolution_s, first_reserved_start_s,
            started, jumped, params.bf_job_part_count_reserve)
        if starting == NEVER_FITS:
            raise never_fits(procs[int(started[0])], machine_procs)
        for job, jumped_one in zip(started[:starting].tolist(), jumped[:starting].tolist()):
            start(job, jumped_one)

    def note_change() -> None:
        nonlocal changed, pass_scheduled
        changed = True
        if not pass_scheduled:
            # The backfill thread wakes every bf_interval; its phase is that of the log's clock.
            # A pass due at this very instant still runs (it comes after the instant's events).
            pass_s = -(-now_s // params.bf_interval_s) * params.bf_interval_s  # rounded up
            heappush(events, (pass_s, BACKFILL, next(sequence), -1))
            pass_scheduled = True

    while events:
        now_s, kind, _, index = heappop(events)
        if kind == SUBMISSION:
            predicted = clip_prediction(predictor.predict(requests[index], now_s), requested_s[index])
            prediction_s[index] = initial_prediction_s[index] = predicted
            if slack_s is not None:
                estimate_s[index] = guard_slack_estimate_s(predicted, requested_s[index], slack_s)
            pending.append(index)
            check_guard()
            main_pass()
            note_change()
        elif kind == TERMINATION:
            predictor.job_ended(requests[index], run_s[index], now_s)
            correction.job_ended(requests[index], run_s[index], now_s)
            profile.remove(index, start_s[index] + prediction_s[index])
            lowered_running.discard(index)
            finished += 1
            if progress is not None and finished % progress_every == 0:
                progress(finished)
            check_guard()
            main_pass()
            note_change()
        elif kind == PREDICTION_OVER:
            check_guard()
            limit = int(prediction_s[index])  # asked as at the limit (== the elapsed time without lead)
            if limit >= requested_s[index]:
                continue  # given its request by the guard since this correction was planned
            new_prediction = correction.corrected_prediction_s(
                requested_s[index], initial_prediction_s[index], corrections[index], limit,
                user_id=requests[index].user_id, now_s=now_s,
            )
            if not limit < new_prediction <= requested_s[index]:
                raise AssertionError(
                    f"correction {correction.name} gave {new_prediction} s for job "
                    f"{jobs[index].job_id} whose limit is {limit} s (request {requested_s[index]} s)"
                )
            corrections[index] += 1
            profile.move(index, start_s[index] + limit, start_s[index] + new_prediction)
            prediction_s[index] = new_prediction
            plan_correction(index)
            note_change()  # a raised limit is a job update: the next pass re-plans
        else:
            check_guard()  # while the pass is still due: limits it raises are planned by this pass
            pass_scheduled = False
            due = changed and bool(pending)
            changed = False
            if due:
                backfill_pass()

    if progress is not None:
        progress(finished)
    if pending or len(profile) or finished != count:
        raise AssertionError(f"{count - finished} jobs never finished")
    return _result(jobs, machine_procs, scheduler, predictor, correction, correction_lead_s,
                   ReplayColumns(start_s, initial_prediction_s, prediction_s.tolist(), corrections,
                                 backfilled, first_reserved_start_s.tolist()), wall_start,
                   loop_reason=loop_reason)


def _guard_wait_s(scheduler: SlurmBackfill, requested_s: np.ndarray) -> np.ndarray | None:
    """How long each job waits before it turns the guard on: the guard's time, or less by the
    xfactor rule; None without a guard."""
    if scheduler.guard is None:
        return None
    waits = scheduler.guard.due_after_s(requested_s)
    return np.broadcast_to(np.asarray(waits, dtype=np.int64), (len(requested_s),)).copy()


def _result(jobs: Sequence[Job], machine_procs: int, scheduler: SlurmBackfill,
            predictor: Predictor, correction: CorrectionPolicy, correction_lead_s: int,
            columns: ReplayColumns, wall_start: float, loop: str = "python",
            loop_reason: str | None = None) -> SimulationResult:
    return SimulationResult(
        jobs=jobs,
        machine_procs=machine_procs,
        scheduler=scheduler.name,
        predictor=predictor.name,
        correction=correction.name,
        start_s=columns.start_s,
        initial_prediction_s=columns.initial_prediction_s,
        final_prediction_s=columns.final_prediction_s,
        corrections=columns.corrections,
        backfilled=columns.backfilled,
        first_reserved_start_s=columns.first_reserved_start_s,
        wall_time_s=time.perf_counter() - wall_start,
        settings={"slurm_params": scheduler.params.to_text(),
                  "correction_lead_s": correction_lead_s,
                  **({"starvation_guard_s": None} if scheduler.guard is None
                     else scheduler.guard.to_keys())},
        loop=loop,
        loop_reason=loop_reason,
    )
