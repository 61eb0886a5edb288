"""The compiled replay loop (`sim.replay_kernel`, driven by `sim.compiled_replay`) against the
Python loop it stands in for: the same schedules, predictions, corrections, promises and learned
state, bit for bit, on random workloads and on the real logs; the configurations it does not
model still replay (in the Python loop)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.corrections import CORRECTION_NAMES, CORRECTIONS, make_correction
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.corrections.survival import RuntimeHistory, SurvivalCorrection
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.learn.baselines import Ave2Predictor, RequestedPredictor
from hpcpredict.sim import SCHEDULERS
from hpcpredict import replay_state
from hpcpredict.sim.easy.simulation import Simulation
from hpcpredict.sim.runner import RunSpec, build_predictor
from hpcpredict.logs.workload import load_workload

from conftest import shared_log
from test_simulation import build_predictor as build_test_predictor, workloads

COLUMNS = ("start_s", "initial_prediction_s", "final_prediction_s", "corrections", "backfilled",
           "first_reserved_start_s")


def predictor_named(name: str, jobs: list[Job]):
    """test_simulation's predictors by name, and the learner."""
    return LearnedPredictor() if name == "learned" else build_test_predictor(name, jobs)


def both_loops(jobs, machine, scheduler, predictor_of, correction, progress_every=5000):
    """(result, predictor, progress reports, correction) of the compiled loop, then of the Python
    loop (SURVIVAL: a fresh policy, with its own history, for each); `correction` a name or a
    function that makes the policy."""
    outcomes = []
    for compiled in (True, False):
        predictor = predictor_of()
        policy = make_correction(correction) if isinstance(correction, str) else correction()
        reports: list[int] = []
        simulation = Simulation(jobs, machine, scheduler, predictor, policy, compiled=compiled)
        assert simulation.why_python_loop() is None
        result = simulation.run(progress=reports.append, progress_every=progress_every)
        assert result.loop == ("compiled" if compiled else "python")
        outcomes.append((result, predictor, reports, policy))
    return outcomes


def assert_same(compiled, python) -> None:
    (fast, fast_predictor, fast_reports, fast_policy), (slow, slow_predictor, slow_reports, slow_policy) = (
        compiled, python)
    for column in COLUMNS:
        assert getattr(fast, column) == getattr(slow, column), column
    assert fast_reports == slow_reports
    if isinstance(fast_predictor, LearnedPredictor):
        assert fast_predictor.nag.state.t == slow_predictor.nag.state.t
        assert fast_predictor.nag.state.n_sum == slow_predictor.nag.state.n_sum
        assert np.array_equal(fast_predictor.nag.table, slow_predictor.nag.table)
        for user_id in slow_predictor.features.users:
            assert fast_predictor.features.users[user_id] == slow_predictor.features.users[user_id]
        assert len(fast_predictor.features.users) == len(slow_predictor.features.users)
    if isinstance(fast_predictor, Ave2Predictor):
        assert fast_predictor._last_two_s == slow_predictor._last_two_s
    if isinstance(fast_policy, SurvivalCorrection):
        assert (fast_policy.estimated, fast_policy.fallbacks) == (slow_policy.estimated, slow_policy.fallbacks)
        assert list(fast_policy.history._ended.items()) == list(slow_policy.history._ended.items())
        assert fast_policy.history._running == slow_policy.history._running == {}
        for name, value in slow_policy.to_state().items():
            assert np.array_equal(fast_policy.to_state()[name], value), name


GUARDS = st.sampled_from([None, ("wait", 0), ("wait", 60), ("wait", 200), ("promise", 100),
                          ("xfactor", 150)])


@settings(max_examples=300, deadline=None)
@given(workloads(), st.sampled_from(sorted(SCHEDULERS)),
       st.sampled_from(["requested", "clairvoyant", "ave2", "learned"]),
       st.sampled_from(sorted(CORRECTION_NAMES)), GUARDS)
