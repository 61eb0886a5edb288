"""The starvation guard (Scheduler.starvation_guard_s): a bound on how long the head job's
reservation can slide when backfilling trusts predictions that are too short."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.cli import main
from hpcpredict.daemon.config import DaemonConfig
from hpcpredict.jobs import JobRequest
from hpcpredict.predictors import RequestedPredictor
from hpcpredict.corrections import CORRECTIONS
from hpcpredict.sim import SCHEDULERS, simulate
from hpcpredict.sim.runner import RunSpec
from hpcpredict.corrections import starvation
from hpcpredict.corrections.starvation import (
    DEFAULT_STARVATION_GUARD_S, RECENT_FLOOR_S, RECENT_MIN_STARTS, guard_estimate_s, guard_slack_estimate_s,
    parse_starvation_guard, recent_guard_wait_s, xfactor_guard_wait_s,
)
from hpcpredict.sim import simulation
from test_simulation import PREDICTORS, build_predictor, make_job, peak_usage, workloads


class OneSecond:
    """Predicts 1 s for every job: the worst under-predictor, which starves a wide head job."""

    name = "one-second"

    def predict(self, request: JobRequest, now_s: int) -> int:
        return 1

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


def guarded(name: str, guard_s: int | None, rule: str = "wait", scope: str = "machine"):
    return dataclasses.replace(SCHEDULERS[name], starvation_guard_s=guard_s, guard_rule=rule,
                               guard_scope=scope)


# A 10-processor machine. Job 0 (6 procs, 1000 s) runs; job 1 needs all 10 and becomes the head
# at t=1. From t=2 a 4-processor job (900 s, predicted 1 s) arrives every 50 s until t=5000: each
# "ends by the shadow time" by its prediction, so one is backfilled whenever 4 processors are free,
# and the head never finds 10 free processors until the stream dries up.
STREAM = [make_job(1, 0, 6, 1000, 1000), make_job(2, 1, 10, 100, 100)] + [
    make_job(3 + k, 2 + 50 * k, 4, 900, 900) for k in range(100)
]


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_without_the_guard_the_head_starves_and_with_it_starts_when_the_requests_end(scheduler: str) -> None:
    free_run = simulate(STREAM, 10, guarded(scheduler, None), OneSecond(), CORRECTIONS["incremental"])
    assert free_run.start_s[1] > 4_000  # starved until the stream of backfilled jobs ended
    guard = simulate(STREAM, 10, guarded(scheduler, 300), OneSecond(), CORRECTIONS["incremental"])
    # Guarded from its first decision after 300 s of waiting: job 0 ends by its request at 1000,
    # the first backfilled job by 902; nothing more may start unless it ends by 1000 by its
    # request (none can: 900 s from t >= 301). So the head starts at 1000.
    assert guard.start_s[1] == 1000
    assert guard.start_s[1] - STREAM[1].submit_s <= 300 + max(job.requested_s for job in STREAM)


@pytest.mark.parametrize("exhaustive", [False, True])
@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_guard_is_due_at_the_instant_the_head_has_waited_its_bound(
    scheduler: str, exhaustive: bool
) -> None:
    """The boundary: a head that has waited exactly `starvation_guard_s` is guarded. Job 0
    (6 of 10 processors, 1000 s, predicted 1 s) runs; the head (10 processors) is submitted at
    1; a 4-processor job of 900 s arrives at 301, when the head has waited exactly 300 s.
    Unguarded it would be backfilled (predicted to end at 302, before job 0's corrected end at
    901) and hold the head until 1201; guarded, it must end by job 0's request (1000) by its own
    request (1201: no), and there are no extra processors: it waits, the head starts at 1000.
    With a bound of 301 s the head is not due yet at 301: the backfill happens."""
    jobs = [make_job(1, 0, 6, 1000, 1000), make_job(2, 1, 10, 100, 100),
            make_job(3, 301, 4, 900, 900)]

    def starts(guard_s: int) -> list[int]:
        return simulate(jobs, 10, guarded(scheduler, guard_s), OneSecond(),
                        CORRECTIONS["incremental"], exhaustive=exhaustive).start_s

    assert starts(300) == [0, 1000, 1100]
    assert starts(301) == [0, 1201, 301]


def test_jobs_running_at_a_guarded_decision_are_planned_to_their_requests_for_good() -> None:
    """As live, where the corrector raises their limits to the requests and never lowers a running
    job's limit again; jobs started once no head is due are planned by their predictions again."""
    free_run = simulate(STREAM, 10, guarded("easy-sjbf", None), OneSecond(), CORRECTIONS["incremental"])
    guard = simulate(STREAM, 10, guarded("easy-sjbf", 300), OneSecond(), CORRECTIONS["incremental"])
    # Jobs 0 and 2 run at the first guarded decision (t=302): corrected before it, never after.
    for index in (0, 2):
        assert guard.final_prediction_s[index] == STREAM[index].requested_s
        assert 0 < guard.corrections[index] < free_run.corrections[index]
    last = len(STREAM) - 1  # starts after the backlog has drained: nobody is due any more
    assert guard.initial_prediction_s[last] == 1 and guard.corrections[last] > 0


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_head_scope_protects_the_aged_head_alone_and_pins_no_running_job(scheduler: str) -> None:
    """Guard scope "head": the aged head starts when the machine-wide guard starts it (its
    reservation is on requested ends either way: job 0's request, 1000), but the jobs running at
    the guarded decisions keep being planned on predictions, so they are corrected further
    (by the incremental correction, as without a guard) instead of being pinned to their
    requests."""
    machine = simulate(STREAM, 10, guarded(scheduler, 300), OneSecond(), CORRECTIONS["incremental"])
    head = simulate(STREAM, 10, guarded(scheduler, 300, scope="head"), OneSecond(),
                    CORRECTIONS["incremental"])
    free_run = simulate(STREAM, 10, guarded(scheduler, None), OneSecond(), CORRECTIONS["incremental"])
    assert head.start_s[1] == machine.start_s[1] == 1000
    for index in (0, 2):  # running at the first guarded decision (t=302)
        assert machine.final_prediction_s[index] == STREAM[index].requested_s
        assert head.corrections[index] == free_run.corrections[index] > machine.corrections[index]
    with pytest.raises(ValueError, match="guard scope"):
        guarded(scheduler, 300, scope="partition")


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_promise_rule_guards_a_head_once_it_is_later_than_plain_easys_promise(scheduler: str) -> None:
    """Job 1 becomes the head at t=1; plain EASY would have promised it job 0's requested end
    (1000). Under the "promise" rule the guard falls due then, whatever the wait threshold: the
    head starts once the jobs then running end by their requests, as with a 999 s guard."""
    never = simulate(STREAM, 10, guarded(scheduler, 10**9, "promise"), OneSecond(),
                     CORRECTIONS["incremental"])
    by_wait = simulate(STREAM, 10, guarded(scheduler, 999), OneSecond(), CORRECTIONS["incremental"])
    assert never.start_s == by_wait.start_s
    assert 1000 <= never.start_s[1] <= 1000 + 900  # the last job backfilled before 1000 ends by 1900
    # the wait threshold still caps it: the earlier of the two
    assert simulate(STREAM, 10, guarded(scheduler, 300, "promise"), OneSecond(),
                    CORRECTIONS["incremental"]).start_s[1] == 1000
    with pytest.raises(ValueError, match="guard rule"):
        guarded(scheduler, 300, "sometimes")


