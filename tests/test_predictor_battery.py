"""One battery every predictor passes (in the manner of river's `check_estimator`): whatever the
job stream, a prediction is whole seconds in [1, request]; the same stream gives the same
predictions to two fresh objects; a fresh clone of a trained predictor predicts like a fresh
object; a learned state restored into a fresh clone continues exactly as the original.

The streams are hypothesis-generated: users coming and going, runtimes from 1 s to the request,
jobs running concurrently, ends in time order (as both drivers report them).
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.learn.baselines import Ave2Predictor, ClairvoyantPredictor, Predictor, RequestedPredictor


@st.composite
def job_streams(draw: st.DrawFn) -> list[Job]:
    count = draw(st.integers(1, 60))
    jobs, submit_s = [], 0
    for job_id in range(1, count + 1):
        submit_s += draw(st.integers(0, 20_000))
        requested_s = draw(st.integers(1, 200_000))
        run_s = draw(st.integers(1, requested_s))
        request = JobRequest(job_id, submit_s, draw(st.integers(1, 4096)), requested_s,
                             draw(st.integers(0, 4)))
        jobs.append(Job(request, run_s))
    return jobs


Factory = Callable[[list[Job]], Predictor]
FACTORIES: dict[str, Factory] = {
    "requested": lambda jobs: RequestedPredictor(),
    "clairvoyant": lambda jobs: ClairvoyantPredictor({job.job_id: job.run_s for job in jobs}),
    "ave2": lambda jobs: Ave2Predictor(),
    "learned": lambda jobs: LearnedPredictor(),
    "learned, reference loss in seconds": lambda jobs: LearnedPredictor(loss_unit_s=1.0, negative="clip"),
    "learned, censored": lambda jobs: LearnedPredictor(censor_at_limit=True),
    "learned, robust features": lambda jobs: LearnedPredictor(feature_scaling="robust"),
    "learned, calibrated": lambda jobs: LearnedPredictor(calibration_alpha=0.2),
}


def replay(predictor: Predictor, jobs: list[Job], until: int | None = None) -> list[int]:
    """Feed the stream as a driver does (each job starts at its submission), returning every
    prediction; with `until`, stop after that many submissions (ends due by then reported)."""
    predictions, ends = [], []
    for index, job in enumerate(jobs[:until]):
        request = job.request
        while ends and ends[0][0] <= request.submit_s:
            end_s, ended = heapq.heappop(ends)
            predictor.job_ended(jobs[ended].request, jobs[ended].run_s, end_s)
        before = copy.deepcopy(request)  # a copy: `request == request` would always hold
        predictions.append(predictor.predict(request, request.submit_s))
        assert request == before  # inputs are left as they were
        predictor.job_started(request, request.submit_s)
        heapq.heappush(ends, (request.submit_s + job.run_s, index))
    if until is None:
        while ends:
            end_s, ended = heapq.heappop(ends)
            predictor.job_ended(jobs[ended].request, jobs[ended].run_s, end_s)
    return predictions


@pytest.mark.parametrize("name", FACTORIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_streams())
def test_every_predictor_answers_whole_seconds_within_the_request_deterministically(
    name: str, jobs: list[Job]
) -> None:
    factory = FACTORIES[name]
    log = copy.deepcopy(jobs)
    first = replay(factory(jobs), jobs)
    assert jobs == log  # nor did starts and ends change any job of the stream
    for prediction, job in zip(first, jobs):
        assert type(prediction) is int and 1 <= prediction <= job.request.requested_s
    assert replay(factory(jobs), jobs) == first  # no hidden global state, no randomness


LEARNED = [name for name in FACTORIES if name.startswith("learned")]


@pytest.mark.parametrize("name", LEARNED)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=job_streams(), cut=st.floats(0.0, 1.0))
def test_learned_state_round_trips_and_a_clone_starts_fresh(name: str, jobs: list[Job], cut: float) -> None:
    until = int(cut * len(jobs))
    trained = FACTORIES[name](jobs)
    replay(trained, jobs, until)

    clone = trained.clone()
    assert clone.hyperparameters() == trained.hyperparameters()
    assert replay(clone, jobs) == replay(FACTORIES[name](jobs), jobs)  # nothing learned carried over

    restored = trained.clone()
    restored.load_state_dict(trained.state_dict())
    rest = jobs[until:]
    assert [restored.predict(job.request, job.submit_s) for job in rest] == [
        trained.predict(job.request, job.submit_s) for job in rest
    ]
    for job in rest:  # and it learns the same from there on
        trained.job_ended(job.request, job.run_s, job.submit_s + job.run_s)
        restored.job_ended(job.request, job.run_s, job.submit_s + job.run_s)
    np.testing.assert_array_equal(trained.nag.state.w, restored.nag.state.w)
