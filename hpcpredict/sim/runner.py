"""One simulation named by strings: what the CLI, the benchmarks and the campaigns all call.

A `RunSpec` says which scheduler, predictor, correction and learning constants to use, in the
words a user types (``easy-sjbf``, ``learned``, ``incremental``, ``eloss``); `run` builds the
objects for one workload and replays it. Keeping this in one place means a campaign cell and a
``hpcpredict simulate`` invocation with the same words are the same simulation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from hpcpredict.corrections import CORRECTION_NAMES, make_correction
from hpcpredict.corrections.survival import DEFAULT_SURVIVAL_QUANTILE
from hpcpredict.learn.defaults import (
    DEFAULT_CALIBRATION_ALPHA,
    DEFAULT_CENSOR_AT_LIMIT,
    DEFAULT_ETA,
    DEFAULT_FEATURE_SCALING,
    DEFAULT_L2,
    DEFAULT_LOSS_UNIT_S,
    DEFAULT_NEGATIVE,
    FEATURE_SCALINGS,
    NegativeRule,
)
from hpcpredict.learn.losses import parse_loss
from hpcpredict.corrections.starvation import STARVATION_RULES, is_expansion_factor
from hpcpredict.sim.backfill_orders import BACKFILL_ORDERS
from hpcpredict.sim.replica_stats import PairedDifference, mean_ci, paired_difference
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S, replica
from hpcpredict.sim.slurm_params import NAME as SLURM_BACKFILL
from hpcpredict.sim.slurm_params import SlurmParams
from hpcpredict.workload import Workload

if TYPE_CHECKING:  # the simulator and the learner load when a run starts, not with the names
    from hpcpredict.features import FeatureContext
    from hpcpredict.predictors import Predictor
    from hpcpredict.sim.metrics import Metrics
    from hpcpredict.sim.simulation import ProgressCallback, SimulationResult

# The version of what a run computes from its settings. Campaign and `hpcpredict tune` stores
# keep each finished run under a key of its log and settings (campaign.Cell.key), and a store
# outlives the code that filled it: a change to the simulator, the learner or the metrics that
# changes any run's result must bump this number, which is part of every key from version 2 on,
# so a store filled by earlier code is not read as this code's results (its runs are run again).
# tests/test_semantics_version.py pins one schedule per simulator option on the bundled sample
# log and fails, naming this constant, until it is bumped. Version 1 is the code of 2026-11-28,
# whose keys are those written before the version existed: stores made since then stay valid.
SEMANTICS_VERSION = 1

PREDICTORS: tuple[str, ...] = ("requested", "clairvoyant", "ave2", "learned")
# Every scheduler a user can name: the EASY family (schedulers.py) and the SLURM-like model
# (slurm_backfill.py), which has its own event loop (periodic passes) and settings.
SCHEDULER_NAMES: tuple[str, ...] = (*BACKFILL_ORDERS, SLURM_BACKFILL)


@dataclass(frozen=True)
class RunSpec:
    """A simulation's configuration, in user words; validated on construction."""

    scheduler: str = "easy-sjbf"
    predictor: str = "learned"
    correction: str = "incremental"
    loss: str = "eloss"
    eta: float = DEFAULT_ETA
    l2: float = DEFAULT_L2
    decide_on_correction: bool = False
    negative: NegativeRule = DEFAULT_NEGATIVE
    loss_unit_s: float = DEFAULT_LOSS_UNIT_S
    starvation_guard_s: int | None = None  # None: off (schedulers.Scheduler says what it does)
    # When the guard falls due for a head: "wait" (after starvation_guard_s), "promise" (once
    # later than plain EASY's promise when it became the head, or after starvation_guard_s) or
    # "xfactor" (the setting below; corrections.starvation).
    guard_rule: str = "wait"
    # The "xfactor" rule's expansion factor by request, > 1: a job is protected once it has waited
    # guard_xfactor - 1 times its request (corrections.starvation.xfactor_guard_wait_s); that
    # rule's setting, required by it.
    guard_xfactor: float | None = None
    # The guard's slack stage (schedulers.Scheduler.guard_estimate_slack_s; the daemon's
    # starvation_guard_slack): from guard_estimate_after_s of waiting until the guard is due,
    # candidates in front of the head are judged on their request less this slack, never below
    # their prediction; None: no such stage.
    guard_estimate_after_s: int | None = None
    guard_estimate_slack_s: int | None = None
    censor_at_limit: bool = DEFAULT_CENSOR_AT_LIMIT  # learn jobs killed at their limit as bounds
    feature_scaling: str = DEFAULT_FEATURE_SCALING  # "robust": log break time, no extrapolation
    # slurm-backfill's slurm.conf settings that differ from Slurm 22.05's defaults, in
    # SlurmParams.parse's syntax ("bf_interval=10,bf_window=2880"); "" for the defaults.
    slurm_params: str = ""
    # With correction "survival": the quantile of the user's runtime given the elapsed time.
    survival_quantile: float = DEFAULT_SURVIVAL_QUANTILE
    # Calibrated confidence: publish the model's answer scaled to this under-prediction rate.
    calibration_alpha: float | None = DEFAULT_CALIBRATION_ALPHA

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULER_NAMES:
            raise ValueError(
                f"unknown scheduler {self.scheduler!r}; one of {', '.join(SCHEDULER_NAMES)}"
            )
        if self.scheduler == SLURM_BACKFILL:
            if self.decide_on_correction:
                raise ValueError(f"{SLURM_BACKFILL} re-plans at its next pass after a correction "
                                 "(bf_interval); deciding on corrections is an EASY option")
            # canonical form, so that one configuration has one campaign key however it is spelt
            object.__setattr__(self, "slurm_params", SlurmParams.parse(self.slurm_params).to_text())
        elif self.slurm_params:
            raise ValueError(f"SLURM settings apply to {SLURM_BACKFILL} only, not {self.scheduler}")
        if self.predictor not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.predictor!r}; one of {', '.join(PREDICTORS)}")
        if self.correction not in CORRECTION_NAMES:
            raise ValueError(
                f"unknown correction {self.correction!r}; one of {', '.join(CORRECTION_NAMES)}"
            )
        if isinstance(self.survival_quantile, bool) or not isinstance(self.survival_quantile, (int, float)) \
                or not 0.0 < self.survival_quantile < 1.0:
            raise ValueError(f"the survival quantile must be in (0, 1), got {self.survival_quantile!r}")
        parse_loss(self.loss)  # raises a ValueError that lists the valid forms
        if not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        if not self.l2 >= 0:
            raise ValueError(f"lambda (l2) must be >= 0, got {self.l2}")
        if self.negative not in ("clip", "abs"):
            raise ValueError(f"negative must be 'clip' or 'abs', got {self.negative!r}")
        if not self.loss_unit_s > 0:
            raise ValueError(f"the loss unit must be > 0 seconds, got {self.loss_unit_s}")
        if not isinstance(self.censor_at_limit, bool):
            raise ValueError(f"censor_at_limit must be true or false, got {self.censor_at_limit!r}")
        if self.feature_scaling not in FEATURE_SCALINGS:
            raise ValueError(
                f"feature scaling must be one of {', '.join(FEATURE_SCALINGS)}, got "
                f"{self.feature_scaling!r}"
            )
        if self.calibration_alpha is not None and (
                isinstance(self.calibration_alpha, bool)
                or not isinstance(self.calibration_alpha, (int, float))
                or not 0.0 < self.calibration_alpha < 1.0):
            raise ValueError(
                f"the calibration target must be in (0, 1), got {self.calibration_alpha!r}")
        if self.starvation_guard_s is not None:
            if isinstance(self.starvation_guard_s, bool) or not isinstance(self.starvation_guard_s, int) \
                    or self.starvation_guard_s < 0:
                raise ValueError(
                    f"the starvation guard must be a whole number of seconds >= 0, got "
                    f"{self.starvation_guard_s!r}"
                )
            if self.scheduler != SLURM_BACKFILL and BACKFILL_ORDERS[self.scheduler] is None:
                raise ValueError(f"the starvation guard needs a backfilling scheduler, not {self.scheduler}")
        # The guard's rule: a value other than the default needs a guard (and under the SLURM
        # model, which has the daemon's rules only, "xfactor").
        if self.guard_rule not in STARVATION_RULES:
            raise ValueError(f"unknown guard rule {self.guard_rule!r}; one of {', '.join(STARVATION_RULES)}")
        if self.guard_rule != STARVATION_RULES[0]:
            if self.starvation_guard_s is None:
                raise ValueError(f"the guard rule {self.guard_rule!r} needs a starvation guard")
            if self.scheduler == SLURM_BACKFILL and self.guard_rule != "xfactor":  # the daemon's
                raise ValueError(f"the guard rule {self.guard_rule!r} is modelled for the EASY "
                                 f"schedulers only, not {SLURM_BACKFILL}")
        if self.guard_rule == "xfactor":
            if not is_expansion_factor(self.guard_xfactor):
                raise ValueError(f"the xfactor rule's expansion factor must be a finite number > 1, got "
                                 f"{self.guard_xfactor!r}")
        elif self.guard_xfactor is not None:
            raise ValueError("guard_xfactor is the \"xfactor\" guard rule's setting; "
                             f"the rule is {self.guard_rule!r}")
        if self.guard_estimate_slack_s is not None:
            if isinstance(self.guard_estimate_slack_s, bool) \
                    or not isinstance(self.guard_estimate_slack_s, int) or self.guard_estimate_slack_s < 1:
                raise ValueError(f"the guard's estimate slack must be a whole number of seconds >= 1, "
                                 f"got {self.guard_estimate_slack_s!r}")
            if self.starvation_guard_s is None:
                raise ValueError("the guard's slack stage needs a starvation guard")
            if isinstance(self.guard_estimate_after_s, bool) \
                    or not isinstance(self.guard_estimate_after_s, int) \
                    or not 0 <= self.guard_estimate_after_s <= self.starvation_guard_s:
                raise ValueError(f"the guard's slack stage starts after a whole number of "
                                 f"seconds within the guard's, got {self.guard_estimate_after_s!r}")
        elif self.guard_estimate_after_s is not None:
            raise ValueError("guard_estimate_after_s needs guard_estimate_slack_s")

    @property
    def label(self) -> str:
        """Short human name, e.g. ``easy-sjbf + learned(eloss) + incremental``."""
        predictor = self.predictor
        if predictor == "learned":
            predictor = f"learned({self.loss}){self.learning_label}"
        scheduler = self.scheduler
        if self.slurm_params:
            scheduler = f"{scheduler}({self.slurm_params})"
        return f"{scheduler} + {predictor} + {self.correction_label}{self.guard_label}"

    @property
    def correction_label(self) -> str:
        """``incremental``, or ``survival(q=0.5)`` with the quantile that matters."""
        if self.correction == "survival":
            return f"survival(q={self.survival_quantile:g})"
        return self.correction

    @property
    def learning_label(self) -> str:
        """``, censored, robust features`` for the learner's options that are on, else empty."""
        if self.predictor != "learned":
            return ""
        return (
            (", censored" if self.censor_at_limit else "")
            + (", robust features" if self.feature_scaling != DEFAULT_FEATURE_SCALING else "")
            + (f", calibrated alpha={self.calibration_alpha:g}"
               if self.calibration_alpha is not None else "")
        )

    @property
    def guard_label(self) -> str:
        """`` + guard 24 h`` when the starvation guard is on, else empty."""
        if self.starvation_guard_s is None:
            return ""
        rule = "" if self.guard_rule == "wait" else f"{self.guard_rule} or "
        if self.guard_rule == "xfactor":
            rule = f"xfactor {self.guard_xfactor:g} or "
        estimate = ""
        if self.guard_estimate_slack_s is not None:
            estimate = (f", request - {self.guard_estimate_slack_s / 3600:g} h in front after "
                        f"{(self.guard_estimate_after_s or 0) / 3600:g} h")
        return f" + guard {rule}{self.starvation_guard_s / 3600:g} h{estimate}"

    @property
    def published_name(self) -> str | None:
        """The literature's name of this configuration (docs/reproduction.md), e.g. ``EASY++``,
        or ``EASY++ (guard 24 h)`` for its bounded variant; None if it has none. A published
        name without a guard is the unbounded scheduler, as published."""
        name = PUBLISHED_NAMES.get((self.scheduler, self.predictor, self.correction))
        if name is None or self.decide_on_correction:
            return None
        if self.starvation_guard_s is None:
            return name
        return f"{name} ({self.guard_label.removeprefix(' + ')})"

    def to_dict(self) -> dict[str, object]:
        settings = asdict(self)
        if self.starvation_guard_s is None:  # off: absent, so older campaign keys stay valid
            settings.pop("starvation_guard_s")
        if self.guard_rule == "wait":  # the rule every earlier guard had: absent, keys stay valid
            settings.pop("guard_rule")
        if self.guard_xfactor is None:  # that rule's setting alone: other keys stay valid
            settings.pop("guard_xfactor")
        else:
            settings["guard_xfactor"] = float(self.guard_xfactor)
        if self.guard_estimate_slack_s is None:  # off: absent, keys stay valid
            settings.pop("guard_estimate_slack_s")
            settings.pop("guard_estimate_after_s")
        if not self.slurm_params:  # defaults or another scheduler: absent, older keys stay valid
            settings.pop("slurm_params")
        # The same for the learner's options added later: absent while at their default.
        if self.censor_at_limit == DEFAULT_CENSOR_AT_LIMIT:
            settings.pop("censor_at_limit")
        if self.feature_scaling == DEFAULT_FEATURE_SCALING:
            settings.pop("feature_scaling")
        if self.calibration_alpha is None:
            settings.pop("calibration_alpha")
        else:
            settings["calibration_alpha"] = float(self.calibration_alpha)
        if self.correction != "survival":  # the quantile means nothing to the other policies
            settings.pop("survival_quantile")
        else:
            settings["survival_quantile"] = float(self.survival_quantile)
        if self.predictor != "learned":  # learning constants mean nothing for the others
            for key in ("loss", "eta", "l2", "negative", "loss_unit_s", "censor_at_limit",
                        "feature_scaling", "calibration_alpha"):
                settings.pop(key, None)
        return settings