def assert_fast_path_exact_and_sound(jobs, machine: int, policy, predictor: str, correction: str) -> None:
    """The replay with the O(1) path for lone submissions starts every job when the exhaustive
    one does, never over-allocates and starts no job before its submission."""
    fast = simulate(jobs, machine, policy, build_predictor(predictor, jobs), CORRECTIONS[correction])
    slow = simulate(jobs, machine, policy, build_predictor(predictor, jobs), CORRECTIONS[correction],
                    exhaustive=True)
    assert fast.start_s == slow.start_s
    assert peak_usage(fast) <= machine
    assert all(fast.start_s[i] >= job.submit_s for i, job in enumerate(jobs))


def test_the_recent_rule_protects_at_a_multiple_of_the_recent_p99_wait_within_its_bounds() -> None:
    few = [7_200] * (RECENT_MIN_STARTS - 1)
    assert recent_guard_wait_s(few, 1.0, 86_400) == 86_400  # too few starts to trust: the cap
    enough = [7_200] * RECENT_MIN_STARTS
    assert recent_guard_wait_s(enough, 2.0, 86_400) == 14_400
    assert recent_guard_wait_s(enough, 0.1, 86_400) == RECENT_FLOOR_S
    assert recent_guard_wait_s(enough, 100.0, 86_400) == 86_400
    # the p99: one wait in a hundred far out moves it, the median does not
    assert 3_600 < recent_guard_wait_s([0] * 98 + [36_000] * 2, 1.0, 86_400) <= 36_000


@contextlib.contextmanager
def recent_rule_scaled(every_s: int, window_s: int, min_starts: int, floor_s: int) -> Iterator[None]:
    """The recent rule's day, four weeks, 100 starts and 1 h, scaled to the tests' small logs."""
    with mock.patch.object(simulation, "RECENT_EVERY_S", every_s), \
            mock.patch.object(simulation, "RECENT_WINDOW_S", window_s), \
            mock.patch.object(starvation, "RECENT_MIN_STARTS", min_starts), \
            mock.patch.object(starvation, "RECENT_FLOOR_S", floor_s):
        yield


def recent(name: str, cap_s: int, multiple: float, scope: str = "machine"):
    return dataclasses.replace(guarded(name, cap_s, "recent", scope), guard_recent_multiple=multiple)


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_recent_rule_protects_a_head_that_waits_far_longer_than_the_jobs_started_lately(
    scheduler: str,
) -> None:
    """In STREAM every backfilled job starts within seconds of its submission while the head
    starves: the recent waits' p99 is tiny, so the rule protects the head at its next update,
    where a fixed threshold as long as the cap never does before the stream dries up."""
    with recent_rule_scaled(every_s=100, window_s=10_000, min_starts=3, floor_s=60):
        capped = simulate(STREAM, 10, recent(scheduler, 10**9, 10**6), OneSecond(),
                          CORRECTIONS["incremental"])
        following = simulate(STREAM, 10, recent(scheduler, 10**9, 1.0), OneSecond(),
                             CORRECTIONS["incremental"])
    assert capped.start_s[1] > 4_000  # the cap alone: starved, as with no guard
    assert 1_000 <= following.start_s[1] <= 1_000 + 900  # protected by ~t=300: as a short guard


def test_the_recent_rule_at_its_bounds_is_the_wait_rule() -> None:
    """A multiple so large that the cap always wins, or zero with the cap at the floor: the
    threshold never moves, and the schedule is the "wait" rule's, on a real log's sample."""
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    from hpcpredict.sim.runner import run
    from hpcpredict.workload import load_workload

    workload = load_workload(sample)
    for cap_s, multiple in ((86_400, 1e9), (RECENT_FLOOR_S, 0.0)):
        wait = run(workload, RunSpec(starvation_guard_s=cap_s))
        following = run(workload, RunSpec(starvation_guard_s=cap_s, guard_rule="recent",
                                          guard_recent_multiple=multiple))
        assert following.start_s == wait.start_s
    moved = run(workload, RunSpec(starvation_guard_s=86_400, guard_rule="recent",
                                  guard_recent_multiple=0.0))
    assert moved.start_s != run(workload, RunSpec(starvation_guard_s=86_400)).start_s


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.floats(0.0, 3.0),
       st.sampled_from(["machine", "head"]))
def test_schedules_under_the_recent_rule_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, cap_s, multiple, scope
) -> None:
    machine, jobs = workload
    policy = recent(scheduler, cap_s, multiple, scope)
    with recent_rule_scaled(every_s=50, window_s=500, min_starts=2, floor_s=10):
        assert_fast_path_exact_and_sound(jobs, machine, policy, predictor, correction)


def test_the_xfactor_rule_protects_a_job_once_it_has_waited_a_multiple_of_its_request() -> None:
    assert xfactor_guard_wait_s([600, 3_600, 100_000], 5.0, 86_400).tolist() == [2_400, 14_400, 86_400]
    assert xfactor_guard_wait_s([7], 1.5, 86_400).tolist() == [4]  # rounded up, never early


