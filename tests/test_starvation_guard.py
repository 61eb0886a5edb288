"""The starvation guard (Scheduler.guard, GuardSettings): a bound on how long the head job's
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
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.baselines import RequestedPredictor
from hpcpredict.corrections import CORRECTIONS
from hpcpredict.sim import SCHEDULERS, simulate
from hpcpredict.sim.runner import RunSpec
from hpcpredict.corrections import starvation
from hpcpredict.corrections.starvation import (
    DEFAULT_STARVATION_GUARD_S, GuardSettings, guard_slack_estimate_s, parse_starvation_guard,
    xfactor_guard_wait_s,
)
from hpcpredict.sim.easy import simulation
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


def guarded(name: str, guard_s: int | None, rule: str = "wait"):
    guard = None if guard_s is None else GuardSettings(guard_s, rule)
    return dataclasses.replace(SCHEDULERS[name], guard=guard)


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


def test_the_xfactor_rule_protects_a_job_once_it_has_waited_a_multiple_of_its_request() -> None:
    assert xfactor_guard_wait_s([600, 3_600, 100_000], 5.0, 86_400).tolist() == [2_400, 14_400, 86_400]
    assert xfactor_guard_wait_s([7], 1.5, 86_400).tolist() == [4]  # rounded up, never early


def xfactor(name: str, cap_s: int, factor: float):
    return dataclasses.replace(SCHEDULERS[name], guard=GuardSettings(cap_s, "xfactor", factor))


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
    from hpcpredict.logs.workload import load_workload

    workload = load_workload(sample)
    wait = run(workload, RunSpec.from_keys(starvation_guard_s=86_400))
    for factor, same in ((1e9, True), (5.0, False)):
        relative = run(workload, RunSpec.from_keys(starvation_guard_s=86_400, guard_rule="xfactor",
                                         guard_xfactor=factor))
        assert (relative.start_s == wait.start_s) is same


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.floats(1.001, 20.0))
def test_schedules_under_the_xfactor_rule_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, cap_s, factor
) -> None:
    machine, jobs = workload
    assert_fast_path_exact_and_sound(jobs, machine, xfactor(scheduler, cap_s, factor),
                                     predictor, correction)


def slack_estimating(name: str, guard_s: int, after_s: int, slack_s: int):
    return dataclasses.replace(SCHEDULERS[name], guard=GuardSettings(guard_s, slack_s=slack_s,
                                                                     slack_after_s=after_s))


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


@settings(max_examples=200, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(PREDICTORS),
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.integers(0, 2_000),
       st.integers(1, 3_000))
def test_schedules_with_a_slack_stage_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, guard_s, after_s, slack_s
) -> None:
    machine, jobs = workload
    after_s = min(after_s, guard_s)
    policy = slack_estimating(scheduler, guard_s, after_s, slack_s)
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
    job 1 starts on its 500 s estimate and ends within it (no correction)."""
    slack = simulate(HEAD_IN_ITS_STAGE, 10, slack_estimating("easy", 2_000, 300, 2_500),
                     Tenfold(HEAD_IN_ITS_STAGE), CORRECTIONS["incremental"])
    assert slack.start_s == [0, 1_000]
    assert (slack.final_prediction_s[1], slack.corrections[1]) == (500, 0)


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
       st.sampled_from(sorted(CORRECTIONS)), st.integers(0, 2_000), st.sampled_from(["wait", "promise"]))
