"""The compiled feature state (hpcpredict/learn/features.py over hpcpredict/learn/feature_kernels.py) gives
bit for bit the features of the Python version it replaced (tests/feature_reference.py), on
random event sequences as the daemon can produce them: any integer ids, repeated starts, ends of
jobs never started, late submissions, jobs leaving the running set, undos, checkpoints."""

from __future__ import annotations

import math

import numpy as np
from feature_reference import ReferenceFeatureState
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.learn.features import FeatureContext, FeatureState
from hpcpredict.jobs import JobRequest

CONTEXTS = [FeatureContext(), FeatureContext(1_296_571_124, "Europe/Paris"),
            FeatureContext(0, "Africa/Monrovia"), FeatureContext(-3_600, "America/New_York")]
ids = st.one_of(st.integers(0, 3), st.integers(-2**62, 2**62))
KINDS = ["submit", "compute", "start", "end", "late", "leave", "record", "undo", "checkpoint"]


@st.composite
def daemon_streams(draw: st.DrawFn) -> list[tuple]:
    """Events in any order, on a few users and jobs (drawn again and again) with any ids, times
    that mostly move forward but may go back (a late report), integer or fractional."""
    users = draw(st.lists(ids, min_size=1, max_size=4, unique=True))
    jobs = draw(st.lists(ids, min_size=1, max_size=8, unique=True))
    now = draw(st.integers(-10**6, 2 * 10**9))
    events = []
    for _ in range(draw(st.integers(1, 80))):
        now += draw(st.one_of(st.integers(-600, 50_000), st.floats(0, 1e4, allow_nan=False)))
        request = JobRequest(
            job_id=draw(st.sampled_from(jobs)), submit_s=now + draw(st.integers(-100, 0)),
            procs=draw(st.integers(0, 4096)), requested_s=draw(st.integers(1, 10**6)),
            user_id=draw(st.sampled_from(users)))
        events.append((draw(st.sampled_from(KINDS)), now, request,
                       draw(st.one_of(st.integers(0, 10**6), st.floats(0, 1e6)))))
    return events


def _same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.tobytes() == expected.tobytes(), (got.tolist(), expected.tolist())


def _same_users(state: FeatureState, reference: ReferenceFeatureState) -> None:
    assert list(state.users) == list(reference.users)
    for user_id, ref in reference.users.items():
        mine = state.users[user_id]
        for name in ("n_completed", "sum_run_s", "last_run_s", "second_last_run_s",
                     "third_last_run_s", "last_end_s", "n_submitted", "sum_submitted_procs",
                     "running_procs", "running_sum_start_s"):
            got, expected = getattr(mine, name), getattr(ref, name)
            assert got == expected and math.copysign(1, got) == math.copysign(1, expected), name
        assert list(mine.running.items()) == [(j, (float(p), float(s)))
                                              for j, (p, s) in ref.running.items()]


@settings(max_examples=200, deadline=None)
@given(events=daemon_streams(), context=st.sampled_from(CONTEXTS))
def test_compiled_features_equal_the_python_reference_bit_for_bit(events, context) -> None:
    state, reference = FeatureState(context), ReferenceFeatureState(context)
    saved = None
    for kind, now, request, run_s in events:
        if kind == "submit":
            _same(state.job_submitted(request, now), reference.job_submitted(request, now))
        elif kind == "compute":  # a PREDICT: a pure read, even for a user never seen
            _same(state.compute(request, now), reference.compute(request, now))
        elif kind == "start":
            state.job_started(request, now)
            reference.job_started(request, now)
        elif kind == "end":
            state.job_ended(request, run_s, now)
            reference.job_ended(request, run_s, now)
        elif kind == "late":
            _same(state.late_submission(request, now), reference.late_submission(request, now))
        elif kind == "leave":  # the daemon's job that never ran (learning._leave_running_set)
            state.leave_running(request)
            user = reference.users.get(request.user_id)
            if user is not None:
                user.remove_running(request.job_id)
        elif kind == "record":
            state.record_submission(request)
            reference.record_submission(request)
        elif kind == "undo":  # save this user now; put them back at the next undo of them
            if saved is not None and saved[0] == request.user_id:
                state.restore_user(request.user_id, saved[1])
                if saved[2] is None:
                    reference.users.pop(request.user_id, None)
                else:
                    reference.users[request.user_id] = saved[2]
                saved = None
            else:
                ref = reference.users.get(request.user_id)
                saved = (request.user_id, state.save_user(request.user_id),
                         None if ref is None else ref.copy())
                assert (saved[1] is None) == (ref is None)
        else:  # a checkpoint and a restart from it
            state = FeatureState.from_state(state.to_state())
        _same_users(state, reference)