def xfactor(name: str, cap_s: int, factor: float, scope: str = "machine"):
    return dataclasses.replace(SCHEDULERS[name], starvation_guard_s=cap_s, guard_rule="xfactor",
                               guard_scope=scope, guard_xfactor=factor)


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_xfactor_rule_protects_a_short_request_early_where_the_cap_alone_never_does(
    scheduler: str,
) -> None:
    """STREAM's head asks for 100 s: with an expansion factor of 4 it is protected once it has
    waited 300 s, exactly as under a 300 s wait rule, where a cap alone starves it."""
    capped = simulate(STREAM, 10, xfactor(scheduler, 10**9, 10**7), OneSecond(),
                      CORRECTIONS["incremental"])
    relative = simulate(STREAM, 10, xfactor(scheduler, 10**9, 4.0), OneSecond(),
                        CORRECTIONS["incremental"])
    by_wait = simulate(STREAM, 10, guarded(scheduler, 300), OneSecond(), CORRECTIONS["incremental"])
    assert capped.start_s[1] > 4_000
    assert relative.start_s == by_wait.start_s and relative.start_s[1] == 1_000
    with pytest.raises(ValueError, match="expansion factor"):
        guarded(scheduler, 300, "xfactor")


def test_the_xfactor_rule_with_the_cap_always_first_is_the_wait_rule() -> None:
    """A factor so large that every request's multiple is past the cap: the "wait" rule's
    schedule on a real log's sample; a factor of 5 moves it."""
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    from hpcpredict.sim.runner import run
    from hpcpredict.workload import load_workload

    workload = load_workload(sample)
    wait = run(workload, RunSpec(starvation_guard_s=86_400))
    for factor, same in ((1e9, True), (5.0, False)):
        relative = run(workload, RunSpec(starvation_guard_s=86_400, guard_rule="xfactor",
                                         guard_xfactor=factor))
        assert (relative.start_s == wait.start_s) is same


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.floats(1.001, 20.0),
       st.sampled_from(["machine", "head"]))
def test_schedules_under_the_xfactor_rule_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, cap_s, factor, scope
) -> None:
    machine, jobs = workload
    assert_fast_path_exact_and_sound(jobs, machine, xfactor(scheduler, cap_s, factor, scope),
                                     predictor, correction)


def estimating(name: str, guard_s: int, after_s: int, multiple: float, scope: str = "machine"):
    return dataclasses.replace(guarded(name, guard_s, scope=scope), guard_estimate_multiple=multiple,
                               guard_estimate_after_s=after_s)


def slack_estimating(name: str, guard_s: int, after_s: int, slack_s: int, scope: str = "machine"):
    return dataclasses.replace(guarded(name, guard_s, scope=scope), guard_estimate_slack_s=slack_s,
                               guard_estimate_after_s=after_s)


def test_the_estimate_is_a_multiple_of_the_prediction_within_it_and_the_request() -> None:
    assert guard_estimate_s(100, 1_000, 4.0) == 400
    assert guard_estimate_s(100, 300, 4.0) == 300
    assert guard_estimate_s(100, 1_000, 1.0) == 100
    assert guard_estimate_s(3, 1_000, 1.5) == 5  # rounded up: never below the multiple


class Tenfold:
    """Predicts a tenth of each job's runtime (at least 1 s): every job outlives 4x its prediction."""

    name = "tenfold"

    def __init__(self, jobs) -> None:
        self.run_s = {job.request.job_id: job.run_s for job in jobs}

    def predict(self, request: JobRequest, now_s: int) -> int:
        return max(1, self.run_s[request.job_id] // 10)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


# STREAM with long requests: job 0 (6 procs) runs 1000 s of a 3000 s request, the stream's jobs
# (4 procs) 900 s of 3000 s; Tenfold predicts them 100 s and 90 s (estimates, 4x: 400 s, 360 s).
LONG_REQUESTS = [make_job(1, 0, 6, 1000, 3000), make_job(2, 1, 10, 100, 100)] + [
    make_job(3 + k, 2 + 50 * k, 4, 900, 3000) for k in range(100)
]


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_estimate_stage_backfills_on_estimates_and_the_guard_still_bounds_the_head(
    scheduler: str,
) -> None:
    """From 300 s of waiting the head's reservation is on the guard's profile (job 0 until
    3000 s by its request): judged on their 3000 s requests no stream job starts in front of it
    after that (the head starts when job 0 ends, at 1000 s), judged on their 360 s estimates
    some do, outlive them and push the head's start; the guard, due at 2000 s, plans on requests
    alone again, and the head starts once the jobs running then end: by 2000 + 900 s."""
    requests = simulate(LONG_REQUESTS, 10, guarded(scheduler, 300), Tenfold(LONG_REQUESTS),
                        CORRECTIONS["incremental"])
    estimates = simulate(LONG_REQUESTS, 10, estimating(scheduler, 2_000, 300, 4.0),
                         Tenfold(LONG_REQUESTS), CORRECTIONS["incremental"])
    unguarded = simulate(LONG_REQUESTS, 10, guarded(scheduler, None), Tenfold(LONG_REQUESTS),
                         CORRECTIONS["incremental"])

    def in_front_after_300(result) -> list[int]:
        return [start_s for start_s in result.start_s[2:] if 300 <= start_s < result.start_s[1]]

    assert requests.start_s[1] == 1_000 and not in_front_after_300(requests)
    assert in_front_after_300(estimates)
    assert 1_000 < estimates.start_s[1] <= 2_000 + 900
    # every job started on its 360 s estimate runs 900 s, 540 s beyond it: each outlives it
    # unless the guard falls due first (then it is planned to its request: not counted)
    assert 0 < estimates.estimates_outlived <= estimates.estimated_starts
    assert estimates.estimate_overrun_s == 540 * estimates.estimates_outlived
    assert unguarded.start_s[1] > 4_000  # without the guard the estimates would starve it


def test_an_estimate_stage_that_starts_with_the_guard_changes_nothing() -> None:
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    from hpcpredict.sim.runner import run
    from hpcpredict.workload import load_workload

    workload = load_workload(sample)
    today = run(workload, RunSpec(starvation_guard_s=7_200))
    late = run(workload, RunSpec(starvation_guard_s=7_200, guard_estimate_multiple=2.0,
                                 guard_estimate_after_s=7_200))
    assert late.start_s == today.start_s
    early = run(workload, RunSpec(starvation_guard_s=7_200, guard_estimate_multiple=2.0,
                                  guard_estimate_after_s=600))
    assert early.start_s != today.start_s


@settings(max_examples=200, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.integers(0, 2_000),
       st.one_of(st.floats(1.0, 5.0), st.integers(1, 3_000).map(lambda slack_s: ("slack", slack_s))),
       st.sampled_from(["machine", "head"]))
def test_schedules_with_an_estimate_stage_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, guard_s, after_s, estimate, scope
) -> None:
    """Under either estimate: a multiple of the prediction, or ("slack", s) the request less s."""
    machine, jobs = workload
    after_s = min(after_s, guard_s)
    policy = (slack_estimating(scheduler, guard_s, after_s, estimate[1], scope) if isinstance(estimate, tuple)
              else estimating(scheduler, guard_s, after_s, estimate, scope))
    assert_fast_path_exact_and_sound(jobs, machine, policy, predictor, correction)