# (scheduler, predictor, correction) -> the name the literature gives it (Gaussier et al., SC 2015;
# docs/reproduction.md reproduces each one's published AVEbsld, unbounded).
PUBLISHED_NAMES: dict[tuple[str, str, str], str] = {
    ("easy", "requested", "requested"): "EASY",
    ("easy-sjbf", "requested", "requested"): "EASY-SJBF",
    ("easy-sjbf", "ave2", "incremental"): "EASY++",
    ("easy", "clairvoyant", "requested"): "clairvoyant EASY",
    ("easy-sjbf", "clairvoyant", "requested"): "clairvoyant EASY-SJBF",
}


def feature_context(workload: Workload) -> FeatureContext:
    """The log's clock (UnixStartTime, TimeZoneString) for the time-of-day features."""
    from hpcpredict.features import FeatureContext

    header = workload.header
    return FeatureContext(header.unix_start_time or 0, header.time_zone_string)


def build_predictor(spec: RunSpec, workload: Workload) -> Predictor:
    from hpcpredict.learn.predictor import LearnedPredictor
    from hpcpredict.predictors import Ave2Predictor, ClairvoyantPredictor, RequestedPredictor

    if spec.predictor == "requested":
        return RequestedPredictor()
    if spec.predictor == "clairvoyant":
        return ClairvoyantPredictor({job.job_id: job.run_s for job in workload.jobs})
    if spec.predictor == "ave2":
        return Ave2Predictor()
    return LearnedPredictor(
        spec.loss,
        eta=spec.eta,
        l2=spec.l2,
        negative=spec.negative,
        loss_unit_s=spec.loss_unit_s,
        context=feature_context(workload),
        censor_at_limit=spec.censor_at_limit,
        feature_scaling=spec.feature_scaling,  # type: ignore[arg-type]
        calibration_alpha=spec.calibration_alpha,
    )


