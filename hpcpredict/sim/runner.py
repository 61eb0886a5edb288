"""One simulation named by strings: what the CLI, the benchmarks and the campaigns all call.

A `RunSpec` says which scheduler, predictor, correction and learning constants to use, in the
words a user types (``easy-sjbf``, ``learned``, ``incremental``, ``eloss``); `run` builds the
objects for one workload and replays it. Keeping this in one place means a campaign cell and a
``hpcpredict simulate`` invocation with the same words are the same simulation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcpredict.features import FeatureContext
from hpcpredict.learn import LearnedPredictor, parse_loss
from hpcpredict.learn.predictor import (
    DEFAULT_ETA,
    DEFAULT_L2,
    DEFAULT_LOSS_UNIT_S,
    DEFAULT_NEGATIVE,
    NegativeRule,
)
from hpcpredict.predictors import (
    Ave2Predictor,
    ClairvoyantPredictor,
    Predictor,
    RequestedPredictor,
)
from hpcpredict.sim.corrections import CORRECTIONS
from hpcpredict.sim.schedulers import SCHEDULERS
from hpcpredict.sim.simulation import ProgressCallback, SimulationResult, simulate
from hpcpredict.workload import Workload

PREDICTORS: tuple[str, ...] = ("requested", "clairvoyant", "ave2", "learned")


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

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {self.scheduler!r}; one of {', '.join(SCHEDULERS)}")
        if self.predictor not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.predictor!r}; one of {', '.join(PREDICTORS)}")
        if self.correction not in CORRECTIONS:
            raise ValueError(
                f"unknown correction {self.correction!r}; one of {', '.join(CORRECTIONS)}"
            )
        parse_loss(self.loss)  # raises a ValueError that lists the valid forms
        if not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        if not self.l2 >= 0:
            raise ValueError(f"lambda (l2) must be >= 0, got {self.l2}")
        if self.negative not in ("clip", "abs"):
            raise ValueError(f"negative must be 'clip' or 'abs', got {self.negative!r}")
        if not self.loss_unit_s > 0:
            raise ValueError(f"the loss unit must be > 0 seconds, got {self.loss_unit_s}")

    @property
    def label(self) -> str:
        """Short human name, e.g. ``easy-sjbf + learned(eloss) + incremental``."""
        predictor = self.predictor
        if predictor == "learned":
            predictor = f"learned({self.loss})"
        return f"{self.scheduler} + {predictor} + {self.correction}"

    def to_dict(self) -> dict[str, object]:
        settings = asdict(self)
        if self.predictor != "learned":  # learning constants mean nothing for the others
            for key in ("loss", "eta", "l2", "negative", "loss_unit_s"):
                settings.pop(key)
        return settings


def feature_context(workload: Workload) -> FeatureContext:
    """The log's clock (UnixStartTime, TimeZoneString) for the time-of-day features."""
    header = workload.header
    return FeatureContext(header.unix_start_time or 0, header.time_zone_string)


def build_predictor(spec: RunSpec, workload: Workload) -> Predictor:
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
    )


def run(
    workload: Workload, spec: RunSpec, *, progress: ProgressCallback | None = None
) -> SimulationResult:
    """Replay `workload` under `spec`; the result's settings record the spec and the log."""
    result = simulate(
        workload.jobs,
        workload.machine_procs,
        SCHEDULERS[spec.scheduler],
        build_predictor(spec, workload),
        CORRECTIONS[spec.correction],
        decide_on_correction=spec.decide_on_correction,
        progress=progress,
    )
    result.settings.update(spec.to_dict())
    result.settings["log"] = workload.path
    return result
