"""LearnedPredictor: the protocol, clipping, leakage, checkpoints, clones."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.corrections import make_correction
from hpcpredict.learn.features import FeatureContext, FeatureState
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn import LearnedPredictor, NagState, all_losses, parse_loss
from hpcpredict.learn.polynomial import QuadraticExpansion
from hpcpredict.learn.baselines import Ave2Predictor, ClairvoyantPredictor, Predictor
from hpcpredict.sim import SCHEDULERS, SimulationResult, simulate

Event = tuple[int, int, int, JobRequest, int]  # (time, kind, job id, request, runtime)
SUBMIT, END, START = 1, 2, 3  # docs/method.md §10 order at equal times: submission, end, start


def make_stream(n_jobs: int, seed: int, n_users: int = 6) -> list[Event]:
    """Jobs submitted, started after a wait, ended after their runtime; time-ordered events."""
    rng = random.Random(seed)
    events: list[Event] = []
    now = 0
    for job_id in range(n_jobs):
        now += rng.randint(0, 600)
        requested_s = rng.choice([60, 600, 3600, 7200, 86_400])
        run_s = max(1, int(requested_s * rng.random()))
        request = JobRequest(
            job_id=job_id,
            submit_s=now,
            procs=rng.choice([1, 2, 8, 64, 512]),
            requested_s=requested_s,
            user_id=rng.randrange(n_users),
        )
        start_s = now + rng.randint(0, 2000)
        events += [
            (now, SUBMIT, job_id, request, run_s),
            (start_s, START, job_id, request, run_s),
            (start_s + run_s, END, job_id, request, run_s),
        ]
    events.sort(key=lambda e: e[:3])
    return events


def replay(predictor: LearnedPredictor, events: list[Event]) -> list[int]:
    """Drive the three events; return the predictions in submission order."""
    predictions = []
    for now, kind, _, request, run_s in events:
        if kind == SUBMIT:
            predictions.append(predictor.predict(request, now))
        elif kind == START:
            predictor.job_started(request, now)
        else:
            predictor.job_ended(request, run_s, now)
    return predictions


def with_bias(predictor: LearnedPredictor, bias: float) -> LearnedPredictor:
    """Weights that predict `bias` for every job (Phi_0 = 1, all other weights 0)."""
    n = predictor.nag.n_coords
    w = np.zeros(n)
    w[0] = bias
    predictor.nag.state = NagState(w=w, s=np.zeros(n), g_sum=np.zeros(n), n_sum=0.0, t=0)
    return predictor


def job(job_id: int, submit_s: int, requested_s: int = 3600, procs: int = 4, user: int = 1):
    return JobRequest(job_id, submit_s, procs, requested_s, user)


def test_implements_the_predictor_protocol() -> None:
    predictor = LearnedPredictor()
    assert isinstance(predictor, Predictor)
    assert predictor.name == (
        "learned(over=square,under=linear,weight=large_area,eta=5000,l2=4e+09,unit=3600s)"
    )
    assert (predictor.eta, predictor.l2, predictor.negative) == (5000.0, 4e9, "abs")
    assert predictor.loss_unit_s == 3600.0


@pytest.mark.parametrize(
    ("bias", "negative", "expected"),
    [
        (-1234.7, "clip", 1),  # negative: 1 s
        (-1234.7, "abs", 1234),  # the reference's |f|, truncated
        (99.9, "clip", 99),  # whole seconds by truncation, as the reference's int()
        (0.4, "clip", 1),
        (1e9, "clip", 3600),  # never above the request
        (-1e9, "abs", 3600),
        (math.inf, "clip", 3600),
        (-math.inf, "clip", 1),
        (-math.inf, "abs", 3600),
        (math.nan, "clip", 3600),  # a diverged model falls back to the request
    ],
)
def test_raw_predictions_become_whole_seconds_in_range(bias, negative, expected) -> None:
    predictor = with_bias(LearnedPredictor(negative=negative), bias)
    request = job(1, 0, requested_s=3600)
    assert predictor.predict(request, 0) == expected
    assert predictor.raw_prediction(request) == bias or math.isnan(bias)


def test_unknown_negative_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        LearnedPredictor(negative="mirror")  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    loss=st.sampled_from(all_losses()),
    eta=st.sampled_from([1.0, 5000.0, 1e12]),
    l2=st.sampled_from([0.0, 4e9]),
    negative=st.sampled_from(["clip", "abs"]),
    seed=st.integers(0, 10_000),
)
def test_every_prediction_is_in_range(loss, eta, l2, negative, seed) -> None:
    events = make_stream(150, seed)
    predictor = LearnedPredictor(loss, eta=eta, l2=l2, negative=negative)
    predictions = replay(predictor, events)
    requests = [e[3] for e in events if e[1] == SUBMIT]
    assert len(predictions) == len(requests) == 150
    for prediction, request in zip(predictions, requests):
        assert type(prediction) is int
        assert 1 <= prediction <= request.requested_s
    assert predictor.nag.state.t == 150


def test_learning_reduces_the_error_on_a_learnable_stream() -> None:
    """Runtime = request / 4, a linear rule of feature 1: squared loss must close in on it."""
    rng = random.Random(0)
    predictor = LearnedPredictor("squared", eta=1000.0, l2=0.0)
    errors = []
    now = 0
    for job_id in range(4000):
        now += rng.randint(50, 400)
        request = job(job_id, now, requested_s=rng.choice([600, 3600, 7200, 14_400]))
        run_s = request.requested_s // 4
        errors.append(abs(predictor.predict(request, now) - run_s) / run_s)
        predictor.job_started(request, now)
        predictor.job_ended(request, run_s, now + run_s)
    first, last = np.mean(errors[:500]), np.mean(errors[-1000:])
    assert first > 0.4
    assert last < 0.4 * first  # the request alone would be off by 300%


def simulated_jobs(n_jobs: int, seed: int) -> list[Job]:
    """A busy 64-processor machine's log: six users, requests from a minute to a day, runtimes
    below them, so jobs queue, get backfilled and are corrected."""
    rng = random.Random(seed)
    jobs, now = [], 0
    for job_id in range(1, n_jobs + 1):
        now += rng.randint(0, 900)
        requested_s = rng.choice([60, 600, 3600, 7200, 86_400])
        request = JobRequest(job_id, now, rng.choice([1, 4, 16, 32, 64]), requested_s,
                             rng.randrange(6))
        jobs.append(Job(request, max(1, int(requested_s * rng.random() ** 2))))
    return jobs


def leaks_the_future(
    make_predictor: Callable[[list[Job]], Predictor], correction: str, jobs: list[Job]
) -> list[str]:
    """Replay `jobs` with `simulate()`, then again with every runtime not over by a cut time T
    (a job ending at T ends after a submission at T: docs/method.md §10) lengthened to its
    request; what was known before T is the same in both logs, so every prediction made up to T
    and every start before T must be the same. Returns what differed (empty: no leak)."""
    def replay(log: list[Job]) -> SimulationResult:
        return simulate(log, 64, SCHEDULERS["easy-sjbf"], make_predictor(log),
                        make_correction(correction))

    base = replay(jobs)
    base_end_s = [start + job.run_s for start, job in zip(base.start_s, jobs)]
    differences = []
    for cut in (len(jobs) // 4, len(jobs) // 2, 3 * len(jobs) // 4):
        cut_s = jobs[cut].submit_s
        later = [Job(job.request, job.requested_s) if end_s >= cut_s else job
                 for job, end_s in zip(jobs, base_end_s)]
        assert sum(a.run_s != b.run_s for a, b in zip(jobs, later)) > 10  # the future did change
        changed = replay(later)
        for index, job in enumerate(jobs):
            if job.submit_s <= cut_s and (
                changed.initial_prediction_s[index] != base.initial_prediction_s[index]
            ):
                differences.append(f"cut {cut_s}: job {job.job_id}'s prediction")
            if base.start_s[index] < cut_s and changed.start_s[index] != base.start_s[index]:
                differences.append(f"cut {cut_s}: job {job.job_id}'s start")
    return differences


LEAK_PREDICTORS: dict[str, Callable[[list[Job]], Predictor]] = {
    "learned": lambda log: LearnedPredictor(),
    "learned, censored": lambda log: LearnedPredictor(censor_at_limit=True),
    "learned, calibrated": lambda log: LearnedPredictor(calibration_alpha=0.5),
    "ave2": lambda log: Ave2Predictor(),
}


@pytest.mark.parametrize("name", LEAK_PREDICTORS)
def test_simulate_shows_no_predictor_a_runtime_before_the_job_ends(name: str) -> None:
    """Through `simulate()`, where a leak would happen: nothing predicted or started before a
    time T moves when the runtimes of the jobs still running or waiting at T change. A
    simulator telling the predictor a runtime when the job starts fails it (tried by hand), as
    would a predictor reading the log (CLAIRVOYANT, below)."""
    assert leaks_the_future(LEAK_PREDICTORS[name], "incremental", simulated_jobs(300, seed=5)) == []


def test_the_leak_check_catches_a_predictor_given_the_future() -> None:
    """The check above can fail: CLAIRVOYANT, handed the log's runtimes, fails it."""
    differences = leaks_the_future(
        lambda log: ClairvoyantPredictor({job.job_id: job.run_s for job in log}), "incremental",
        simulated_jobs(300, seed=5),
    )
    assert len(differences) > 10