def run(
    workload: Workload, spec: RunSpec, *, progress: ProgressCallback | None = None
) -> SimulationResult:
    """Replay `workload` under `spec`; the result's settings record the spec and the log."""
    from hpcpredict.sim.schedulers import SCHEDULERS
    from hpcpredict.sim.simulation import simulate
    from hpcpredict.sim.slurm_backfill import SlurmBackfill, simulate_slurm

    if spec.scheduler == SLURM_BACKFILL:
        result = simulate_slurm(
            workload.jobs,
            workload.machine_procs,
            SlurmBackfill(SlurmParams.parse(spec.slurm_params),
                          starvation_guard_s=spec.starvation_guard_s,
                          guard_xfactor=None if spec.guard_xfactor is None else float(spec.guard_xfactor),
                          guard_slack_s=spec.guard_estimate_slack_s,
                          guard_slack_after_s=spec.guard_estimate_after_s),
            build_predictor(spec, workload),
            make_correction(spec.correction, survival_quantile=spec.survival_quantile),
            progress=progress,
        )
        result.settings.update(spec.to_dict())
        result.settings["log"] = workload.path
        return result
    scheduler = SCHEDULERS[spec.scheduler]
    if spec.starvation_guard_s is not None:
        scheduler = dataclasses.replace(scheduler, starvation_guard_s=spec.starvation_guard_s,
                                        guard_rule=spec.guard_rule,
                                        guard_xfactor=(None if spec.guard_xfactor is None
                                                       else float(spec.guard_xfactor)),
                                        guard_estimate_after_s=spec.guard_estimate_after_s,
                                        guard_estimate_slack_s=spec.guard_estimate_slack_s)
    result = simulate(
        workload.jobs,
        workload.machine_procs,
        scheduler,
        build_predictor(spec, workload),
        make_correction(spec.correction, survival_quantile=spec.survival_quantile),
        decide_on_correction=spec.decide_on_correction,
        progress=progress,
    )
    result.settings.update(spec.to_dict())
    result.settings["log"] = workload.path
    return result


