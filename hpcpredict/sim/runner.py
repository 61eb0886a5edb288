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
from hpcpredict.learn.settings import LEARNER_KEYS, LearnerSettings
from hpcpredict.corrections.starvation import KEY_NAMES, GuardSettings, guard_from
from hpcpredict.sim.easy.backfill_orders import BACKFILL_ORDERS
from hpcpredict.sim.replica_stats import PairedDifference, mean_ci, paired_difference
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S, replica
from hpcpredict.sim.slurm_model.slurm_params import NAME as SLURM_BACKFILL
from hpcpredict.sim.slurm_model.slurm_params import SlurmParams
from hpcpredict.logs.workload import Workload

if TYPE_CHECKING:  # the simulator and the learner load when a run starts, not with the names
    from hpcpredict.learn.features import FeatureContext
    from hpcpredict.learn.baselines import Predictor
    from hpcpredict.sim.metrics import Metrics
    from hpcpredict.sim.easy.simulation import ProgressCallback, SimulationResult

# The version of what a run computes from its settings. Campaign and `hpcpredict tune` stores
# keep each finished run under a key of its log and settings (campaign.Cell.key), and a store
# outlives the code that filled it: a change to the simulator, the learner or the metrics that
# changes any run's result must bump this number, which is part of every key from version 2 on,
# so a store filled by earlier code is not read as this code's results (its runs are run again).
# tests/test_semantics_version.py pins one schedule per simulator option on the bundled sample
# log and fails, naming this constant, until it is bumped. Version 1 is the code of 2026-11-28,
# whose keys are those written before the version existed: stores made since then stay valid.
# Version 2 (2026-12-02): the metrics gained median_over_prediction_s (issue 54); every schedule
# is version 1's.
SEMANTICS_VERSION = 2

PREDICTORS: tuple[str, ...] = ("requested", "clairvoyant", "ave2", "learned")
_GUARD_KEYS = frozenset(KEY_NAMES.values())
# Every scheduler a user can name: the EASY family (schedulers.py) and the SLURM-like model
# (slurm_backfill.py), which has its own event loop (periodic passes) and settings.
SCHEDULER_NAMES: tuple[str, ...] = (*BACKFILL_ORDERS, SLURM_BACKFILL)


