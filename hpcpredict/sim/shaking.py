"""Shaken replicas of a log: the same jobs, submitted a little earlier or later.

Backfilling is chaotic: moving one submission by a few seconds can change which job fills a hole,
and the change cascades, so one replay of a log can show a difference between two schedulers that
a neighbouring replay reverses. Tsafrir, Ouaknine & Feitelson ("Reducing performance evaluation
sensitivity and variability by input shaking", MASCOTS 2007) judge a scheduler by its mean over
many slightly perturbed copies of the log instead; this module makes those copies.

The rule (docs/evaluation.md): replica 0 is the cleaned log itself; replica r >= 1 adds to each
job's submit time an integer offset drawn uniformly from [-shake_s, +shake_s], clamps it at 0 (no
job is submitted before the log starts), and re-sorts the jobs by the new submit time (ties keep
the log's order). Nothing else changes: every job keeps its id, user, processors, request and
runtime. Replica r's offsets come from a generator seeded with (seed, r) alone, so a replica is the
same whatever the number of replicas asked for, and every configuration compared on replica r sees
the same log (a paired design).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from typing import TYPE_CHECKING

from hpcpredict.jobs import Job
from hpcpredict.logs.workload import Workload

if TYPE_CHECKING:
    import numpy as np

DEFAULT_SHAKE_S = 60
DEFAULT_SEED = 0


def shake_jobs(jobs: Sequence[Job], shake_s: int, rng: np.random.Generator) -> Sequence[Job]:
    """A copy of `jobs` with submit times moved by up to `shake_s` seconds, re-sorted.

    A `JobTable` (a loaded log) is shaken as columns into another table: no job object is built
    (two `dataclasses.replace` per job took ~3 s of CPU per CEA-Curie replica, a replay's
    sixth), and the replay of the copy builds only its requests. Other sequences give a list.
    """
    import numpy as np  # here: the command line imports this module for its defaults

    from hpcpredict.logs.job_table import JobTable, job_column  # numpy too

    if shake_s < 0:
        raise ValueError(f"the shake must be >= 0 seconds, got {shake_s}")
    submit = np.asarray(job_column(jobs, "submit_s"), dtype=np.int64)
    offsets = rng.integers(-shake_s, shake_s, size=len(jobs), endpoint=True)
    shaken = np.maximum(submit + offsets, 0)
    order = np.argsort(shaken, kind="stable")
    if isinstance(jobs, JobTable):
        columns = {name: column[order] for name, column in jobs.columns.items()}
        columns["submit_s"] = shaken[order]
        return JobTable(columns)
    return [
        dataclasses.replace(
            jobs[index], request=dataclasses.replace(jobs[index].request, submit_s=int(shaken[index]))
        )
        for index in order.tolist()
    ]


def replica(
    workload: Workload, index: int, *, shake_s: int = DEFAULT_SHAKE_S, seed: int = DEFAULT_SEED
) -> Workload:
    """Replica `index` of `workload` (0: the log itself; see the module docstring)."""
    if index < 0:
        raise ValueError(f"replica numbers start at 0, got {index}")
    if index == 0 or shake_s == 0:
        return workload
    import numpy as np

    rng = np.random.default_rng([seed, index])
    return dataclasses.replace(workload, jobs=shake_jobs(workload.jobs, shake_s, rng))