@dataclass
class ReplicatedRuns:
    """Several configurations, each replayed on the same shaken replicas of one log."""

    specs: list[RunSpec]
    shake_s: int
    seed: int
    metrics: list[list[Metrics]] = field(default_factory=list)  # [configuration][replica]
    wall_time_s: list[list[float]] = field(default_factory=list)
    unshaken: list[SimulationResult] = field(default_factory=list)  # replica 0, per configuration

    @property
    def replicas(self) -> int:
        return len(self.metrics[0]) if self.metrics else 0

    def values(self, configuration: int, metric: str) -> list[float]:
        """One metric of one configuration, replica by replica."""
        return [float(getattr(m, metric)) for m in self.metrics[configuration]]

    def compare(self, configuration: int, baseline: int) -> dict[str, PairedDifference]:
        """Paired differences of the compared metrics (COMPARED_METRICS), replica by replica."""
        return {
            metric: paired_difference(self.values(configuration, metric),
                                      self.values(baseline, metric))
            for metric in COMPARED_METRICS
        }

    def to_dict(self, configuration: int) -> dict[str, object]:
        """One configuration as JSON-ready data: replica 0's metrics (a plain replay's), and with
        several replicas every replica's metrics and the summary of SUMMARISED_METRICS."""
        data: dict[str, object] = {
            "label": self.specs[configuration].label,
            "published_name": self.specs[configuration].published_name,
            "settings": self.specs[configuration].to_dict(),
            "metrics": self.metrics[configuration][0].to_dict(),
            "wall_time_s": round(self.wall_time_s[configuration][0], 3),
        }
        if self.unshaken:  # which event loop replayed it (`SimulationResult.loop`)
            data["loop"] = self.unshaken[configuration].loop
        if self.replicas > 1:
            data["replicas"] = [m.to_dict() for m in self.metrics[configuration]]
            data["replica_wall_time_s"] = [round(t, 3) for t in self.wall_time_s[configuration]]
            data["summary"] = {
                metric: mean_ci(self.values(configuration, metric)).to_dict()
                for metric in SUMMARISED_METRICS
            }
        return data