@dataclass(frozen=True)
class RunSpec:
    """A simulation's configuration, in user words; validated on construction."""

    scheduler: str = "easy-sjbf"
    predictor: str = "learned"
    correction: str = "incremental"
    # The learned predictor's settings (hpcpredict.learn.settings.LearnerSettings; meaningful
    # for predictor "learned" only). A campaign names them by their flat keys (`from_keys`).
    learner: LearnerSettings = LearnerSettings()
    decide_on_correction: bool = False
    # The starvation guard (None: off; corrections.starvation.GuardSettings says what each of
    # its settings does, schedulers.Scheduler how the EASY models apply it). A campaign names it
    # by its flat keys (starvation_guard_s, guard_rule, ...: `from_keys`, `to_dict`).
    guard: GuardSettings | None = None
    # slurm-backfill's slurm.conf settings that differ from Slurm 22.05's defaults, in
    # SlurmParams.parse's syntax ("bf_interval=10,bf_window=2880"); "" for the defaults.
    slurm_params: str = ""
    # With correction "survival": the quantile of the user's runtime given the elapsed time.
    survival_quantile: float = DEFAULT_SURVIVAL_QUANTILE

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
        if not isinstance(self.learner, LearnerSettings):
            raise ValueError(f"learner must be LearnerSettings, got {self.learner!r}")
        if self.guard is not None:
            if not isinstance(self.guard, GuardSettings):
                raise ValueError(f"guard must be GuardSettings or None, got {self.guard!r}")
            if self.scheduler != SLURM_BACKFILL and BACKFILL_ORDERS[self.scheduler] is None:
                raise ValueError(f"the starvation guard needs a backfilling scheduler, not {self.scheduler}")
            if self.scheduler == SLURM_BACKFILL and self.guard.rule == "promise":  # the daemon's rules
                raise ValueError(f"the guard rule 'promise' is modelled for the EASY schedulers only, "
                                 f"not {SLURM_BACKFILL}")

    @classmethod
    def from_keys(cls, scheduler: str = "easy-sjbf", predictor: str = "learned",
                  correction: str = "incremental", **keys: object) -> RunSpec:
        """A spec from a campaign's flat keys (``starvation_guard_s = 86400``, ``guard_rule``,
        ``guard_xfactor``, ``guard_estimate_slack_s``, ``guard_estimate_after_s``; ``loss``,
        ``eta``, ... `LearnerSettings`' names; the other fields by their names): the guard's read
        into one `GuardSettings`, its errors said in those keys, the learner's into one
        `LearnerSettings`."""
        learner = LearnerSettings(**{name: keys.pop(name) for name in list(keys) if name in LEARNER_KEYS})
        flat = {name: keys.pop(name) for name in list(keys) if name in _GUARD_KEYS}
        guard = guard_from(flat.pop(KEY_NAMES["wait_s"], None), rule=flat.pop(KEY_NAMES["rule"], "wait"),
                           **{setting: flat[name] for setting, name in KEY_NAMES.items() if name in flat})
        return cls(scheduler, predictor, correction, learner=learner, guard=guard, **keys)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        """Short human name, e.g. ``easy-sjbf + learned(eloss) + incremental``."""
        predictor = self.predictor
        if predictor == "learned":
            predictor = f"learned({self.learner.loss}){self.learning_label}"
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
        return self.learner.options_label

    @property
    def guard_label(self) -> str:
        """`` + guard 24 h`` when the starvation guard is on, else empty."""
        return "" if self.guard is None else f" + {self.guard.label}"

    @property
    def published_name(self) -> str | None:
        """The literature's name of this configuration (docs/reproduction.md), e.g. ``EASY++``,
        or ``EASY++ (guard 24 h)`` for its bounded variant; None if it has none. A published
        name without a guard is the unbounded scheduler, as published."""
        name = PUBLISHED_NAMES.get((self.scheduler, self.predictor, self.correction))
        if name is None or self.decide_on_correction:
            return None
        if self.guard is None:
            return name
        return f"{name} ({self.guard.label})"

    def to_dict(self) -> dict[str, object]:
        settings = asdict(self)
        # The guard as its flat campaign keys, each absent while at what guards had before it
        # existed (off: no key at all), so that older campaign keys stay valid.
        settings.pop("guard")
        if self.guard is not None:
            settings.update(self.guard.to_keys())
        # The learner's the same way (`LearnerSettings.to_keys`), and only for the learned
        # predictor: learning constants mean nothing for the others.
        settings.pop("learner")
        if self.predictor == "learned":
            settings.update(self.learner.to_keys())
        if not self.slurm_params:  # defaults or another scheduler: absent, older keys stay valid
            settings.pop("slurm_params")
        if self.correction != "survival":  # the quantile means nothing to the other policies
            settings.pop("survival_quantile")
        else:
            settings["survival_quantile"] = float(self.survival_quantile)
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
    from hpcpredict.learn.features import FeatureContext

    header = workload.header
    return FeatureContext(header.unix_start_time or 0, header.time_zone_string)


def build_predictor(spec: RunSpec, workload: Workload) -> Predictor:
    from hpcpredict.learn.baselines import Ave2Predictor, ClairvoyantPredictor, RequestedPredictor

    if spec.predictor == "requested":
        return RequestedPredictor()
    if spec.predictor == "clairvoyant":
        return ClairvoyantPredictor({job.job_id: job.run_s for job in workload.jobs})
    if spec.predictor == "ave2":
        return Ave2Predictor()
    from hpcpredict.learn.predictor import LearnedPredictor

    return LearnedPredictor.from_settings(spec.learner, feature_context(workload))


def run(
    workload: Workload, spec: RunSpec, *, progress: ProgressCallback | None = None
) -> SimulationResult:
    """Replay `workload` under `spec`; the result's settings record the spec and the log."""
    from hpcpredict.sim.easy.schedulers import SCHEDULERS
    from hpcpredict.sim.easy.simulation import simulate
    from hpcpredict.sim.slurm_model.slurm_backfill import SlurmBackfill, simulate_slurm

    if spec.scheduler == SLURM_BACKFILL:
        result = simulate_slurm(
            workload.jobs,
            workload.machine_procs,
            SlurmBackfill(SlurmParams.parse(spec.slurm_params),
                          guard=spec.guard),
            build_predictor(spec, workload),
            make_correction(spec.correction, survival_quantile=spec.survival_quantile),
            progress=progress,
        )
        result.settings.update(spec.to_dict())
        result.settings["log"] = workload.path
        return result
    scheduler = SCHEDULERS[spec.scheduler]
    if spec.guard is not None:
        scheduler = dataclasses.replace(scheduler, guard=spec.guard)
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
        if self.unshaken:  # which event loop replayed it, and why (`SimulationResult.loop`)
            data["loop"] = self.unshaken[configuration].loop
            data["loop_reason"] = self.unshaken[configuration].loop_reason
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
    "under_prediction_rate", "median_over_prediction_s", "corrections_per_job",
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