def test_the_slack_estimate_is_the_request_less_the_slack_within_the_prediction_and_the_request() -> None:
    assert guard_slack_estimate_s(100, 1_000, 300) == 700
    assert guard_slack_estimate_s(100, 1_000, 950) == 100  # never below the prediction
    assert guard_slack_estimate_s(100, 1_000, 10**9) == 100
    assert guard_slack_estimate_s(1_000, 1_000, 300) == 1_000  # never above the request


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_slack_estimate_bounds_each_overrun_in_front_of_a_head_by_the_slack(scheduler: str) -> None:
    """LONG_REQUESTS with a 2,500 s slack: a stream job (90 s predicted, 3000 s requested) is
    judged in front of a head in the stage on 500 s, runs 900 s, and so outlives that by 400 s,
    never by more than the slack; it still starts in front of the head, where on its request it
    would not, and the guard still bounds the head."""
    slack = simulate(LONG_REQUESTS, 10, slack_estimating(scheduler, 2_000, 300, 2_500),
                     Tenfold(LONG_REQUESTS), CORRECTIONS["incremental"])
    requests = simulate(LONG_REQUESTS, 10, guarded(scheduler, 300), Tenfold(LONG_REQUESTS),
                        CORRECTIONS["incremental"])
    in_front = [start_s for start_s in slack.start_s[2:] if 300 <= start_s < slack.start_s[1]]
    assert in_front and requests.start_s[1] == 1_000
    assert 1_000 < slack.start_s[1] <= 2_000 + 900
    assert 0 < slack.estimates_outlived <= slack.estimated_starts
    assert slack.estimate_overrun_s == 400 * slack.estimates_outlived


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_slacks_estimate_is_the_one_limit_a_job_started_on_it_runs_with(scheduler: str) -> None:
    """The slack's estimates are time limits, as the live daemon sets them (`slurm.guard`): a
    stream job started in front of the head in the stage is planned at its 500 s estimate in
    both profiles, not at its 90 s prediction, and when it outlives it gets its 3000 s request
    at once (one correction), not INCREMENTAL's steps from its prediction; or before, with no
    correction, when the guard falls due for the head (at 2001 s) and gives every one its request."""
    result = simulate(LONG_REQUESTS, 10, slack_estimating(scheduler, 2_000, 300, 2_500),
                      Tenfold(LONG_REQUESTS), CORRECTIONS["incremental"])
    in_front = [k for k in range(2, len(LONG_REQUESTS)) if 300 <= result.start_s[k] < result.start_s[1]]
    corrected = [k for k in in_front if result.start_s[k] + 500 < 2_001]
    assert corrected and len(corrected) < len(in_front)
    for k in in_front:
        assert result.initial_prediction_s[k] == 90
        assert (result.final_prediction_s[k], result.corrections[k]) == (3_000, int(k in corrected)), k


# Job 0 takes the whole machine for 1000 s of a 3000 s request; job 1, submitted at 1, waits for
# it: in its own estimate stage from 301 s, it starts from the head at 1000 s and runs 100 s.
HEAD_IN_ITS_STAGE = [make_job(1, 0, 10, 1000, 3000), make_job(2, 1, 10, 100, 3000)]


def test_a_job_started_from_the_head_in_its_own_stage_runs_on_its_estimate() -> None:
    """Live, every pending job holds its slack estimate while the stage is on, the head's too:
    job 1 starts on its 500 s estimate and ends within it (no correction); the guard's other
    estimates (a multiple) plan it to its 10 s prediction, corrected twice."""
    slack = simulate(HEAD_IN_ITS_STAGE, 10, slack_estimating("easy", 2_000, 300, 2_500),
                     Tenfold(HEAD_IN_ITS_STAGE), CORRECTIONS["incremental"])
    assert slack.start_s == [0, 1_000]
    assert (slack.final_prediction_s[1], slack.corrections[1]) == (500, 0)
    multiple = simulate(HEAD_IN_ITS_STAGE, 10, estimating("easy", 2_000, 300, 4.0),
                        Tenfold(HEAD_IN_ITS_STAGE), CORRECTIONS["incremental"])
    assert (multiple.final_prediction_s[1], multiple.corrections[1]) == (310, 2)


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.integers(0, 2_000))
def test_under_a_slack_beyond_every_request_a_job_that_outlives_its_plan_gets_its_request(
    workload, scheduler, predictor, correction, guard_s, after_s
) -> None:
    """A slack no request reaches leaves every estimate at its prediction, and puts every limit
    reached within the slack of its request (`RequestWithinSlack`): whatever the correction,
    each job is corrected at most once, to its request."""
    machine, jobs = workload
    after_s = min(after_s, guard_s)
    result = simulate(jobs, machine, slack_estimating(scheduler, guard_s, after_s, 10**9),
                      build_predictor(predictor, jobs), CORRECTIONS[correction])
    for k, job in enumerate(result.jobs):
        assert result.corrections[k] <= 1
        assert result.final_prediction_s[k] in (result.initial_prediction_s[k], job.request.requested_s)


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.sampled_from(["wait", "promise"]),
       st.sampled_from(["machine", "head"]))
def test_guarded_schedules_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, guard_s, rule, scope
) -> None:
    machine, jobs = workload
    policy = guarded(scheduler, guard_s, rule, scope)
    assert_fast_path_exact_and_sound(jobs, machine, policy, predictor, correction)


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(PREDICTORS), st.sampled_from(sorted(CORRECTIONS)),
       st.integers(0, 2_000), st.sampled_from([None, 0, 300]))