def test_a_job_ending_after_a_submission_cannot_change_its_features() -> None:
    """Submit A, submit B, end A: B learns from x_B as it was at its submission."""
    a, b = job(1, 0, procs=4), job(2, 100, procs=8)
    predictor = LearnedPredictor("squared", eta=100.0, l2=0.0, loss_unit_s=1.0)
    predictor.predict(a, 0)
    predictor.job_started(a, 10)
    predictor.predict(b, 100)
    predictor.job_ended(a, 5000, 5010)  # learns, and A joins the user's history

    expected_state = FeatureState()
    expected_state.job_submitted(a, 0)
    expected_state.job_started(a, 10)
    phi_b = QuadraticExpansion(20).expand(expected_state.job_submitted(b, 100))
    assert predictor.raw_prediction(b) == float(predictor.nag.state.w @ phi_b)
    assert predictor.predict(b, 6000) == predictor.predict(b, 100)  # same x_B, same w
    assert predictor.features.users[1].n_submitted == 2  # asking twice counted once

    # B's update is the one taken on phi_b.
    reference = LearnedPredictor("squared", eta=100.0, l2=0.0)
    reference.nag.state = NagState.from_state(predictor.nag.state.to_state())
    reference.nag.step(phi_b, lambda f: 2.0 * (f - 300.0))
    predictor.job_ended(b, 300, 5400)
    np.testing.assert_array_equal(predictor.nag.state.w, reference.nag.state.w)