@settings(max_examples=60, deadline=None)
@given(events=daemon_streams(), now=st.integers(0, 3 * 10**9))
def test_the_learners_one_call_submission_equals_features_then_score(events, now) -> None:
    """`job_submitted_and_scored` = `job_submitted`, `QuadraticExpansion.expand`, `w.dot`."""
    from hpcpredict.learn.polynomial import QuadraticExpansion

    expansion = QuadraticExpansion(20)
    w = np.random.default_rng(len(events)).normal(size=expansion.n_terms) * 1e-6
    one, two = FeatureState(), FeatureState()
    for kind, at, request, run_s in events:
        if kind in ("start", "end"):
            for state in (one, two):
                (state.job_started(request, at) if kind == "start"
                 else state.job_ended(request, run_s, at))
        else:
            phi = np.empty(expansion.n_terms)
            f = one.job_submitted_and_scored(request, now, w, phi)
            x_two = two.job_submitted(request, now)
            _same(phi[1:21], x_two)
            phi_two = expansion.expand(x_two)
            _same(phi, phi_two)
            assert f == float(w.dot(phi_two))


class _ReferenceLearner:
    """`LearnedPredictor`'s default path as it was before its per-job calls were fused: the
    Python feature state, `QuadraticExpansion`, `w.dot`, `Nag.step_on_loss_within_scale`."""

    def __init__(self, predictor) -> None:
        from hpcpredict.learn.nag import Nag
        from hpcpredict.learn.polynomial import QuadraticExpansion

        self.features = ReferenceFeatureState()
        self.expansion = QuadraticExpansion(20)
        self.nag = Nag(self.expansion.n_terms, predictor.nag.config)
        self.constants = predictor._step_constants
        self.to_seconds = predictor._to_seconds
        self.pending: dict[int, np.ndarray] = {}

    def predict(self, request: JobRequest, now_s: int) -> int:
        phi = self.pending.get(request.job_id)
        if phi is None:
            phi = self.pending[request.job_id] = self.expansion.expand(
                self.features.job_submitted(request, now_s))
        return self.to_seconds(float(self.nag.state.w.dot(phi)), request.requested_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> bool:
        from hpcpredict.learn.predictor import OUTLIER_AFTER_STEPS, OUTLIER_SCALE_FACTOR

        if run_s > request.requested_s:
            end_s -= run_s - request.requested_s
            run_s = request.requested_s
        phi = self.pending.pop(request.job_id, None)
        if phi is None:
            phi = self.expansion.expand(self.features.late_submission(request, end_s))
        stepped = self.nag.step_on_loss_within_scale(
            phi, self.constants, float(run_s), float(request.procs), OUTLIER_SCALE_FACTOR,
            OUTLIER_AFTER_STEPS)
        self.features.job_ended(request, run_s, end_s)
        return stepped


@settings(max_examples=80, deadline=None)
@given(events=daemon_streams())
def test_the_learners_fused_calls_learn_what_the_separate_calls_learned(events) -> None:
    """`LearnedPredictor`'s one-call submission, peek and end (`learn_and_end`) predict and
    learn bit for bit what the features, expansion, score and NAG step did as separate calls,
    over jobs predicted, peeked at, started (again), ended (also unseen ones: late
    submissions)."""
    from hpcpredict.learn.predictor import LearnedPredictor

    predictor = LearnedPredictor()
    reference = _ReferenceLearner(predictor)
    for kind, now, request, run_s in events:
        request = JobRequest(job_id=request.job_id, submit_s=int(request.submit_s),
                             procs=request.procs, requested_s=request.requested_s,
                             user_id=request.user_id)
        now, run_s = int(now), int(run_s)
        if kind == "compute":  # a PREDICT's peek: features, Phi and score in one call
            answer, x = predictor.peek_features(request, now)
            _same(x, reference.features.compute(request, now))
            phi = reference.pending.get(request.job_id)
            phi = reference.expansion.expand(x) if phi is None else phi
            assert answer == reference.to_seconds(float(reference.nag.state.w.dot(phi)),
                                                  request.requested_s)
            assert predictor.peek(request, now) == answer
        elif kind in ("submit", "record"):
            assert predictor.predict(request, now) == reference.predict(request, now)
        elif kind in ("start", "leave"):
            predictor.job_started(request, now)
            reference.features.job_started(request, now)
        elif kind in ("end", "late"):
            assert predictor.job_ended(request, run_s, now) == reference.job_ended(request, run_s, now)
    mine, theirs = predictor.nag.state, reference.nag.state
    assert (mine.t, mine.n_sum) == (theirs.t, theirs.n_sum)
    for name in ("w", "s", "g_sum"):
        assert getattr(mine, name).tobytes() == getattr(theirs, name).tobytes(), name
    _same_users(predictor.features, reference.features)
