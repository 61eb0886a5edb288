"""The SLURM model's compiled loop (`sim.slurm_replay_kernel`, driven by
`sim.compiled_slurm_replay`) against the Python loop of `simulate_slurm` it stands in for: the
same schedules, predictions, corrections, promises and learned state, bit for bit, on random
workloads with random slurm.conf settings and on a real log; what it does not model still
replays (in the Python loop)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.corrections import CORRECTION_NAMES, make_correction
from hpcpredict.corrections.starvation import GuardSettings, guard_from
from hpcpredict.corrections.survival import RuntimeHistory, SurvivalCorrection
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict import replay_state
from hpcpredict.sim.runner import RunSpec, build_predictor
from hpcpredict.sim.slurm_model.slurm_backfill import SlurmBackfill, SlurmParams, simulate_slurm
from hpcpredict.logs.workload import load_workload

from conftest import shared_log
from test_replay_kernel import assert_same, predictor_named
from test_simulation import NoisyPredictor, workloads
from test_slurm_backfill import slurm_params

GUARDS = st.sampled_from([None, (0, None), (60, None), (200, None), (150, 3.0), (40, 1.5)])


def both_loops(jobs, machine, scheduler, predictor_of, correction, *, lead_s=0, progress_every=5000):
    """(result, predictor, progress reports, correction) of the compiled loop, then of the Python
    loop, each with a fresh predictor and policy; `correction` a name or a function making it."""
    outcomes = []
    for compiled in (True, False):
        predictor = predictor_of()
        policy = make_correction(correction) if isinstance(correction, str) else correction()
        reports: list[int] = []
        result = simulate_slurm(jobs, machine, scheduler, predictor, policy, correction_lead_s=lead_s,
                                progress=reports.append, progress_every=progress_every,
                                compiled=compiled)
        outcomes.append((result, predictor, reports, policy))
    return outcomes


@settings(max_examples=300, deadline=None)
@given(workloads(), slurm_params(), st.sampled_from(["requested", "clairvoyant", "ave2", "learned"]),
       st.sampled_from(sorted(CORRECTION_NAMES)), GUARDS, st.sampled_from([0, 0, 20]))
def test_the_compiled_loop_replays_what_the_python_loop_replays(workload, params, predictor,
                                                                correction, guard, lead_s):
    """Every predictor and correction, every setting the model reads, the guard firing often
    (thresholds of seconds, both rules), corrections ahead of the limit, the learner's pool of
    pending rows grown at nearly every submission (one row at first), progress every 3 jobs."""
    machine, jobs = workload
    guard_s, xfactor = guard if guard is not None else (None, None)
    scheduler = SlurmBackfill(params, guard=guard_from(guard_s, rule="wait" if xfactor is None else "xfactor",
                                                       xfactor=xfactor))
    with mock.patch.object(replay_state, "FIRST_POOL_ROWS", 1):
        outcomes = both_loops(jobs, machine, scheduler, lambda: predictor_named(predictor, jobs),
                              correction, lead_s=lead_s, progress_every=3)
    assert_same(*outcomes)


def test_limits_the_guard_raises_make_the_next_pass_plan_again():
    """The guard falling due between other changes (here by the xfactor rule, 2 s for a 1 s
    request) raises the running jobs' limits, a job update that makes the next periodic pass
    re-plan even when nothing else changed (found by the test above at 3,000 examples: a loop
    that did not note it replayed differently)."""
    jobs = [Job(JobRequest(job_id, submit_s, procs, requested_s, 1), run_s)
            for job_id, submit_s, procs, requested_s, run_s in [
                (1, 0, 1, 5, 4), (2, 0, 1, 1, 1), (3, 1, 1, 1, 1), (4, 1, 1, 1, 1), (5, 1, 1, 3, 2),
                (6, 1, 2, 1, 1), (7, 1, 1, 1, 1), (8, 1, 1, 1, 1)]]
    params = SlurmParams(bf_interval_s=1, bf_max_job_test=3, bf_window_min=1, bf_resolution_s=1)
    assert_same(*both_loops(jobs, 3, SlurmBackfill(params, guard=GuardSettings(150, "xfactor", 3.0)),
                            LearnedPredictor, "doubling"))


@settings(max_examples=100, deadline=None)
@given(workloads(), slurm_params(), st.sampled_from(["requested", "ave2", "learned"]),
       st.integers(1, 4), st.integers(1, 3), st.sampled_from([0.2, 0.5, 0.9]), GUARDS)
def test_survival_with_a_short_window_replays_alike(workload, params, predictor, window,
                                                    min_history, quantile, guard):
    """SURVIVAL at its edges (its ring wraps at nearly every end, estimates from the first ended
    jobs, the running jobs' lower bounds), which the defaults seldom reach on small workloads."""
    machine, jobs = workload
    guard_s, xfactor = guard if guard is not None else (None, None)

    def policy() -> SurvivalCorrection:
        return SurvivalCorrection(quantile=quantile, min_history=min_history,
                                  history=RuntimeHistory(window=window))

    guard = guard_from(guard_s, rule="wait" if xfactor is None else "xfactor", xfactor=xfactor)
    outcomes = both_loops(jobs, machine, SlurmBackfill(params, guard=guard),
                          lambda: predictor_named(predictor, jobs), policy, progress_every=4)
    assert_same(*outcomes)


def _jobs() -> list[Job]:
    return [Job(JobRequest(k, 5 * k, 1 + k % 3, 300, 1 + k % 2), 40 + k) for k in range(1, 30)]


@pytest.mark.parametrize("change", ["noisy predictor", "survival with a history", "duplicate ids",
                                    "robust learner"])
def test_what_the_compiled_loop_does_not_model_replays_in_the_python_loop(change):
    jobs = _jobs()
    if change == "duplicate ids":
        jobs = [Job(dataclasses.replace(job.request, job_id=1 + job.job_id % 5), job.run_s) for job in jobs]
    predictor = {"noisy predictor": NoisyPredictor(3),
                 "robust learner": LearnedPredictor(feature_scaling="robust")}.get(change, LearnedPredictor())
    correction = make_correction("survival")
    if change == "survival with a history":  # the daemon's, restored
        correction.job_ended(JobRequest(99, 0, 1, 300, 1), 120, 120)
    with mock.patch("hpcpredict.sim.slurm_model.compiled_slurm_replay.replay") as compiled:
        result = simulate_slurm(jobs, 4, SlurmBackfill(), predictor, correction)
    compiled.assert_not_called()
    assert (result.loop, result.loop_reason) == ("python", {
        "noisy predictor": "the predictor noisy has no compiled form",
        "survival with a history": "a SURVIVAL history from before (the loops start from none)",
        "duplicate ids": "job ids that repeat (the objects key their state by job id)",
        "robust learner": "robust feature scaling"}[change])
    assert all(start >= job.submit_s for start, job in zip(result.start_s, jobs))


def test_a_covered_replay_takes_the_compiled_loop():
    """The default configuration is modelled: `simulate_slurm` does not fall back silently."""
    with mock.patch("hpcpredict.sim.slurm_model.compiled_slurm_replay.replay",
                    side_effect=RuntimeError("compiled")):
        with pytest.raises(RuntimeError, match="compiled"):
            simulate_slurm(_jobs(), 4, SlurmBackfill(guard=GuardSettings(86_400)), LearnedPredictor(),
                           make_correction("incremental"))


def test_the_result_says_which_loop_replayed_it():
    arguments = (_jobs(), 4, SlurmBackfill(guard=GuardSettings(86_400)))
    assert simulate_slurm(*arguments, LearnedPredictor(), make_correction("incremental")).loop == "compiled"
    python = simulate_slurm(*arguments, LearnedPredictor(), make_correction("incremental"),
                            compiled=False)
    assert (python.loop, python.loop_reason) == ("python", "asked for")


def test_bad_input_is_refused_alike():
    """A job wider than the machine: the same error, naming it, whichever loop would replay."""
    jobs = [Job(JobRequest(1, 0, 1, 100, 1), 10), Job(JobRequest(2, 5, 8, 100, 1), 10)]
    messages = []
    for compiled in (True, False):
        with pytest.raises(ValueError, match="job 2") as error:
            simulate_slurm(jobs, 4, SlurmBackfill(), LearnedPredictor(), make_correction("incremental"),
                           compiled=compiled)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


REAL_CONFIGURATIONS = [
    (RunSpec.from_keys("slurm-backfill", "learned", "incremental", starvation_guard_s=86_400), ""),
    (RunSpec("slurm-backfill", "learned", "survival"), "bf_job_part_count_reserve=1"),
    (RunSpec.from_keys("slurm-backfill", "ave2", "incremental", starvation_guard_s=86_400,
             guard_rule="xfactor", guard_xfactor=5.0),
     "PriorityWeightAge=1000,PriorityWeightJobSize=500,bf_interval=60,bf_resolution=300,"
     "bf_max_job_test=50"),
    (RunSpec("slurm-backfill", "requested", "requested"), ""),
]


@pytest.fixture(scope="module")
def kth():
    return load_workload(shared_log("KTH-SP2-1996-2.swf.gz"))


@pytest.mark.slow
@pytest.mark.parametrize("spec,params", REAL_CONFIGURATIONS, ids=lambda value: (
    f"{value.predictor}-{value.correction}-{value.guard and value.guard.label}" if isinstance(value, RunSpec)
    else value[:24]))
def test_the_compiled_loop_replays_kth_sp2_as_the_python_loop(kth, spec, params):
    scheduler = SlurmBackfill(SlurmParams.parse(params), guard=spec.guard)
    assert_same(*both_loops(kth.jobs, kth.machine_procs, scheduler,
                            lambda: build_predictor(spec, kth), spec.correction, lead_s=30))