@pytest.mark.parametrize(("learn_unseen", "expected_t"), [(True, 1), (False, 0)])
def test_jobs_never_submitted_are_learned_only_if_asked(learn_unseen, expected_t) -> None:
    predictor = LearnedPredictor(learn_unseen=learn_unseen)
    request = job(7, 0)
    predictor.job_started(request, 0)
    predictor.job_ended(request, 100, 100)
    assert predictor.nag.state.t == expected_t
    user = predictor.features.users[1]
    assert (user.n_completed, user.last_run_s, len(user.running)) == (1, 100.0, 0)


def test_save_load_gives_identical_predictions_and_learning(tmp_path: Path) -> None:
    context = FeatureContext(1_296_571_124, "Europe/Paris")
    events = make_stream(600, seed=11)
    half = len(events) // 2
    original = LearnedPredictor("eloss", context=context)
    replay(original, events[:half])
    assert original._pending_phi  # jobs in flight at the checkpoint: they must survive it
    path = tmp_path / "learner.npz"
    original.save(path)
    restored = LearnedPredictor.load(path)
    saved, mine = restored.hyperparameters(), original.hyperparameters()
    assert saved.pop("loss") == parse_loss(mine.pop("loss"))  # restored in canonical form
    assert saved == mine

    assert replay(restored, events[half:]) == replay(original, events[half:])
    final, final_restored = original.state_dict(), restored.state_dict()
    assert final.keys() == final_restored.keys()
    for key in final:
        np.testing.assert_array_equal(final_restored[key], final[key], err_msg=key)
    assert original.nag.state.t == 600


