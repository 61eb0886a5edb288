"""The offline scheduling simulator: replay an SWF log under a scheduler, predictor, correction.

`engine` holds what both models plan with, `easy` the EASY engine, `slurm_model` the SLURM model;
the modules here are the run layer above them: a run named by strings (`runner`), its metrics,
shaken replicas and their statistics, the analysis of its predictions.

The names below are loaded from their modules on first use (PEP 562): importing a light
submodule (`runner`'s `RunSpec`, `slurm_params`, `shaking`) does not compile the backfilling
kernel, so the command line builds its options quickly (start-up in docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcpredict.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from hpcpredict.sim.metrics import Metrics, compute_metrics
    from hpcpredict.sim.easy.schedulers import SCHEDULERS
    from hpcpredict.sim.easy.simulation import SimulationResult, simulate

_SOURCES = {
    "hpcpredict.sim.metrics": ("Metrics", "compute_metrics"),
    "hpcpredict.sim.easy.schedulers": ("SCHEDULERS",),
    "hpcpredict.sim.easy.simulation": ("SimulationResult", "simulate"),
}
__getattr__, __dir__, __all__ = lazy_exports(__name__, _SOURCES)
