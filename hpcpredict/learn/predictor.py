"""`LearnedPredictor`: the online runtime learner behind the `Predictor` protocol.

It composes three objects — features (`hpcpredict.learn.features`), a loss
(`losses`) and an optimiser (`nag`) — over the degree-2 model of docs/method.md §3:

* at submission (`predict`) it computes x_j from the per-user state, Phi = Phi(x_j) and
  f = w . Phi with the weights of that moment, and keeps Phi for the job (by job id);
* at the end (`job_ended`) it takes one NAG step on the loss of (Phi as *submitted*, true
  runtime), then adds the job to its user's history. The features a job learns from are thus
  exactly the ones it was predicted with: nothing that happened after r_j leaks in.

A job whose submission was missed entirely is learned, if `learn_unseen`, from the
approximation `FeatureState.late_submission` documents.

Turning f into whole seconds (docs/method.md §5, last line): a negative f becomes |f| with
``negative="abs"`` (the default, as the reference did, docs/method.md §10) or 1 s with
``negative="clip"``.
Clipping is the projection onto [1, p~_j] that the loss reasons about, and we expected it to
win; measured, it does not (docs/results.md): a 1-s prediction makes a job fit in every
backfilling hole, so the jobs the model knows least about are the ones backfilled most
aggressively, then corrected; |f| keeps the size of the model's answer, and scheduled better on
two of the three logs. Then
`clip_prediction` truncates to whole seconds (as the reference's int()) and caps at the request.

Censoring (``censor_at_limit``, off by default; docs/method.md §4). A job killed at its time
limit did not show its runtime, only that it is at least the limit. `learn_lower_bound` learns
such a job with the under-prediction branch of the loss alone: if the model already predicts the
bound or more, it takes no step at all (an over-prediction of a censored job is no error), else
one NAG step towards the bound, on the branch that can only raise f. The daemon uses the same
method for jobs killed at a limit it lowered (`hpcpredict.daemon.core.learning`); with
``censor_at_limit`` every job whose runtime reached its request (an SWF log's only sign of a
kill; SLURM's TIMEOUT live) goes the same way.

Robust features (``feature_scaling="robust"``, docs/method.md §2). The break time (feature 16,
seconds since the user's last job ended) is unbounded, and the polynomial squares it: a user back
after months is a point far outside everything learned, and f, extrapolated, hits the cap (the
user's own request). "robust" feeds the model log(1 + break) instead, and predicts with every
coordinate of Phi clamped to the largest magnitude NAG has learned from (its s_i), so no
prediction extrapolates beyond the range seen. Learning still sees the unclamped Phi (NAG widens
its scales as usual).

Bounded influence (docs/daemon.md, "Reliability"). One job must not retrain the model for every
user. Two rules, both in this learner so that the simulator and the daemon behave the same:

* a runtime is learned at most as the job's request, as if it had ended at its limit (a job
  cannot outlive its limit in SLURM, and SWF cleaning rule 7 does the same); a "10-year" END of a
  job that asked for 1 h is then an ordinary job that ran 1 h;
* NAG rescales a coordinate's weight by (s_i / |Phi_i|)^2 when a job's Phi_i exceeds its scale
  s_i, so one job with an absurd feature (a 10-year request, a break time of years, the runtime
  of a user's absurd job in their next job's features) shrinks that coordinate's weight for
  every user at once. Once the model has taken `OUTLIER_AFTER_STEPS` steps (the readiness
  floor: one job per weight), a job whose Phi exceeds `OUTLIER_SCALE_FACTOR` times s_i in any
  coordinate takes no step (it still enters its user's history). 1000x on Phi is about 32x on
  a raw feature (Phi holds its square): no job of the three archive logs after 231 steps comes
  near it (the largest jumps are 100-1000x, 0-4 jobs per log), so their schedules are unchanged.
  `benchmarks/adversarial_end.py` measures the influence before and after (docs/daemon.md).

Defaults (`LearnerSettings`' own, from `hpcpredict.learn.defaults`; chosen on all three archive
logs together, docs/results.md): the reference's eta = 5000 and lambda = 4e9, |f| for negative f,
and the loss measured in hours (``loss_unit_s=3600``, see `hpcpredict.learn.losses`): with the
E-Loss in seconds the squared over-prediction branch dominates from one second on, and the model
collapses towards 1-s predictions (94% of them on KTH-SP2). In hours an error of one hour costs
the same either way, one hour being the fifth step of the incremental correction; neighbouring
units (30 min, 2 h) give close results.

Speed: one job costs one feature computation, one compiled call for the expansion and the dot
product, and one for the NAG step with its loss gradient (two loops on 231 floats, no
allocation): about 11 µs per job in all before that last call was one
(docs/journal/performance-2026-11.md, "Issue 13, item 5" and its round 3).

>>> from hpcpredict.jobs import JobRequest
>>> predictor = LearnedPredictor("eloss", eta=5000.0, l2=0.0)
>>> job = JobRequest(job_id=1, submit_s=0, procs=16, requested_s=3600, user_id=3)
>>> predictor.predict(job, now_s=0)  # w = 0: f = 0, clipped to 1 s
1
>>> predictor.job_started(job, now_s=0)
>>> predictor.job_ended(job, run_s=1800, end_s=1800)  # True: a learning step was taken
True
>>> predictor.nag.state.t
1
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hpcpredict.learn.feature_kernels import learn_and_end
from hpcpredict.learn.features import (
    BREAK_TIME_S,
    FEATURE_NAMES,
    N_FEATURES,
    FeatureContext,
    FeatureState,
)
from hpcpredict.history_keys import history_key
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.calibration import ConformalCalibration
from hpcpredict.learn.defaults import FeatureScaling, NegativeRule
from hpcpredict.learn.explanation import PredictionExplanation, describe_transform
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.learn.losses import AsymmetricLoss, parse_loss
from hpcpredict.learn.nag import (
    Nag,
    NagConfig,
    NagState,
    save_npz_atomic,
    step_constants,
)
from hpcpredict.learn.nag_kernels import expand_and_score
from hpcpredict.learn.polynomial import QuadraticExpansion, term_names
from hpcpredict.learn.rules import LEARNED, learned_seconds

if TYPE_CHECKING:
    from hpcpredict.replay_state import PredictorArrays, ReplayJobs

_STATE_VERSION = 1
_TERM_NAMES = term_names(FEATURE_NAMES)
# Bounded influence (module doc): past this many steps, a job whose Phi has a coordinate more
# than this many times NAG's scale for it is not learned. Chosen so that no job of the three
# archive logs is refused (their largest jump after 231 steps is below 1000x: docs/daemon.md).
OUTLIER_AFTER_STEPS = 231
OUTLIER_SCALE_FACTOR = 1000.0


class HyperparameterMismatchError(ValueError):
    """A state made with other hyperparameters (or another state version) than this predictor's:
    not damage, a configuration that changed, so nobody should fall back past it silently."""


class LearnedPredictor:
    """E-Loss-style online learner (Gaussier et al., SC 2015) implementing `Predictor`.

    Constructor arguments are hyperparameters, stored verbatim (`hyperparameters()`), so that
    `clone()` can rebuild a fresh, untrained predictor; learned state is `state_dict()`.
    """

    def __init__(
        self,
        loss: str | AsymmetricLoss = "eloss",
        *,
        eta: float = LearnerSettings.eta,
        l2: float = LearnerSettings.l2,
        negative: NegativeRule = LearnerSettings.negative,
        loss_unit_s: float = LearnerSettings.loss_unit_s,
        context: FeatureContext | None = None,
        learn_unseen: bool = True,
        censor_at_limit: bool = LearnerSettings.censor_at_limit,
        feature_scaling: FeatureScaling = LearnerSettings.feature_scaling,
        calibration_alpha: float | None = LearnerSettings.calibration_alpha,
        history_by: str = LearnerSettings.history_by,
    ) -> None:
        if isinstance(censor_at_limit, np.bool_):  # (a checkpoint's array)
            censor_at_limit = bool(censor_at_limit)
        # The settings' one validation (`LearnerSettings`); a loss given as an object is its own.
        LearnerSettings(loss if isinstance(loss, str) else "eloss", eta, l2, negative, loss_unit_s,
                        censor_at_limit, feature_scaling, calibration_alpha, history_by)
        self.loss = loss
        self.eta = eta
        self.l2 = l2
        self.negative = negative
        self.loss_unit_s = loss_unit_s
        self.context = context
        self.learn_unseen = learn_unseen
        self.censor_at_limit = bool(censor_at_limit)
        self.feature_scaling = feature_scaling
        self.calibration_alpha = None if calibration_alpha is None else float(calibration_alpha)
        self.history_by = history_by

        base_loss = parse_loss(loss) if isinstance(loss, str) else loss
        self._loss = dataclasses.replace(base_loss, unit_s=float(loss_unit_s))
        self._expansion = QuadraticExpansion(N_FEATURES)
        self.features = FeatureState(context, history_by)
        self.nag = Nag(self._expansion.n_terms, NagConfig(eta=eta, l2=l2))
        # The loss and NAG's constants for the one-call step (`Nag.step_on_loss`).
        self._step_constants = step_constants(self._loss, self.nag.config)
        self._abs_negative = negative == "abs"
        # Phi(x_j) as submitted, for each job predicted (or observed) and not yet ended.
        self._pending_phi: dict[int, np.ndarray] = {}
        self._x = np.empty(N_FEATURES)
        self._robust = feature_scaling == "robust"
        self._clamped = np.empty(self._expansion.n_terms)
        self._peek_phi = np.empty(self._expansion.n_terms)  # scratch of a peek's Phi
        # Calibrated confidence: the model's answer scaled to a target under-prediction rate.
        self.calibration = (None if self.calibration_alpha is None
                            else ConformalCalibration(self.calibration_alpha))
        # With calibration: (the model's answer, the published one) at submission, to judge it.
        self._pending_calibrated: dict[int, tuple[int, int]] = {}
        extras = (",censored" if self.censor_at_limit else "") + (",robust" if self._robust else "")
        extras += f",alpha={self.calibration_alpha:g}" if self.calibration is not None else ""
        extras += f",history={history_by}" if history_by != LearnerSettings.history_by else ""
        self.name = (
            f"learned({self._loss.name},eta={eta:g},l2={l2:g},unit={loss_unit_s:g}s{extras})"
        )

    @classmethod
    def from_settings(cls, settings: LearnerSettings, context: FeatureContext | None = None) -> LearnedPredictor:
        """An untrained predictor with these settings, on the log's or the site's clock."""
        return cls(settings.loss, eta=settings.eta, l2=settings.l2, negative=settings.negative,
                   loss_unit_s=settings.loss_unit_s, context=context,
                   censor_at_limit=settings.censor_at_limit, feature_scaling=settings.feature_scaling,
                   calibration_alpha=settings.calibration_alpha, history_by=settings.history_by)

    # ------------------------------------------------------------------ the protocol
    def predict(self, request: JobRequest, now_s: int, *, features: np.ndarray | None = None) -> int:
        """Whole seconds in [1, requested_s], from the weights of this moment.

        Asking again for a job already predicted reuses its features as first submitted (and
        does not count the submission twice), with the current weights. `features`: x_j as
        `peek_features` computed it when the prediction was served (the daemon's PREDICT, before
        the job had an id), kept for learning instead of features computed now.
        """
        phi = self._pending_phi.get(request.job_id)
        if phi is None:
            phi, f = self._observe(request, now_s, features)
        else:
            f = self._score(phi)
        learned_s = self._to_seconds(f, request.requested_s)
        if self.calibration is not None:
            learned_s = self._calibrated(request, learned_s)
        return learned_s

    def job_started(self, request: JobRequest, now_s: int) -> None:
        self.features.job_started(request, now_s)

    def job_ended(
        self, request: JobRequest, run_s: int, end_s: int, *, killed_at_limit: bool | None = None
    ) -> bool:
        """Learn from (x_j as submitted, run_s), then add the job to its user's history; True
        when a learning step was taken.

        A runtime beyond the request is learned as the request, ending then (a job cannot run
        past its limit: SLURM kills it); a job whose Phi is an outlier takes no step (module
        doc, "Bounded influence").

        With ``censor_at_limit``, a job killed at its limit is learned as a lower bound
        (`learn_lower_bound`). `killed_at_limit` is the scheduler's word (SLURM: TIMEOUT); None
        infers it from the runtime reaching the request, all an SWF log can say.
        """
        if run_s > request.requested_s:  # bounded influence (module doc): learned at the limit
            end_s -= run_s - request.requested_s
            run_s = request.requested_s
        if self.censor_at_limit:
            killed = run_s >= request.requested_s if killed_at_limit is None else killed_at_limit
            if killed:
                return self.learn_lower_bound(request, run_s, end_s)
        # (the two checks here save two calls per learned job when the options are off)
        if self.calibration is not None:
            self._judge_calibration(request, min(run_s, request.requested_s))
        phi = self._pending_phi.pop(request.job_id, None)
        if phi is None and self.learn_unseen:
            phi = self._expansion.expand(self._scaled(
                self.features.late_submission(request, end_s, self._x)))
        if phi is None:
            self.features.job_ended(request, run_s, end_s)
            return False
        # = `not self._outlier(phi)`, then nag.step(phi, lambda f: self._loss.gradient(f, run_s,
        # procs)) (`Nag.step_on_loss_within_scale`), then features.job_ended(request, run_s,
        # end_s), bit for bit, in one compiled call (docs/journal/performance-2026-11.md,
        # "Issue 31, round 3: the feature state compiled")
        nag = self.nag
        state = nag.state
        features = self.features
        row, slot = features.ending(request)
        stepped, n_sum = learn_and_end(
            phi, nag.table, self._step_constants, state.t, state.n_sum, float(run_s),
            float(request.procs), state.t >= OUTLIER_AFTER_STEPS, OUTLIER_SCALE_FACTOR,
            features.table, features.slots, row, slot, float(end_s))
        if stepped:
            nag.count_step(n_sum)
        return stepped

    def _outlier(self, phi: np.ndarray) -> bool:
        """A job not to learn from (module doc, "Bounded influence"): once the model has taken
        `OUTLIER_AFTER_STEPS` steps, some coordinate of its Phi is more than
        `OUTLIER_SCALE_FACTOR` times the largest NAG has learned from."""
        return self.nag.state.t >= OUTLIER_AFTER_STEPS and self.nag.beyond_scale(phi, OUTLIER_SCALE_FACTOR)

    def learn_lower_bound(self, request: JobRequest, run_s: int, end_s: int) -> bool:
        """Learn that the job's runtime is at least min(run_s, request): a censored observation.

        Only the under-prediction branch of the loss is used. If the prediction the model gives
        now from the job's submission features already reaches the bound, nothing is learned
        (the model's state is untouched: no step, no l2 shrinkage, no scale update); else one
        NAG step on the loss of (Phi, bound) whose over branch is cut off, so the loss can only
        pull f up. Either way the job enters its user's history with the time it ran. True when
        a step was taken. A job whose submission was not observed has nothing to check the bound
        against: history only, False.
        """
        bound_s = min(run_s, request.requested_s)
        self._judge_calibration(request, bound_s)
        phi = self._pending_phi.pop(request.job_id, None)
        stepped = False
        if (phi is not None and self._to_seconds(self._score(phi), request.requested_s) < bound_s
                and not self._outlier(phi)):
            gradient = self._loss.gradient
            bound = float(bound_s)
            procs = float(request.procs)
            self.nag.step(phi, lambda f: gradient(f, bound, procs) if f < bound else 0.0)
            stepped = True
        self.features.job_ended(request, bound_s, end_s)
        return stepped

    # ------------------------------------------------------------------ calibrated confidence
    def _calibrated(self, request: JobRequest, model_s: int) -> int:
        """The model's answer as published: scaled to the target under-prediction rate (the
        first answer for a job asked again, so the judged prediction is the one given)."""
        if self.calibration is None:
            return model_s
        given = self._pending_calibrated.get(request.job_id)
        if given is None:
            given = self._pending_calibrated[request.job_id] = (
                model_s, self.calibration.published_s(request.user_id, model_s, request.requested_s))
        return given[1]

    def _judge_calibration(self, request: JobRequest, run_s: int) -> None:
        """A job ended: move the thresholds by whether it outlived its published prediction. A
        job killed at a limit (a lower bound) outlived any prediction below it: the same rule."""
        if self.calibration is None:
            return
        given = self._pending_calibrated.pop(request.job_id, None)
        if given is not None:
            self.calibration.observe(request.user_id, given[0], given[1], run_s)

    # ------------------------------------------------------------------ beyond the protocol
    def discard(self, job_id: int) -> bool:
        """Forget the submission features kept for `job_id` without learning from the job.

        For a job whose runtime must not be trained on (cancelled before running, or killed at a
        limit we lowered); True if there was something to forget. Its user history is left to
        the caller (`features.job_ended` adds a completed job).
        """
        self._pending_calibrated.pop(job_id, None)
        return self._pending_phi.pop(job_id, None) is not None

    def model_prediction_s(self, request: JobRequest, now_s: int) -> int:
        """`predict` without calibration: the learned model's own answer (for a job already
        predicted or observed, from its submission features and today's weights), the one
        censoring judges."""
        phi = self._pending_phi.get(request.job_id)
        f = self._score(phi) if phi is not None else self._observe(request, now_s)[1]
        return self._to_seconds(f, request.requested_s)

    def peek(self, request: JobRequest, now_s: int) -> int:
        """What `predict` would answer, without recording anything.

        For a job the scheduler has not numbered yet (SLURM's ``job_submit`` runs before the
        job has an id): the prediction is served now, and the submission is recorded later,
        when the job is reported with its id. A job already predicted reuses its features.
        """
        return self._peek_now(request, now_s, self._x)

    def peek_features(self, request: JobRequest, now_s: int) -> tuple[int, np.ndarray]:
        """`peek`, and the features x_j it computed (a new array, before any scaling): given to
        `predict` at the job's submission, they are the ones the job learns from."""
        x = np.empty(N_FEATURES)
        return self._peek_now(request, now_s, x), x

    def _peek_now(self, request: JobRequest, now_s: int, x: np.ndarray) -> int:
        """`peek`, x_j computed into `x` (left unscaled). Without robust features and for a job
        not yet observed: the features, Phi and f = w . Phi in one compiled call (the daemon's
        PREDICT; the same values as `_peek`'s separate calls, bit for bit)."""
        if self._robust or request.job_id in self._pending_phi:
            self.features.compute(request, now_s, x)
            return self._peek(request, x.copy())
        phi = self._peek_phi
        return self._peek_answer(
            request, phi, self.features.compute_and_score(request, now_s, x, self.nag.weights, phi))

    def _peek(self, request: JobRequest, x: np.ndarray) -> int:
        """`peek` from x_j computed now (scaled in place), unless the job already has features."""
        phi = self._pending_phi.get(request.job_id)
        if phi is None:
            phi = self._expansion.expand(self._scaled(x))
        return self._peek_answer(request, phi, self._score(phi))

    def _peek_answer(self, request: JobRequest, phi: np.ndarray, f: float) -> int:
        """What `peek` answers for a job of Phi `phi` whose model output is `f` (= `_score`)."""
        learned_s = self._to_seconds(f, request.requested_s)
        if self.calibration is not None:
            given = self._pending_calibrated.get(request.job_id)
            learned_s = given[1] if given is not None else self.calibration.published_s(
                request.user_id, learned_s, request.requested_s)
        return learned_s

    def savepoint(self, request: JobRequest) -> Callable[[], None]:
        """A function that puts back everything one event of the job of `request` can change:
        NAG's state, its user's history (its key's, `history_by`) and calibration, and the job's
        pending features and published prediction.

        `predict`, `job_started`, `job_ended`, `learn_lower_bound` and `discard` for one job
        touch nothing else (the feature clock's cache is a pure
        function of time, `_x`, `_clamped` and `_peek_phi` are scratch). The daemon takes one before applying
        an event and calls it when the event's transaction fails, so that the learner equals
        "checkpoint + logged events" again without a replay.
        """
        nag = self.nag.state
        saved_nag = NagState(nag.w.copy(), nag.s.copy(), nag.g_sum.copy(), nag.n_sum, nag.t)
        user_id, job_id = request.user_id, request.job_id
        key = history_key(request, self.history_by)
        saved_user = self.features.save_user(key)
        saved_phi = self._pending_phi.get(job_id)  # never written in place: kept by reference
        calibration = self.calibration
        saved_published = self._pending_calibrated.get(job_id)  # a tuple: kept by reference
        saved_calibration = None if calibration is None else calibration.save_user(user_id)

        def restore() -> None:
            self.nag.state = saved_nag
            self.features.restore_user(key, saved_user)
            _put_back(self._pending_phi, job_id, saved_phi)
            _put_back(self._pending_calibrated, job_id, saved_published)
            if calibration is not None and saved_calibration is not None:
                calibration.restore_user(user_id, saved_calibration)

        return restore

    def explain(
        self, request: JobRequest, now_s: int, *, features: np.ndarray | None = None
    ) -> PredictionExplanation:
        """Why the model predicts what it does for `request` at `now_s`: f = w . Phi split into
        its terms w_i * phi_i, without recording anything (as `peek`).

        The same code as a prediction: the job's Phi as submitted if it has one, else x_j from
        `features` (those of a served prediction) or computed now, scaled and expanded by the
        model's own `_scaled` and `QuadraticExpansion`; the contributions use Phi as `_score`
        does (clamped with robust features), so they sum to `raw_s`, and `model_s` is
        `_to_seconds(raw_s)`, the learned model's answer.
        """
        phi = self._pending_phi.get(request.job_id)
        if phi is None:
            x = self.features.compute(request, now_s) if features is None else np.array(features, dtype=np.float64)
            published_s = self._peek(request, x.copy())  # scales its own copy
            phi = self._expansion.expand(self._scaled(x))
        else:
            published_s = self._peek(request, self._x)  # reuses the job's Phi; x unread
        x_seen = phi[1:1 + N_FEATURES]  # the linear terms are x_j itself, as scaled
        used = np.clip(phi, -self.nag.state.s, self.nag.state.s) if self._robust else phi
        raw_s = self._score(phi)
        model_s = self._to_seconds(raw_s, request.requested_s)
        return PredictionExplanation(
            features={name: float(value) for name, value in zip(FEATURE_NAMES, x_seen)},
            term_names=_TERM_NAMES,
            contributions_s=self._expansion.contributions(used, self.nag.state.w),
            raw_s=raw_s,
            model_s=model_s,
            published_s=published_s,
            requested_s=request.requested_s,
            transform=describe_transform(raw_s, model_s, request.requested_s,
                                         abs_negative=self._abs_negative),
        )

    def raw_prediction(self, request: JobRequest) -> float:
        """f = w . Phi(x_j) before the negative rule and clipping, for a job already predicted or
        observed (with robust features, Phi clamped as for a prediction)."""
        return self._score(self._pending_phi[request.job_id])

    def _observe(
        self, request: JobRequest, now_s: int, features: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
        """Record the submission; keep Phi(x_j) for the job's learning; return (Phi, f = its
        score now, as `_score` gives it)."""
        phi = self._pending_phi[request.job_id] = np.empty(self._expansion.n_terms)
        if features is None and not self._robust:
            # Features, the submission's record, the expansion and the dot product in one
            # compiled call (docs/journal/performance-2026-11.md, "Issue 31, round 3: the feature
            # state compiled").
            return phi, self.features.job_submitted_and_scored(
                request, now_s, self.nag.weights, phi)
        if features is None:
            x = self.features.job_submitted(request, now_s, self._x)
        else:
            self.features.record_submission(request)
            x = self._x
            x[:] = features
        if self._robust:
            self._expansion.expand(self._scaled(x), phi)
            return phi, self._score(phi)
        # Expansion and dot product in one compiled call
        # (docs/journal/performance-2026-11.md, "Issue 13, item 5").
        return phi, expand_and_score(x, self.nag.weights, phi)

    def _scaled(self, x: np.ndarray) -> np.ndarray:
        """x as the model sees it: with robust features the break time is log(1 + seconds)."""
        if self._robust:
            x[BREAK_TIME_S] = math.log1p(max(x[BREAK_TIME_S], 0.0))
        return x

    def _score(self, phi: np.ndarray) -> float:
        """f = w . Phi; with robust features, Phi clamped to the magnitudes NAG learned from."""
        w = self.nag.state.w
        if self._robust:
            s = self.nag.state.s
            return float(w.dot(np.clip(phi, -s, s, out=self._clamped)))
        return float(w.dot(phi))

    def _to_seconds(self, f: float, requested_s: int) -> int:
        return learned_seconds(f, requested_s, self._abs_negative)

    # ------------------------------------------------------------------ the compiled loops
    # Their interface (`replay_state`): NAG's table and the features' table are shared with the
    # loop, which updates them in place; NAG's t and N come back.
    compiled_kind: ClassVar[int] = LEARNED

    def why_python(self) -> str | None:
        if self._robust:
            return "robust feature scaling"
        if self.censor_at_limit:
            return "censoring at the limit"
        if self.calibration is not None:
            return "calibration"
        if self._pending_phi or self.features.has_running_jobs():
            return "jobs pending or running from before (the loops start from none)"
        return None

    def to_arrays(self, jobs: ReplayJobs) -> PredictorArrays:
        from hpcpredict.learn.feature_kernels import SLOT_COLUMNS
        from hpcpredict.replay_state import FIRST_POOL_ROWS, PredictorArrays

        features, nag = self.features, self.nag
        # Each user's row of the features, made in the order users first appear, as the Python
        # loop makes them (zeroed, as at a first submission), before the replay, so that the
        # loop never grows the table.
        keys, first_to_last, key_row = jobs.histories(self.history_by)
        rows = np.zeros(len(keys), dtype=np.int64)
        for k in first_to_last:
            rows[k] = features.row_of(int(keys[k]))
        return PredictorArrays(
            self.compiled_kind, rows[key_row], local_s=features.local_seconds(jobs.submit_s),
            nag_table=nag.table, constants=self._step_constants, factor=OUTLIER_SCALE_FACTOR,
            users=features.table, pool=np.zeros((FIRST_POOL_ROWS, nag.n_coords)),
            slots=np.zeros((FIRST_POOL_ROWS, SLOT_COLUMNS)), steps=nag.state.t,
            n_sum=np.array([nag.state.n_sum]), abs_negative=int(self._abs_negative),
            outlier_after=OUTLIER_AFTER_STEPS)

    def from_arrays(self, arrays: PredictorArrays, jobs: ReplayJobs) -> None:
        self.nag.state.t = arrays.steps
        self.nag.state.n_sum = float(arrays.n_sum[0])

    # ------------------------------------------------------------------ hyperparameters
    def hyperparameters(self) -> dict[str, Any]:
        """The constructor arguments, verbatim."""
        return {
            "loss": self.loss,
            "eta": self.eta,
            "l2": self.l2,
            "negative": self.negative,
            "loss_unit_s": self.loss_unit_s,
            "context": self.context,
            "learn_unseen": self.learn_unseen,
            "censor_at_limit": self.censor_at_limit,
            "feature_scaling": self.feature_scaling,
            "calibration_alpha": self.calibration_alpha,
            "history_by": self.history_by,
        }

    def clone(self) -> LearnedPredictor:
        """A fresh, untrained predictor with the same hyperparameters."""
        return LearnedPredictor(**self.hyperparameters())

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, np.ndarray]:
        """Model, per-user feature state and pending jobs, as flat numpy arrays (npz-ready).

        With `load_state_dict` on a predictor of the same hyperparameters, everything after the
        restore (predictions, learning) is bit-for-bit what it would have been without it.
        """
        state: dict[str, np.ndarray] = {
            "version": np.array(_STATE_VERSION, dtype=np.int64),
            "hyper/loss": np.array(self._loss.name),
            "hyper/weight_floor": np.array(self._loss.weight_floor),
            "hyper/eta": np.array(self.eta, dtype=np.float64),
            "hyper/l2": np.array(self.l2, dtype=np.float64),
            "hyper/negative": np.array(self.negative),
            "hyper/loss_unit_s": np.array(float(self.loss_unit_s), dtype=np.float64),
            "hyper/learn_unseen": np.array(self.learn_unseen),
            "hyper/censor_at_limit": np.array(self.censor_at_limit),
            "hyper/feature_scaling": np.array(self.feature_scaling),
            "hyper/history_by": np.array(self.history_by),
        }
        if self.calibration_alpha is not None:  # absent: off (as in checkpoints made before it)
            state["hyper/calibration_alpha"] = np.array(self.calibration_alpha, dtype=np.float64)
        for key, value in self.nag.state.to_state().items():
            state[f"nag/{key}"] = value
        for key, value in self.features.to_state().items():
            state[f"features/{key}"] = value
        # By job id, not in arrival order: equal learners give equal states even when one of
        # them put a job's features back after a failed event (`savepoint`).
        job_ids = sorted(self._pending_phi)
        state["pending/job_id"] = np.array(job_ids, dtype=np.int64)
        state["pending/phi"] = (
            np.stack([self._pending_phi[j] for j in job_ids])
            if job_ids
            else np.empty((0, self._expansion.n_terms))
        )
        if self.calibration is not None:
            calibrated = list(self._pending_calibrated)
            state["calibration/pending_job_id"] = np.array(calibrated, dtype=np.int64)
            state["calibration/pending_s"] = np.array(
                [self._pending_calibrated[j] for j in calibrated], dtype=np.int64).reshape(-1, 2)
            for key, value in self.calibration.to_state().items():
                state[f"calibration/{key}"] = value
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore `state_dict()`; refuses a checkpoint made with other hyperparameters."""
        if int(state["version"]) != _STATE_VERSION:
            raise HyperparameterMismatchError(f"unsupported learner state version {int(state['version'])}")
        if bool(state.get("hyper/per_user_experts", False)):
            raise HyperparameterMismatchError(
                "checkpoint made with per-user experts, an option retired after it was measured "
                "(docs/results.md, \"Retired options\"): this learner cannot continue it")
        saved_context = FeatureContext(
            int(state["features/unix_start_s"]), str(state["features/time_zone"]) or None
        )
        saved = {
            "loss": str(state["hyper/loss"]),
            "weight_floor": float(state["hyper/weight_floor"]),
            "eta": float(state["hyper/eta"]),
            "l2": float(state["hyper/l2"]),
            "negative": str(state["hyper/negative"]),
            "loss_unit_s": float(state["hyper/loss_unit_s"]),
            "learn_unseen": bool(state["hyper/learn_unseen"]),
            "context": saved_context,
            # absent from checkpoints made before these options existed: their defaults then
            "censor_at_limit": bool(state.get("hyper/censor_at_limit", False)),
            "feature_scaling": str(state.get("hyper/feature_scaling", "raw")),
            "calibration_alpha": _alpha_from_state(state),
            "history_by": str(state.get("hyper/history_by", LearnerSettings.history_by)),
        }
        mine = {
            "loss": self._loss.name,
            "weight_floor": self._loss.weight_floor,
            "eta": float(self.eta),
            "l2": float(self.l2),
            "negative": self.negative,
            "loss_unit_s": float(self.loss_unit_s),
            "learn_unseen": self.learn_unseen,
            "context": self.features.context,
            "censor_at_limit": self.censor_at_limit,
            "feature_scaling": self.feature_scaling,
            "calibration_alpha": self.calibration_alpha,
            "history_by": self.history_by,
        }
        different = sorted(key for key in mine if mine[key] != saved[key])
        if different:
            detail = ", ".join(f"{k}: saved {saved[k]!r}, this {mine[k]!r}" for k in different)
            raise HyperparameterMismatchError(f"checkpoint made with other hyperparameters ({detail})")
        self.nag.state = NagState.from_state(
            {key[4:]: value for key, value in state.items() if key.startswith("nag/")}
        )
        self.features = FeatureState.from_state(
            {key[9:]: value for key, value in state.items() if key.startswith("features/")}, self.history_by
        )
        phis = np.array(state["pending/phi"], dtype=np.float64)
        job_ids = state["pending/job_id"].tolist()
        self._pending_phi = {job_id: phis[row].copy() for row, job_id in enumerate(job_ids)}
        if self.calibration is not None:
            self._pending_calibrated = {
                job_id: (model_s, published_s) for job_id, (model_s, published_s) in zip(
                    state["calibration/pending_job_id"].tolist(), state["calibration/pending_s"].tolist())
            }
            self.calibration.load_state({key[12:]: value for key, value in state.items()
                                         if key.startswith("calibration/")})

    def save(self, path: str | os.PathLike[str]) -> None:
        """Checkpoint to an .npz file atomically (temporary file, then os.replace)."""
        save_npz_atomic(path, self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LearnedPredictor:
        """A predictor rebuilt from a checkpoint, hyperparameters included."""
        with np.load(path, allow_pickle=False) as data:
            state = dict(data)
        return cls.from_state(state)

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> LearnedPredictor:
        """A predictor rebuilt from a `state_dict()`, hyperparameters included (a read-only view
        of a store needs no configuration to restore its model)."""
        loss = parse_loss(str(state["hyper/loss"]))
        loss = AsymmetricLoss(
            loss.over, loss.under, loss.weight, float(state["hyper/weight_floor"])
        )
        time_zone = str(state["features/time_zone"]) or None
        unix_start_s = int(state["features/unix_start_s"])
        context = (
            None
            if unix_start_s == 0 and time_zone is None
            else FeatureContext(unix_start_s, time_zone)
        )
        predictor = cls(
            loss,
            eta=float(state["hyper/eta"]),
            l2=float(state["hyper/l2"]),
            negative=str(state["hyper/negative"]),  # type: ignore[arg-type]
            loss_unit_s=float(state["hyper/loss_unit_s"]),
            context=context,
            learn_unseen=bool(state["hyper/learn_unseen"]),
            censor_at_limit=bool(state.get("hyper/censor_at_limit", False)),
            feature_scaling=str(state.get("hyper/feature_scaling", "raw")),  # type: ignore[arg-type]
            calibration_alpha=_alpha_from_state(state),
            history_by=str(state.get("hyper/history_by", LearnerSettings.history_by)),
        )
        predictor.load_state_dict(state)
        return predictor


def _put_back(mapping: dict[Any, Any], key: Any, saved: Any) -> None:
    """`mapping[key]` as saved (None: it had no entry)."""
    if saved is None:
        mapping.pop(key, None)
    else:
        mapping[key] = saved


def _alpha_from_state(state: dict[str, np.ndarray]) -> float | None:
    """The calibration target a checkpoint was made with; None (off) when absent."""
    value = state.get("hyper/calibration_alpha")
    return None if value is None else float(value)