def test_guarded_schedules_keep_the_invariants_and_the_fast_path_is_exact(
    workload, scheduler, predictor, correction, guard_s, rule
) -> None:
    machine, jobs = workload
    policy = guarded(scheduler, guard_s, rule)
    assert_fast_path_exact_and_sound(jobs, machine, policy, predictor, correction)


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
    assert "guard_rule" not in RunSpec.from_keys(starvation_guard_s=60).to_dict()  # the old rule: keys unchanged
    promise = RunSpec.from_keys(starvation_guard_s=172_800, guard_rule="promise")
    assert promise.to_dict()["guard_rule"] == "promise" and promise.label.endswith("guard promise or 48 h")
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec.from_keys(guard_rule="promise")
    relative = RunSpec.from_keys(starvation_guard_s=86_400, guard_rule="xfactor", guard_xfactor=5)
    assert relative.to_dict()["guard_xfactor"] == 5.0 and relative.label.endswith("guard xfactor 5 or 24 h")
    assert "guard_xfactor" not in promise.to_dict()  # that rule's setting alone
    with pytest.raises(ValueError, match="guard_xfactor: expected a number above 1"):
        RunSpec.from_keys(starvation_guard_s=60, guard_rule="xfactor")
    with pytest.raises(ValueError, match="guard_xfactor: expected a number above 1"):
        RunSpec.from_keys(starvation_guard_s=60, guard_rule="xfactor", guard_xfactor=1.0)
    with pytest.raises(ValueError, match="xfactor"):
        RunSpec.from_keys(starvation_guard_s=60, guard_xfactor=5.0)
    with pytest.raises(ValueError, match="EASY schedulers only"):
        RunSpec.from_keys(scheduler="slurm-backfill", starvation_guard_s=60, guard_rule="promise")
    assert "guard_estimate_after_s" not in RunSpec.from_keys(starvation_guard_s=60).to_dict()
    with pytest.raises(ValueError, match="within the guard"):
        RunSpec.from_keys(starvation_guard_s=3_600, guard_estimate_slack_s=600, guard_estimate_after_s=7_200)
    with pytest.raises(ValueError, match="guard_estimate_after_s: guard_estimate_slack_s and guard_estimate_after_s go together"):
        RunSpec.from_keys(starvation_guard_s=3_600, guard_estimate_after_s=60)
    slack = RunSpec.from_keys(starvation_guard_s=86_400, guard_estimate_slack_s=7_200, guard_estimate_after_s=14_400)
    assert slack.to_dict()["guard_estimate_slack_s"] == 7_200
    assert slack.to_dict()["guard_estimate_after_s"] == 14_400
    assert slack.label.endswith("guard 24 h, request - 2 h in front after 4 h")
    assert "guard_estimate_slack_s" not in RunSpec.from_keys(starvation_guard_s=60).to_dict()
    with pytest.raises(ValueError, match="seconds >= 1"):
        RunSpec.from_keys(starvation_guard_s=86_400, guard_estimate_slack_s=0, guard_estimate_after_s=60)
    with pytest.raises(ValueError, match="go together"):
        GuardSettings(60, slack_s=60)
    with pytest.raises(ValueError, match="needs a starvation guard"):
        RunSpec.from_keys(guard_estimate_slack_s=7_200, guard_estimate_after_s=60)
    slurm = RunSpec.from_keys(scheduler="slurm-backfill", starvation_guard_s=86_400, guard_estimate_slack_s=7_200,
                    guard_estimate_after_s=60)  # the daemon's slack stage: modelled for SLURM too
    assert slurm.to_dict()["guard_estimate_slack_s"] == 7_200
    spec = RunSpec.from_keys(starvation_guard_s=43_200)
    assert spec.to_dict()["starvation_guard_s"] == 43_200 and spec.label.endswith("guard 12 h")
    with pytest.raises(ValueError, match="backfilling scheduler"):
        RunSpec.from_keys(scheduler="fcfs", starvation_guard_s=10)
    with pytest.raises(ValueError, match=">= 0"):
        RunSpec.from_keys(starvation_guard_s=-1)


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
    assert _simulated_guard() == DEFAULT_STARVATION_GUARD_S == DaemonConfig().guard.wait_s
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
    assert RunSpec.from_keys("easy-sjbf", "ave2", "incremental",
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
    expansion factors (`GuardSettings`' one validation: finite, above 1), each saying so in its
    own names."""
    from hpcpredict.daemon.core.config import ConfigError, load_config
    from hpcpredict.experiments.tune import parse_xfactors

    assert not starvation.is_expansion_factor(value)
    with pytest.raises(ValueError, match="guard_xfactor: expected a number above 1"):
        RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
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
    from hpcpredict.daemon.core.config import load_config
    from hpcpredict.experiments.tune import parse_xfactors

    assert starvation.is_expansion_factor(value)
    assert RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
                   guard_xfactor=value).guard.xfactor == value
    assert parse_xfactors(str(value)) == (float(value),)
    toml = tmp_path / "daemon.toml"
    toml.write_text(f"[daemon]\nstarvation_guard_xfactor = {value}\n")
    assert load_config(toml).guard.xfactor == value


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