def test_aged_first_backfilling_keeps_the_invariants_and_the_fast_path_is_exact(
    workload, predictor, correction, aged_s, guard_s
) -> None:
    machine, jobs = workload
    policy = dataclasses.replace(guarded("easy-sjbf", guard_s), aged_first_s=aged_s)
    fast = simulate(jobs, machine, policy, build_predictor(predictor, jobs), CORRECTIONS[correction])
    slow = simulate(jobs, machine, policy, build_predictor(predictor, jobs), CORRECTIONS[correction],
                    exhaustive=True)
    assert fast.start_s == slow.start_s
    assert peak_usage(fast) <= machine


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(PREDICTORS))
def test_every_job_aged_at_once_is_easys_submission_order(workload, predictor) -> None:
    """aged_first_s = 0: every waiting job is aged at every pass, so EASY-SJBF backfills in
    submission order: plain EASY's schedule (and a long threshold changes nothing)."""
    machine, jobs = workload
    easy = simulate(jobs, machine, SCHEDULERS["easy"], build_predictor(predictor, jobs),
                    CORRECTIONS["incremental"])
    aged = simulate(jobs, machine, dataclasses.replace(SCHEDULERS["easy-sjbf"], aged_first_s=0),
                    build_predictor(predictor, jobs), CORRECTIONS["incremental"])
    assert aged.start_s == easy.start_s
    sjbf = simulate(jobs, machine, SCHEDULERS["easy-sjbf"], build_predictor(predictor, jobs),
                    CORRECTIONS["incremental"])
    never = simulate(jobs, machine, dataclasses.replace(SCHEDULERS["easy-sjbf"], aged_first_s=10**9),
                     build_predictor(predictor, jobs), CORRECTIONS["incremental"])
    assert never.start_s == sjbf.start_s


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS))
def test_a_guard_that_never_fires_changes_nothing(workload, scheduler, predictor) -> None:
    machine, jobs = workload
    plain = simulate(jobs, machine, SCHEDULERS[scheduler], build_predictor(predictor, jobs),
                     CORRECTIONS["incremental"])
    never = simulate(jobs, machine, guarded(scheduler, 10**9), build_predictor(predictor, jobs),
                     CORRECTIONS["incremental"])
    assert never.start_s == plain.start_s


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]))
def test_with_requested_times_the_guard_is_plain_easy(workload, scheduler) -> None:
    """Predictions equal to requests make the guarded rule and the usual one the same rule."""
    machine, jobs = workload
    plain = simulate(jobs, machine, SCHEDULERS[scheduler], RequestedPredictor(), CORRECTIONS["requested"])
    always = simulate(jobs, machine, guarded(scheduler, 0), RequestedPredictor(), CORRECTIONS["requested"])
    assert always.start_s == plain.start_s


def test_the_guard_is_an_option_of_a_run_and_off_by_default() -> None:
    assert "starvation_guard_s" not in RunSpec().to_dict()  # off: campaign keys unchanged
    assert "guard_rule" not in RunSpec(starvation_guard_s=60).to_dict()  # the old rule: keys unchanged
    promise = RunSpec(starvation_guard_s=172_800, guard_rule="promise")
    assert promise.to_dict()["guard_rule"] == "promise" and promise.label.endswith("guard promise or 48 h")
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec(guard_rule="promise")
    following = RunSpec(starvation_guard_s=172_800, guard_rule="recent", guard_recent_multiple=0.5)
    assert following.to_dict()["guard_recent_multiple"] == 0.5
    assert following.label.endswith("guard 0.5x recent p99 or 48 h")
    assert "guard_recent_multiple" not in promise.to_dict()  # that rule's setting alone
    with pytest.raises(ValueError, match="recent"):
        RunSpec(starvation_guard_s=60, guard_recent_multiple=2.0)
    with pytest.raises(ValueError, match=">= 0"):
        RunSpec(starvation_guard_s=60, guard_rule="recent", guard_recent_multiple=-1.0)
    relative = RunSpec(starvation_guard_s=86_400, guard_rule="xfactor", guard_xfactor=5)
    assert relative.to_dict()["guard_xfactor"] == 5.0 and relative.label.endswith("guard xfactor 5 or 24 h")
    assert "guard_xfactor" not in following.to_dict()  # that rule's setting alone
    with pytest.raises(ValueError, match="> 1"):
        RunSpec(starvation_guard_s=60, guard_rule="xfactor")
    with pytest.raises(ValueError, match="> 1"):
        RunSpec(starvation_guard_s=60, guard_rule="xfactor", guard_xfactor=1.0)
    with pytest.raises(ValueError, match="xfactor"):
        RunSpec(starvation_guard_s=60, guard_xfactor=5.0)
    with pytest.raises(ValueError, match="EASY schedulers only"):
        RunSpec(scheduler="slurm-backfill", starvation_guard_s=60, guard_rule="recent")
    staged = RunSpec(starvation_guard_s=86_400, guard_estimate_multiple=4, guard_estimate_after_s=10_800)
    assert staged.to_dict()["guard_estimate_multiple"] == 4.0
    assert staged.label.endswith("guard 24 h, 4x prediction in front after 3 h")
    assert "guard_estimate_after_s" not in RunSpec(starvation_guard_s=60).to_dict()
    with pytest.raises(ValueError, match="within the guard"):
        RunSpec(starvation_guard_s=3_600, guard_estimate_multiple=2.0, guard_estimate_after_s=7_200)
    with pytest.raises(ValueError, match=">= 1"):
        RunSpec(starvation_guard_s=3_600, guard_estimate_multiple=0.5, guard_estimate_after_s=60)
    with pytest.raises(ValueError, match="needs guard_estimate_multiple or guard_estimate_slack_s"):
        RunSpec(starvation_guard_s=3_600, guard_estimate_after_s=60)
    slack = RunSpec(starvation_guard_s=86_400, guard_estimate_slack_s=7_200, guard_estimate_after_s=14_400)
    assert slack.to_dict()["guard_estimate_slack_s"] == 7_200 and "guard_estimate_multiple" not in slack.to_dict()
    assert slack.to_dict()["guard_estimate_after_s"] == 14_400
    assert slack.label.endswith("guard 24 h, request - 2 h in front after 4 h")
    assert "guard_estimate_slack_s" not in staged.to_dict()
    with pytest.raises(ValueError, match="not both"):
        RunSpec(starvation_guard_s=86_400, guard_estimate_slack_s=7_200, guard_estimate_multiple=4.0,
                guard_estimate_after_s=60)
    with pytest.raises(ValueError, match="seconds >= 1"):
        RunSpec(starvation_guard_s=86_400, guard_estimate_slack_s=0, guard_estimate_after_s=60)
    with pytest.raises(ValueError, match="not both"):
        RunSpec(starvation_guard_s=86_400, guard_estimate_slack_s=7_200, guard_estimate_after_s=60,
                guard_evidence_s=900, guard_evidence_cap_s=172_800)
    with pytest.raises(ValueError, match="one of them"):
        dataclasses.replace(guarded("easy", 60), guard_estimate_slack_s=60, guard_estimate_after_s=0,
                            guard_evidence_s=900, guard_evidence_cap_s=900)
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec(guard_estimate_slack_s=7_200, guard_estimate_after_s=60)
    slurm = RunSpec(scheduler="slurm-backfill", starvation_guard_s=86_400, guard_estimate_slack_s=7_200,
                    guard_estimate_after_s=60)  # the daemon's slack stage: modelled for SLURM too
    assert slurm.to_dict()["guard_estimate_slack_s"] == 7_200
    with pytest.raises(ValueError, match="EASY schedulers only"):
        RunSpec(scheduler="slurm-backfill", starvation_guard_s=86_400, guard_estimate_multiple=4.0,
                guard_estimate_after_s=60)
    assert "guard_scope" not in RunSpec(starvation_guard_s=60).to_dict()  # machine: keys unchanged
    head = RunSpec(starvation_guard_s=21_600, guard_scope="head")
    assert head.to_dict()["guard_scope"] == "head" and head.label.endswith("guard 6 h, head only")
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec(guard_scope="head")
    with pytest.raises(ValueError, match="EASY schedulers only"):
        RunSpec(scheduler="slurm-backfill", starvation_guard_s=60, guard_scope="head")
    assert "aged_first_s" not in RunSpec().to_dict()  # off: keys unchanged
    aged = RunSpec(starvation_guard_s=86_400, aged_first_s=21_600)
    assert aged.to_dict()["aged_first_s"] == 21_600 and aged.label.endswith("guard 24 h + aged first 6 h")
    assert RunSpec(predictor="ave2", aged_first_s=3600).published_name is None  # not EASY++
    with pytest.raises(ValueError, match="EASY-SJBF"):
        RunSpec(scheduler="easy", aged_first_s=3600)
    spec = RunSpec(starvation_guard_s=43_200)
    assert spec.to_dict()["starvation_guard_s"] == 43_200 and spec.label.endswith("guard 12 h")
    with pytest.raises(ValueError, match="backfilling scheduler"):
        RunSpec(scheduler="fcfs", starvation_guard_s=10)
    with pytest.raises(ValueError, match=">= 0"):
        RunSpec(starvation_guard_s=-1)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("off", None), ("86400", 86_400), ("24h", 86_400), ("90m", 5_400), ("2d", 172_800), (3600, 3600)],
)
def test_guards_are_written_as_people_write_durations(text: object, seconds: int | None) -> None:
    assert parse_starvation_guard(text) == seconds