def test_load_state_dict_refuses_other_hyperparameters() -> None:
    state = LearnedPredictor(eta=5000.0).state_dict()
    with pytest.raises(ValueError, match="eta: saved 5000.0, this 100.0"):
        LearnedPredictor(eta=100.0).load_state_dict(state)
    with pytest.raises(ValueError, match="loss"):
        LearnedPredictor("squared").load_state_dict(state)
    with pytest.raises(ValueError, match="loss_unit_s: saved 3600.0, this 1.0"):
        LearnedPredictor(eta=5000.0, loss_unit_s=1.0).load_state_dict(state)


def test_the_loss_unit_scales_the_squared_branches_only() -> None:
    seconds = LearnedPredictor("eloss", loss_unit_s=1.0)._loss
    hours = LearnedPredictor("eloss", loss_unit_s=3600.0)._loss
    # over-prediction by 2 h of a 1 h job on 1 processor: squared branch, / 3600 in hours
    assert hours.value(3 * 3600, 3600, 1) == pytest.approx(seconds.value(3 * 3600, 3600, 1) / 3600)
    assert hours.gradient(3 * 3600, 3600, 1) == pytest.approx(
        seconds.gradient(3 * 3600, 3600, 1) / 3600
    )
    # under-prediction: the linear branch is the same in any unit
    assert hours.value(600, 3600, 1) == seconds.value(600, 3600, 1)
    assert hours.gradient(600, 3600, 1) == seconds.gradient(600, 3600, 1)
    # the E-Loss branches now cost the same for one hour over or under (one second in seconds)
    gamma = hours.gamma(7200, 4)
    assert hours.value(7200 + 3600, 7200, 4) == pytest.approx(hours.value(7200 - 3600, 7200, 4))
    assert hours.value(7200 - 3600, 7200, 4) == pytest.approx(gamma * 3600)
    assert hours.value(7200 + 1800, 7200, 4) < hours.value(7200 - 1800, 7200, 4)


def test_clone_is_fresh_with_the_same_hyperparameters() -> None:
    loss = parse_loss("over=linear,under=square,weight=short_wide")
    predictor = LearnedPredictor(loss, eta=123.0, l2=4.0, negative="abs", learn_unseen=False)
    replay(predictor, make_stream(50, seed=3))
    w_before = predictor.nag.state.w.copy()
    clone = predictor.clone()
    assert clone.hyperparameters() == predictor.hyperparameters()
    assert clone.hyperparameters()["loss"] is loss  # stored verbatim
    assert clone.nag.state.t == 0 and not clone.features.users
    assert not np.any(clone.nag.state.w)
    replay(clone, make_stream(50, seed=4))
    np.testing.assert_array_equal(predictor.nag.state.w, w_before)


def test_discard_forgets_a_job_without_learning() -> None:
    predictor = LearnedPredictor()
    request = job(1, 0, requested_s=3600)
    predictor.predict(request, 0)
    assert predictor.discard(1) is True and predictor.discard(1) is False
    w = predictor.nag.state.w.copy()
    predictor.job_ended(request, 100, 100)  # unseen now: learned only through learn_unseen
    assert predictor.nag.state.t == 1
    np.testing.assert_array_equal(LearnedPredictor().nag.state.w, w)
