"""How much of a replay a starvation guard was due, and what that has meant on the logs measured.

Under a long queue some job has nearly always waited the guard's time, so the guard is due nearly
all the time, every job is then planned on its request, and the predictions have little left to
do: on the loaded logs measured (docs/results.md, "Under a heavier load") the learned limits did
no better than AVE2's under the same guard once it was due 74-84% of the time, and were still ahead
at 47-61%. `simulate` and `tune` say how often it was, so that an admin can tell that regime from
their own history.
"""

from __future__ import annotations

from hpcpredict.logs.job_table import job_column
from hpcpredict.sim.metrics import waited_share
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.easy.simulation import SimulationResult
from hpcpredict.logs.workload import Workload

# From this share of the time on, the commands say what a guard due that often did on the loaded
# logs measured (the module doc).
MOSTLY_DUE = 0.7


def guard_due_share(result: SimulationResult, spec: RunSpec, from_s: int | None = None) -> float | None:
    """The share of the replay (from `from_s` on, if given) during which the guard's rule was due
    for some job: the wait rule's time, or the xfactor rule's per-job times (`metrics.waited_share`).
    None without a guard, or for a rule whose due times depend on more than the job (the
    "promise" rule)."""
    if spec.guard is None or spec.guard.rule == "promise":
        return None
    threshold_s = spec.guard.due_after_s(job_column(result.jobs, "requested_s"))
    return waited_share(job_column(result.jobs, "submit_s"), result.start_s, threshold_s, from_s)


def replayed_due_share(workload: Workload, spec: RunSpec, from_s: int | None = None) -> float | None:
    """`guard_due_share` of one replay of `workload` as it is under `spec`: what `tune` reports for
    its chosen setting over the later period (the campaign store keeps metrics, not schedules, so
    this is one more replay). None without a guard."""
    if spec.guard is None:
        return None
    return guard_due_share(run(workload, spec), spec, from_s)