@pytest.mark.parametrize("text", ["", "3x", "-5", "24 hours", True])
def test_a_malformed_guard_is_refused(text: object) -> None:
    with pytest.raises(ValueError, match="starvation guard"):
        parse_starvation_guard(text)


def _simulated_guard(*options: str) -> object:
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    result = CliRunner().invoke(main, ["simulate", str(sample), "--no-baseline", "--format", "json", *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["runs"][0]["settings"].get("starvation_guard_s")


def test_simulate_guards_learned_predictions_by_default_as_the_daemon_does() -> None:
    assert _simulated_guard() == DEFAULT_STARVATION_GUARD_S == DaemonConfig().starvation_guard_s
    assert _simulated_guard("--starvation-guard", "off") is None
    assert _simulated_guard("--starvation-guard", "12h") == 43_200
    assert _simulated_guard("--predictor", "requested", "--correction", "requested") is None  # a no-op there
    assert _simulated_guard("--scheduler", "fcfs") is None
    # the published baselines keep their published meaning: unbounded unless asked
    assert _simulated_guard("--predictor", "ave2") is None
    assert _simulated_guard("--predictor", "clairvoyant", "--correction", "requested") is None
    assert _simulated_guard("--predictor", "ave2", "--starvation-guard", "24h") == 86_400


def test_published_baselines_are_named_as_published_and_their_bounded_variants_as_such() -> None:
    assert RunSpec("easy-sjbf", "ave2", "incremental").published_name == "EASY++"
    assert RunSpec("easy-sjbf", "ave2", "incremental",
                   starvation_guard_s=86_400).published_name == "EASY++ (guard 24 h)"
    assert RunSpec("easy", "requested", "requested").published_name == "EASY"
    assert RunSpec("easy-sjbf", "learned", "incremental").published_name is None
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    shown = CliRunner().invoke(main, ["simulate", str(sample), "--predictor", "ave2",
                                      "--starvation-guard", "24h"]).output
    assert "simulated: EASY++ (guard 24 h) = easy-sjbf + ave2 + incremental + guard 24 h" in shown
    assert "starvation guard: 24 h (--starvation-guard" in shown


@pytest.mark.parametrize(("options", "guard_s"), [((), DEFAULT_STARVATION_GUARD_S),
                                                    (("--starvation-guard", "off"), None),
                                                    (("--starvation-guard", "12h"), 43_200)])
def test_predict_eval_runs_every_predictor_under_the_guard_it_names(options, guard_s) -> None:
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    runner = CliRunner()
    payload = json.loads(runner.invoke(main, ["predict-eval", str(sample), "--no-plots", "--format",
                                              "json", *options]).output)
    assert payload["starvation_guard_s"] == guard_s
    table = runner.invoke(main, ["predict-eval", str(sample), "--no-plots", *options]).output
    assert ("starvation guard, every predictor: off" in table) == (guard_s is None)
    # the AVEbsld printed is the one simulate prints for the same run (same guard)
    learned = json.loads(runner.invoke(main, ["simulate", str(sample), "--no-baseline", "--format",
                                              "json", *options]).output)["runs"][0]["metrics"]
    assert payload["predictors"]["learned(eloss)"]["ave_bsld"] == pytest.approx(learned["ave_bsld"])


@pytest.mark.parametrize("value", [1, 0.5, -3, float("inf"), float("nan"), True])
def test_every_door_refuses_the_same_expansion_factors(value: float, tmp_path: Path) -> None:
    """The simulator's runs, `tune --xfactors` and the daemon's configuration accept the same
    expansion factors (`starvation.is_expansion_factor`: finite, above 1), each saying so in its
    own words."""
    from hpcpredict.daemon.config import ConfigError, load_config
    from hpcpredict.sim.tune import parse_xfactors

    assert not starvation.is_expansion_factor(value)
    with pytest.raises(ValueError, match="expansion factor must be a finite number > 1"):
        RunSpec("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
                guard_xfactor=value)
    if not isinstance(value, bool):
        with pytest.raises(ValueError, match="--xfactors takes numbers above 1"):
            parse_xfactors(str(value))
    toml = tmp_path / "daemon.toml"
    toml.write_text(f"[daemon]\nstarvation_guard_xfactor = {str(value).lower()}\n")
    with pytest.raises(ConfigError, match="starvation_guard_xfactor: expected a number above 1"):
        load_config(toml)


@pytest.mark.parametrize("value", [1.5, 5, 9.0])
def test_every_door_takes_an_expansion_factor_above_one(value: float, tmp_path: Path) -> None:
    from hpcpredict.daemon.config import load_config
    from hpcpredict.sim.tune import parse_xfactors

    assert starvation.is_expansion_factor(value)
    assert RunSpec("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
                   guard_xfactor=value).guard_xfactor == value
    assert parse_xfactors(str(value)) == (float(value),)
    toml = tmp_path / "daemon.toml"
    toml.write_text(f"[daemon]\nstarvation_guard_xfactor = {value}\n")
    assert load_config(toml).starvation_guard_xfactor == value


def test_the_evidence_is_the_users_last_runs_when_they_say_tiny() -> None:
    assert starvation.evidence_estimate_s(100, 3_000, [5] * 4, 900) == 3_000  # too few runs
    assert starvation.evidence_estimate_s(100, 3_000, [5, 5, 5, 5, 6], 900) == 100  # prediction above
    assert starvation.evidence_estimate_s(1, 3_000, [5, 5, 5, 5, 6], 900) == 12  # 2x the longest
    assert starvation.evidence_estimate_s(1, 3_000, [500, 5, 5, 5, 5, 6], 900) == 12  # the last 5
    assert starvation.evidence_estimate_s(1, 3_000, [5, 5, 5, 5, 451], 900) == 3_000  # 902 > 900
    assert starvation.evidence_estimate_s(1, 10, [5, 5, 5, 5, 6], 900) == 10  # within the request
    assert starvation.evidence_estimate_s(0, 3_000, [0] * 5, 900) == 1


def evidence(name: str, guard_s: int, tiny_s: int, cap_s: int, rule: str = "wait",
             factor: float | None = None):
    return dataclasses.replace(SCHEDULERS[name], starvation_guard_s=guard_s, guard_rule=rule,
                               guard_xfactor=factor, guard_evidence_s=tiny_s, guard_evidence_cap_s=cap_s)


# A 10-processor machine. Job 0 (user 1, 6 procs) runs 1000 s of a 3000 s request; job 1 (user
# 2) needs all 10 and is the head from t=1, protected from t=301 (a 300 s guard). User 3's first
# five jobs (4 procs, 5 s of 3000 s) run before that (Tenfold predicts them 1 s); from t=400 a
# burst of 21 more of them, and of 21 like them from user 4, who has no history.
BURST = ([make_job(1, 0, 6, 1000, 3000, user_id=1), make_job(2, 1, 10, 100, 100, user_id=2)]
         + [make_job(3 + k, 2 + k, 4, 5, 3000, user_id=3) for k in range(5)]
         + [make_job(8 + 2 * k + user - 3, 400 + 10 * k + 5 * (user - 3), 4, 5, 3000, user_id=user)
            for k in range(21) for user in (3, 4)])
USER_3_BURST, USER_4_BURST = range(7, 49, 2), range(8, 49, 2)


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_the_evidence_lets_a_users_tiny_jobs_through_in_front_of_a_protected_head(scheduler: str) -> None:
    """Under the guard every burst job is judged on its 3000 s request and waits for the head
    (started at 1000 s, when job 0 ends); with the evidence, user 3's last five 5 s runs vouch
    for its burst (judged on 10 s, each starts at its submission), user 4's does not (no
    history), and the head starts when it did."""
    plain = simulate(BURST, 10, guarded(scheduler, 300), Tenfold(BURST), CORRECTIONS["incremental"])
    vouched = simulate(BURST, 10, evidence(scheduler, 300, 900, 5_000), Tenfold(BURST),
                       CORRECTIONS["incremental"])
    assert plain.start_s[1] == vouched.start_s[1] == 1_000
    assert all(plain.start_s[index] >= 1_100 for index in range(7, 49))
    assert [vouched.start_s[index] for index in USER_3_BURST] == [400 + 10 * k for k in range(21)]
    assert all(vouched.start_s[index] >= 1_100 for index in USER_4_BURST)
    nothing_tiny = simulate(BURST, 10, evidence(scheduler, 300, 1, 5_000), Tenfold(BURST),
                            CORRECTIONS["incremental"])
    assert nothing_tiny.start_s == plain.start_s


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_from_the_cap_on_the_evidence_gives_way_to_requests(scheduler: str) -> None:
    """With the cap at 300 s too, the guard is due when the evidence would start: no stage."""
    plain = simulate(BURST, 10, guarded(scheduler, 300), Tenfold(BURST), CORRECTIONS["incremental"])
    capped = simulate(BURST, 10, evidence(scheduler, 300, 900, 300), Tenfold(BURST),
                      CORRECTIONS["incremental"])
    assert capped.start_s == plain.start_s



# A 12-processor machine: job 0 (6 procs) runs 1000 s of 3000 s, job 1 (10 procs) is the head
# from t=1, protected from t=301; the 2 processors beside it at its shadow time are its extra.
# From t=400 user 5, new, submits five 2-processor jobs (5 s of 3000 s: they fit in the extra
# processors, one at a time, ending at 405, 410, ..., 425) and, at 405, a 4-processor one like
# them that does not fit there: no evidence when it is submitted, its user's fifth end at 425.
EARLY_BURST = ([make_job(1, 0, 6, 1000, 3000, user_id=1), make_job(2, 1, 10, 100, 100, user_id=2)]
               + [make_job(3 + k, 400 + k, 2, 5, 3000, user_id=5) for k in range(5)]
               + [make_job(8, 405, 4, 5, 3000, user_id=5)])


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
def test_a_waiting_jobs_estimate_follows_its_users_ends(scheduler: str) -> None:
    """The 4-processor job waits for the head under the guard (it starts at 1100, when the head
    ends); with the evidence it starts at 425, when its user's fifth end vouches for it
    (`Simulation._hear_evidence` rewrites the estimates of the user's waiting jobs)."""
    plain = simulate(EARLY_BURST, 12, guarded(scheduler, 300), Tenfold(EARLY_BURST),
                     CORRECTIONS["incremental"])
    vouched = simulate(EARLY_BURST, 12, evidence(scheduler, 300, 900, 5_000), Tenfold(EARLY_BURST),
                       CORRECTIONS["incremental"])
    assert plain.start_s[2:7] == vouched.start_s[2:7] == [400, 405, 410, 415, 420]
    assert plain.start_s[1] == vouched.start_s[1] == 1_000
    assert plain.start_s[7] == 1_100
    assert vouched.start_s[7] == 425
    assert (plain.estimated_starts, vouched.estimated_starts, vouched.estimates_outlived) == (0, 1, 0)


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.integers(0, 2_000),
       st.integers(1, 300), st.sampled_from([None, 2.0, 5.0]))
def test_schedules_with_the_evidence_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, guard_s, beyond_s, tiny_s, factor
) -> None:
    machine, jobs = workload
    policy = evidence(scheduler, guard_s, tiny_s, guard_s + beyond_s,
                      "wait" if factor is None else "xfactor", factor)
    assert_fast_path_exact_and_sound(jobs, machine, policy, predictor, correction)


