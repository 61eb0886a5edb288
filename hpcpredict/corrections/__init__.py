"""What happens to a running job's planned end: shared by the simulator and the live SLURM path.

The simulator (`hpcpredict.sim`), the daemon's service and the SLURM corrector (`hpcpredict.slurm`)
all import from here and none of them from another, so a correction is computed the same way
offline and live (docs/method.md §8):

* `policies`: the pure policies (REQUESTED TIME, INCREMENTAL, RECURSIVE DOUBLING) and their protocol;
* `survival`: SURVIVAL, the one policy with state (its users' recent runtimes);
* `starvation`: the starvation guard's default and how people write it (docs/method.md §7).

`make_correction` builds a policy by the name `simulate`, the campaigns and the daemon use.
"""

from __future__ import annotations

from hpcpredict.corrections.policies import CORRECTIONS, CorrectionPolicy
from hpcpredict.corrections.survival import DEFAULT_SURVIVAL_QUANTILE, SurvivalCorrection

#: Every correction `simulate`, the campaigns and the daemon accept: the pure ones, and SURVIVAL.
CORRECTION_NAMES: tuple[str, ...] = (*CORRECTIONS, "survival")


def make_correction(name: str, *, survival_quantile: float | None = None) -> CorrectionPolicy:
    """A policy for one run: the shared pure instance, or a fresh SURVIVAL with its own history."""
    if name == "survival":
        quantile = DEFAULT_SURVIVAL_QUANTILE if survival_quantile is None else survival_quantile
        return SurvivalCorrection(quantile=quantile)
    try:
        return CORRECTIONS[name]
    except KeyError:
        raise ValueError(f"unknown correction {name!r}; one of {', '.join(CORRECTION_NAMES)}") from None
