"""Censoring (docs/method.md §4): a job killed at its limit only says its runtime is at least that.

`LearnedPredictor.learn_lower_bound` learns such a job with the under-prediction branch of the
loss alone, and not at all when the model already predicts the bound: so learning a censored
runtime never lowers a prediction that had reached it. The simulator (through ``censor_at_limit``
and `job_ended`) and the daemon (tests/test_daemon_service.py) call that one method.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcpredict.jobs import JobRequest
from hpcpredict.learn import LearnedPredictor
from hpcpredict.corrections.policies import CORRECTIONS
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.easy.schedulers import SCHEDULERS
from hpcpredict.sim.easy.simulation import simulate
from hpcpredict.logs.workload import load_workload

SAMPLE_LOG = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"

# (requested s, runtime as a fraction of it, idle gap s after the job) of one user's earlier jobs
_history = st.lists(
    st.tuples(st.integers(60, 86_400), st.floats(0.01, 1.0), st.integers(0, 50_000)),
    max_size=25,
)


def warmed(history: list[tuple[int, float, int]], **options: object) -> tuple[LearnedPredictor, int]:
    """A learner that has learned `history` (user 1, 4 processors); returns it and the clock."""
    predictor = LearnedPredictor(**options)  # type: ignore[arg-type]
    now_s = 0
    for job_id, (requested_s, fraction, gap_s) in enumerate(history, start=1):
        request = JobRequest(job_id=job_id, submit_s=now_s, procs=4, requested_s=requested_s,
                             user_id=1)
        predictor.predict(request, now_s)
        predictor.job_started(request, now_s)
        run_s = max(1, int(requested_s * fraction))
        predictor.job_ended(request, run_s, now_s + run_s)
        now_s += run_s + gap_s
    return predictor, now_s


def nag_arrays(predictor: LearnedPredictor) -> dict[str, np.ndarray]:
    return {key: value.copy() for key, value in predictor.nag.state.to_state().items()}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=_history,
    requested_s=st.integers(60, 86_400),
    bound_fraction=st.floats(0.0, 1.0),
    bias=st.floats(-2e5, 2e5),  # moves f so that both sides of the bound are reached
    l2=st.sampled_from([0.0, 4e9]),
    negative=st.sampled_from(["abs", "clip"]),
    feature_scaling=st.sampled_from(["raw", "robust"]),
)
def test_a_censored_runtime_never_pulls_a_prediction_below_it(
    history: list[tuple[int, float, int]],
    requested_s: int,
    bound_fraction: float,
    bias: float,
    l2: float,
    negative: str,
    feature_scaling: str,
) -> None:
    predictor, now_s = warmed(history, l2=l2, negative=negative, feature_scaling=feature_scaling)
    predictor.nag.state.w[0] += bias
    job = JobRequest(job_id=10**6, submit_s=now_s, procs=4, requested_s=requested_s, user_id=1)
    twin = JobRequest(job_id=10**6 + 1, submit_s=now_s, procs=4, requested_s=requested_s,
                      user_id=1)  # same user, instant, size: the same features as `job`
    before = predictor.predict(job, now_s)
    assert predictor.predict(twin, now_s) == before
    bound_s = max(1, int(requested_s * bound_fraction))
    state = nag_arrays(predictor)
    gradients = []
    step = predictor.nag.step
    predictor.nag.step = lambda phi, gradient: (gradients.append(gradient), step(phi, gradient))[1]
    predictor.job_started(job, now_s)

    stepped = predictor.learn_lower_bound(job, bound_s, now_s + bound_s)

    after = predictor.predict(twin, now_s)
    if before >= bound_s:
        # The bound is met: no step, no l2 shrinkage, no scale change; the prediction stays.
        assert not stepped and not gradients
        for key, value in nag_arrays(predictor).items():
            np.testing.assert_array_equal(value, state[key], err_msg=key)
        assert after == before >= bound_s
    else:
        # Below the bound: one step, on the under-prediction branch alone. Its derivative is
        # <= 0 wherever f is below the bound (it can only push f up) and 0 from the bound on.
        assert stepped and len(gradients) == 1
        bound = float(bound_s)
        for f in np.linspace(-10 * bound, 10 * bound, 81):
            derivative = gradients[0](float(f))
            assert derivative == 0.0 if f >= bound else derivative < 0.0
    # Either way the job is in its user's history, with the time it ran, and not pending.
    assert predictor.features.users[1].last_run_s == bound_s
    assert job.job_id not in predictor.state_dict()["pending/job_id"].tolist()


def test_uncensored_learning_does_pull_a_prediction_at_the_limit_down() -> None:
    """What censoring prevents: a job at its limit learned as a true runtime drags a model that
    predicts a little more than the limit (capped: the limit) below the limit."""
    outcomes = {}
    for censor in (False, True):
        predictor, now_s = warmed([(3600, 0.5, 100)] * 40, censor_at_limit=censor)
        job = JobRequest(job_id=99, submit_s=now_s, procs=4, requested_s=3600, user_id=1)
        twin = JobRequest(job_id=100, submit_s=now_s, procs=4, requested_s=3600, user_id=1)
        predictor.predict(job, now_s)
        predictor.nag.state.w[0] += 3700.0 - predictor.raw_prediction(job)  # Phi_0 = 1: f = 3700
        assert predictor.predict(job, now_s) == predictor.predict(twin, now_s) == 3600
        predictor.job_started(job, now_s)
        predictor.job_ended(job, 3600, now_s + 3600)  # ran to its limit: killed there
        outcomes[censor] = predictor.predict(twin, now_s)
    assert outcomes[True] == 3600
    assert outcomes[False] < 3600


@pytest.mark.parametrize(("killed_at_limit", "censored"), [(None, True), (True, True), (False, False)])
def test_job_ended_censors_what_the_driver_says_was_killed(
    killed_at_limit: bool | None, censored: bool
) -> None:
    """None infers a kill from the runtime reaching the request (SWF); a driver that knows
    (SLURM's state) says so, either way."""
    predictor = LearnedPredictor(censor_at_limit=True)
    calls = []
    predictor.learn_lower_bound = lambda *args: calls.append(args) or True  # type: ignore[method-assign]
    job = JobRequest(job_id=1, submit_s=0, procs=4, requested_s=600, user_id=1)
    predictor.predict(job, 0)
    predictor.job_started(job, 0)
    predictor.job_ended(job, 600, 600, killed_at_limit=killed_at_limit)
    assert bool(calls) == censored


def test_without_the_option_a_job_at_its_limit_is_a_true_runtime() -> None:
    predictor = LearnedPredictor()
    predictor.learn_lower_bound = lambda *args: pytest.fail("censored without the option")  # type: ignore[method-assign]
    job = JobRequest(job_id=1, submit_s=0, procs=4, requested_s=600, user_id=1)
    predictor.predict(job, 0)
    predictor.job_started(job, 0)
    predictor.job_ended(job, 600, 600)
    assert predictor.nag.state.t == 1


def test_the_simulator_censors_exactly_the_jobs_that_ran_to_their_request() -> None:
    workload = load_workload(SAMPLE_LOG)
    predictor = LearnedPredictor(censor_at_limit=True)
    censored: list[int] = []
    learn = predictor.learn_lower_bound

    def spy(request: JobRequest, run_s: int, end_s: int) -> bool:
        censored.append(request.job_id)
        return learn(request, run_s, end_s)

    predictor.learn_lower_bound = spy  # type: ignore[method-assign]
    simulate(workload.jobs, workload.machine_procs, SCHEDULERS["easy-sjbf"], predictor,
             CORRECTIONS["incremental"])
    expected = sorted(job.job_id for job in workload.jobs if job.run_s >= job.requested_s)
    assert len(expected) > 20
    assert sorted(censored) == expected


def test_censoring_is_an_option_of_the_run_spec_and_keeps_old_keys() -> None:
    default = RunSpec()
    assert "censor_at_limit" not in default.to_dict()  # campaign keys of earlier runs unchanged
    censored = RunSpec.from_keys(censor_at_limit=True)
    assert censored.to_dict()["censor_at_limit"] is True
    assert "censored" in censored.label
    with pytest.raises(ValueError, match="censor_at_limit"):
        RunSpec.from_keys(censor_at_limit="yes")  # type: ignore[arg-type]
    workload = load_workload(SAMPLE_LOG)
    result = run(workload, censored)
    assert result.settings["censor_at_limit"] is True
    assert "censored" in result.predictor