@pytest.mark.parametrize(("settings", "message"), [
    ({"guard_evidence_s": 900}, "guard_evidence_cap_s must be"),
    ({"guard_evidence_s": 900, "guard_evidence_cap_s": 3_600}, r"cap \(3600 s\) must be at least the guard's \(86400 s\)"),
    ({"guard_evidence_s": 0, "guard_evidence_cap_s": 172_800}, "guard_evidence_s must be"),
    ({"guard_evidence_s": 900, "guard_evidence_cap_s": 172_800, "guard_rule": "promise"},
     "follows the \"wait\" or \"xfactor\" rule"),
    ({"guard_evidence_s": 900, "guard_evidence_cap_s": 172_800, "guard_scope": "head"},
     "over the whole machine"),
    ({"guard_evidence_s": 900, "guard_evidence_cap_s": 172_800, "guard_estimate_multiple": 4.0,
      "guard_estimate_after_s": 3_600}, "not both"),
    ({"guard_evidence_s": 900, "guard_evidence_cap_s": 172_800, "scheduler": "slurm-backfill"},
     "EASY schedulers only"),
])
def test_the_evidence_options_refuse_what_they_cannot_mean(settings, message) -> None:
    with pytest.raises(ValueError, match=message):
        RunSpec(**{"starvation_guard_s": 86_400, **settings})
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec(starvation_guard_s=None, guard_evidence_s=900, guard_evidence_cap_s=172_800)