def test_the_compiled_loop_replays_what_the_python_loop_replays(workload, scheduler, predictor,
                                                                correction, guard):
    """Every covered configuration on random workloads, the guard firing often (thresholds of
    seconds), the learner's pool of pending rows grown at nearly every submission (one row at
    first), progress reported every 3 jobs."""
    machine, jobs = workload
    policy = SCHEDULERS[scheduler]
    if guard is not None:
        rule, wait_s = guard
        policy = dataclasses.replace(policy, guard=GuardSettings(
            wait_s, rule, 3.0 if rule == "xfactor" else None))
    with mock.patch.object(replay_state, "FIRST_POOL_ROWS", 1):
        outcomes = both_loops(jobs, machine, policy, lambda: predictor_named(predictor, jobs),
                              correction, progress_every=3)
    assert_same(*outcomes)


@settings(max_examples=200, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]),
       st.sampled_from(["requested", "ave2", "learned"]), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([0.2, 0.5, 0.9]))
def test_survival_with_a_short_window_replays_alike(workload, scheduler, predictor, window,
                                                    min_history, quantile):
    """SURVIVAL's history at its edges: a window of a few runtimes (the ring wraps at nearly
    every end), estimates from the first ended jobs, and the running jobs' lower bounds, which
    the default window and min_history seldom reach on small workloads."""
    machine, jobs = workload

    def policy() -> SurvivalCorrection:
        return SurvivalCorrection(quantile=quantile, min_history=min_history,
                                  history=RuntimeHistory(window=window))

    outcomes = both_loops(jobs, machine, SCHEDULERS[scheduler],
                          lambda: predictor_named(predictor, jobs), policy, progress_every=4)
    assert_same(*outcomes)


def test_a_learner_trained_before_the_replay_goes_on_from_its_state():
    """A predictor that has learned from other jobs (its users have rows, NAG has stepped) is
    replayed on by both loops from the same state: the compiled loop reads the learner's own
    arrays."""
    first = [Job(JobRequest(100 + k, 10 * k, 1 + k % 3, 500, 1 + k % 4), 50 + 7 * k) for k in range(30)]
    later = [Job(JobRequest(k, 400 + 13 * k, 1 + k % 4, 900, 1 + k % 6), 20 + 31 * k % 700)
             for k in range(1, 60)]

    def trained() -> LearnedPredictor:
        predictor = LearnedPredictor()
        Simulation(first, 4, SCHEDULERS["easy-sjbf"], predictor, CORRECTIONS["incremental"],
                   compiled=False).run()
        return predictor

    assert_same(*both_loops(later, 4, SCHEDULERS["easy-sjbf"], trained, "incremental"))


class RequestedAgain(RequestedPredictor):
    """A subclass that could change a rule: it does not inherit its parent's compiled form."""