# Lower is better for each; compared pairwise against a baseline, with their names in verdicts.
COMPARED_METRICS: dict[str, str] = {
    "ave_bsld": "AVEbsld", "p99_wait_s": "p99 wait", "max_wait_s": "max wait",
}
SUMMARISED_METRICS: tuple[str, ...] = (
    "ave_bsld", "p99_bsld", "mean_wait_s", "p99_wait_s", "max_wait_s", "worst_user_mean_bsld",
    "under_prediction_rate", "corrections_per_job",
)


RunProgress = Callable[[int], None]  # absolute number of job-runs done over all the runs


def run_replicated(
    workload: Workload,
    specs: Sequence[RunSpec],
    *,
    replicas: int = 1,
    shake_s: int = DEFAULT_SHAKE_S,
    seed: int = DEFAULT_SEED,
    progress: RunProgress | None = None,
    jobs: int = 1,
) -> ReplicatedRuns:
    """Replay every spec on replicas 0..replicas-1 of `workload` (the same logs for all specs).

    Only the metrics of each run are kept, plus the whole result of replica 0 (the log as it is)
    for per-job output. With `jobs` > 1 the runs go to that many forked worker processes, which
    share the workload already loaded here (`_ReplicaTasks`); the results are the same.
    """
    if replicas < 1:
        raise ValueError(f"at least one replica is needed, got {replicas}")
    runs = ReplicatedRuns(list(specs), shake_s, seed)
    runs.metrics = [[] for _ in specs]
    runs.wall_time_s = [[] for _ in specs]
    tasks = _ReplicaTasks(workload, list(specs), replicas, shake_s, seed)
    in_processes = jobs > 1 and len(tasks.groups) > 1
    outcomes = tasks.run_in_processes(jobs, progress) if in_processes else tasks.run_here(progress)
    for index in range(replicas):
        for position in range(len(specs)):
            metrics, wall_time_s, result = outcomes[(index, position)]
            runs.metrics[position].append(metrics)
            runs.wall_time_s[position].append(wall_time_s)
            if index == 0:
                runs.unshaken.append(dataclasses.replace(result, jobs=workload.jobs))
    return runs


