"""The offline scheduling simulator: replay an SWF log under a scheduler, predictor, correction."""

from hpcpredict.sim.metrics import Metrics, compute_metrics
from hpcpredict.sim.schedulers import SCHEDULERS
from hpcpredict.sim.simulation import SimulationResult, simulate

__all__ = ["SCHEDULERS", "Metrics", "SimulationResult", "compute_metrics", "simulate"]