@pytest.mark.parametrize("change", [
    {"exhaustive": True, "reason": "exhaustive decisions"},
    {"decide_on_correction": True, "reason": "decisions at corrections"},
    {"correction": "survival with a history",
     "reason": "a SURVIVAL history from before (the loops start from none)"},
    {"predictor": lambda: LearnedPredictor(feature_scaling="robust"), "reason": "robust feature scaling"},
    {"predictor": lambda: LearnedPredictor(censor_at_limit=True), "reason": "censoring at the limit"},
    {"predictor": lambda: LearnedPredictor(calibration_alpha=0.5), "reason": "calibration"},
    {"predictor": RequestedAgain, "reason": "the predictor requested has no compiled form"},
    {"scheduler": {"guard": GuardSettings(60, slack_s=30, slack_after_s=10)},
     "reason": "the guard's slack stage"},
    {"duplicate_ids": True, "reason": "job ids that repeat (the objects key their state by job id)"},
])
def test_what_the_compiled_loop_does_not_model_replays_in_the_python_loop(change):
    jobs = [Job(JobRequest(k, 5 * k, 1 + k % 3, 300, 1 + k % 2), 40 + k) for k in range(1, 30)]
    if change.get("duplicate_ids"):
        jobs = [Job(dataclasses.replace(job.request, job_id=1 + job.job_id % 5), job.run_s) for job in jobs]
    scheduler = dataclasses.replace(SCHEDULERS["easy-sjbf"], **change.get("scheduler", {}))

    def simulation(**options: object) -> Simulation:
        predictor = change.get("predictor", LearnedPredictor)()
        if change.get("correction") == "survival with a history":  # the daemon's, restored
            correction = make_correction("survival")
            correction.job_ended(JobRequest(99, 0, 1, 300, 1), 120, 120)
        else:
            correction = make_correction("incremental")
        return Simulation(jobs, 4, scheduler, predictor, correction, exhaustive=change.get("exhaustive", False),
                          decide_on_correction=change.get("decide_on_correction", False), **options)

    chosen = simulation()
    result = chosen.run()
    assert (result.loop, result.loop_reason) == ("python", change["reason"])  # `simulate` says both
    assert all(start >= job.submit_s for start, job in zip(result.start_s, jobs))
    # the Python loop's own schedule, job for job: what `run` chose is that loop, not an approximation
    python = simulation(compiled=False).run()
    assert result.schedule_digest() == python.schedule_digest()
    assert list(result.start_s) == list(python.start_s) and result.corrections == python.corrections


# The real logs: the default, the published baselines and the guard's rules, as campaigns run them.
REAL_CONFIGURATIONS = [
    RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400),
    RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400, guard_rule="xfactor",
            guard_xfactor=5.0),
    RunSpec("easy", "requested", "requested"),
    RunSpec("easy-sjbf", "ave2", "incremental"),
    RunSpec("easy-sjbf", "clairvoyant", "requested"),
    RunSpec.from_keys("easy", "ave2", "doubling", starvation_guard_s=3600, guard_rule="promise"),
    RunSpec.from_keys("easy-sjbf", "learned", "survival", starvation_guard_s=86_400),
]


@pytest.fixture(scope="module")
def kth():
    return load_workload(shared_log("KTH-SP2-1996-2.swf.gz"))


@pytest.mark.slow
@pytest.mark.parametrize("spec", REAL_CONFIGURATIONS, ids=lambda spec: (
    f"{spec.scheduler}-{spec.predictor}-{spec.correction}-{spec.guard and spec.guard.label}"))
def test_the_compiled_loop_replays_kth_sp2_as_the_python_loop(kth, spec):
    scheduler = dataclasses.replace(SCHEDULERS[spec.scheduler], guard=spec.guard)
    assert_same(*both_loops(kth.jobs, kth.machine_procs, scheduler,
                            lambda: build_predictor(spec, kth), spec.correction))


@pytest.mark.slow
@pytest.mark.parametrize("log, procs", [("SDSC-BLUE-2000-4.1-cln.swf.gz", None),
                                        ("CEA-Curie-2011-2.1-cln.swf.gz", 80_640)])
@pytest.mark.parametrize("correction", ["incremental", "survival"])
def test_the_compiled_loop_replays_the_large_logs_as_the_python_loop(log, procs, correction):
    """The default, and with SURVIVAL (tune's other correction), on the first 25,000 jobs of the
    two large logs (CEA-Curie's time zone makes the time-of-day features read local time)."""
    workload = load_workload(shared_log(log), machine_procs=procs)
    workload = dataclasses.replace(workload, jobs=workload.jobs[:25_000])
    spec = REAL_CONFIGURATIONS[0]
    scheduler = dataclasses.replace(SCHEDULERS["easy-sjbf"], guard=GuardSettings(86_400))
    assert_same(*both_loops(list(workload.jobs), workload.machine_procs, scheduler,
                            lambda: build_predictor(spec, workload), correction))