RunOutcome = tuple["Metrics", float, "SimulationResult | None"]  # the result for replica 0 only


@dataclass
class _ReplicaTasks:
    """The runs of `run_replicated`, in groups that one process does in a row: each shaken
    replica is one group (it is shaken once for all specs), and replica 0, which needs no
    shaking, is one group per spec (so that a run and its baseline go to two cores)."""

    workload: Workload
    specs: list[RunSpec]
    replicas: int
    shake_s: int
    seed: int
    groups: list[tuple[int, tuple[int, ...]]] = field(init=False)  # (replica, spec positions)

    def __post_init__(self) -> None:
        every = tuple(range(len(self.specs)))
        self.groups = [(0, (position,)) for position in every]
        self.groups += [(index, every) for index in range(1, self.replicas)]

    def run_group(
        self, group: int, progress: RunProgress | None = None, done: int = 0
    ) -> dict[tuple[int, int], RunOutcome]:
        """The runs of one group; `progress` gets `done` plus the job-runs of this group so far."""
        from hpcpredict.sim.metrics import compute_metrics

        index, positions = self.groups[group]
        shaken = replica(self.workload, index, shake_s=self.shake_s, seed=self.seed)
        outcomes: dict[tuple[int, int], RunOutcome] = {}
        for position in positions:
            offset = done
            result = run(shaken, self.specs[position],
                         progress=None if progress is None else lambda n: progress(offset + n))
            # Replica 0's whole result is kept, without its jobs (the caller has them).
            kept = dataclasses.replace(result, jobs=()) if index == 0 else None
            outcomes[(index, position)] = (compute_metrics(result), result.wall_time_s, kept)
            done += len(shaken.jobs)
        return outcomes

    def group_jobs(self, group: int) -> int:
        return len(self.workload.jobs) * len(self.groups[group][1])

    def run_here(self, progress: RunProgress | None) -> dict[tuple[int, int], RunOutcome]:
        outcomes: dict[tuple[int, int], RunOutcome] = {}
        done = 0
        for group in range(len(self.groups)):
            outcomes.update(self.run_group(group, progress, done))
            done += self.group_jobs(group)
        return outcomes

    def run_in_processes(
        self, jobs: int, progress: RunProgress | None
    ) -> dict[tuple[int, int], RunOutcome]:
        """The groups on `jobs` forked processes (progress by whole groups). Forked, so that
        each worker has the workload without reading or pickling it again."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if "fork" not in multiprocessing.get_all_start_methods():  # not on this platform
            return self.run_here(progress)
        outcomes: dict[tuple[int, int], RunOutcome] = {}
        done = 0
        context = multiprocessing.get_context("fork")
        workers = min(jobs, len(self.groups))
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_adopt_tasks,
                                 initargs=(self,)) as pool:
            futures = {pool.submit(_run_adopted_group, group): group for group in range(len(self.groups))}
            for future in as_completed(futures):
                outcomes.update(future.result())
                done += self.group_jobs(futures[future])
                if progress is not None:
                    progress(done)
        return outcomes


# A worker process's tasks: set once by the pool's initializer, in the forked child only (the
# parent never reads it), so that each task is sent as a number, not with the workload.
_ADOPTED: list[_ReplicaTasks] = []


def _adopt_tasks(tasks: _ReplicaTasks) -> None:
    _ADOPTED[:] = [tasks]


def _run_adopted_group(group: int) -> dict[tuple[int, int], RunOutcome]:
    return _ADOPTED[0].run_group(group)
