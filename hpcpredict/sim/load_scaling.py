"""A real log under a heavier (or lighter) load: its submit times compressed by a factor.

Why: a default chosen on a few logs must hold on logs nobody here has, and the symptom seen on a
held-back log (the starvation guard, due most of the time, leaves the predictions nothing to do:
the learned model only level with AVE2 under the same guard) comes with heavy queueing, which the
shared logs show little of. Dividing every inter-arrival time by a factor is the usual way to ask
a real log "what if the load grew by x%" (load scaling by inter-arrival compression, as in the
backfilling studies of Shmueli & Feitelson and others). Its known caveat (Feitelson, "Workload
Modeling for Computer Systems Performance Evaluation", 2015, §9.6): it compresses the daily cycle
and the users' think times with the gaps, and real users submit less when waits grow, so a scaled
log is a stress test of a scheduler, not a forecast of the site.

The rule: job j's submit time s_j becomes s_0 + floor((s_j - s_0) / factor), s_0 the first
submission; everything else (ids, users, processors, requests, runtimes) is unchanged, and the
order of submissions is kept (the map is non-decreasing; ties keep the log's order). A factor of
1 is the log itself. Shaken replicas (`shaking.replica`) are made from the scaled log.
"""

from __future__ import annotations

import dataclasses
import math

from hpcpredict.logs.workload import Workload

MAX_LOAD_FACTOR = 10.0  # beyond this a log's queue only grows: nothing left to measure


def check_load_factor(factor: float) -> float:
    """`factor` as a float, or ValueError saying what a load factor must be."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) \
            or not 0 < factor <= MAX_LOAD_FACTOR:
        raise ValueError(f"the load factor must be a number in (0, {MAX_LOAD_FACTOR:g}] (1: the log "
                         f"as it is, 1.2: jobs arriving 1.2 times as fast), got {factor!r}")
    return float(factor)


def scaled_load(workload: Workload, factor: float) -> Workload:
    """`workload` with its inter-arrival times divided by `factor` (module doc)."""
    import numpy as np  # here: the command line imports this module for its checks

    from hpcpredict.logs.job_table import JobTable, job_column

    factor = check_load_factor(factor)
    if factor == 1.0 or len(workload.jobs) == 0:
        return workload
    jobs = workload.jobs
    submit = np.asarray(job_column(jobs, "submit_s"), dtype=np.int64)
    first = int(submit[0])
    scaled = first + np.floor((submit - first) / factor).astype(np.int64)
    if isinstance(jobs, JobTable):
        return dataclasses.replace(workload, jobs=JobTable({**jobs.columns, "submit_s": scaled}))
    return dataclasses.replace(workload, jobs=[
        dataclasses.replace(job, request=dataclasses.replace(job.request, submit_s=int(at)))
        for job, at in zip(jobs, scaled.tolist())
    ])