def test_the_evidence_option_is_named_and_keyed_only_when_on() -> None:
    plain, vouched = RunSpec(starvation_guard_s=86_400), RunSpec(
        starvation_guard_s=86_400, guard_evidence_s=900, guard_evidence_cap_s=172_800)
    assert "guard_evidence_s" not in plain.to_dict()
    assert vouched.to_dict()["guard_evidence_cap_s"] == 172_800
    assert vouched.guard_label == " + guard 24 h, tiny on evidence (<= 15 min) until 48 h"


@pytest.mark.parametrize(("scheduler", "predictor", "guard_s"), [
    ("easy", "ave2", None), ("easy-sjbf", "ave2", None), ("easy", "clairvoyant", None),
    ("easy", "requested", None), ("slurm-backfill", "requested", None), ("fcfs", "learned", None),
    ("easy", "learned", DEFAULT_STARVATION_GUARD_S), ("slurm-backfill", "ave2", DEFAULT_STARVATION_GUARD_S),
])
def test_the_default_guard_is_off_where_the_name_means_unbounded_or_nothing_is_lowered(
    scheduler: str, predictor: str, guard_s: int | None,
) -> None:
    """Published EASY schedulers (requests, AVE2, clairvoyant) replay unbounded, as published;
    requests are never lowered, so no guard has anything to act on, under any scheduler; FCFS
    has no backfilling; the learned model, and any lowered limit under the SLURM model, are
    bounded as the daemon runs them."""
    assert starvation.default_starvation_guard_s(scheduler, predictor) == guard_s


def test_the_live_guard_waits_as_long_as_the_simulated_one_job_by_job() -> None:
    requested = [1, 60, 599, 3_600, 21_601, 86_400]
    for factor in (1.5, 5.0):
        together = xfactor_guard_wait_s(requested, factor, 86_400)
        assert [starvation.xfactor_guard_wait_one_s(request, factor, 86_400)
                for request in requested] == together.tolist()
    assert starvation.xfactor_guard_wait_one_s(3_600, 5.0, 86_400) == 4 * 3_600
    assert starvation.xfactor_guard_wait_one_s(86_400, 5.0, 86_400) == 86_400  # the cap
    assert starvation.xfactor_guard_wait_one_s(601, 1.5, 86_400) == 301  # rounded up
    assert isinstance(starvation.xfactor_guard_wait_one_s(601, 1.5, 86_400), int)


def test_twice_the_users_longest_run_at_the_bound_is_still_tiny() -> None:
    assert starvation.evidence_estimate_s(1, 3_000, [5, 5, 5, 5, 450], 900) == 900
    assert starvation.evidence_estimate_s(1, 3_000, [5, 5, 5, 5, 451], 900) == 3_000
