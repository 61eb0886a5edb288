"""Per-job results of a simulation, as SWF (for SWF tools) and as an evalys-style jobs CSV.

SWF has no column for predictions, so the output follows the reference simulator's (pyss)
conventions, stated in the header: field 17 (preceding job) holds the number of corrections and
field 18 (think time) the initial prediction in seconds; field 16 (partition) is 1 for a
backfilled job, 0 otherwise. Wait (field 3) is the simulated wait, and the processor fields hold
the processors the job was given.

The CSV uses the column names of Batsim's jobs.csv that evalys reads (job_id, submission_time,
starting_time, execution_time, finish_time, waiting_time, ...), plus our prediction columns. It has
no `allocated_resources` column: the simulator counts processors, it does not place jobs on
particular ones, so Gantt charts of processor ids cannot be drawn from it.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

import numpy as np

from hpcpredict.sim.metrics import job_arrays
from hpcpredict.sim.easy.simulation import SimulationResult
from hpcpredict.logs.swf import MISSING, SwfRecord, write_swf


def _open_text(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="ascii", newline="")
    return path.open("w", encoding="ascii", newline="")


def write_result_swf(path: Path, result: SimulationResult, notes: Iterable[str] = ()) -> None:
    """Write one SWF line per job, in job order, with the simulated wait (`swf.write_swf`)."""
    wait_s = job_arrays(result)["wait_s"].tolist()
    header = [
        "; Computer: hpcpredict simulator",
        "; Preemption: No",
        f"; MaxProcs: {result.machine_procs}",
        f"; Note: scheduler={result.scheduler} predictor={result.predictor} "
        f"correction={result.correction}",
        *(f"; Note: {note}" for note in notes),
        "; Note: field 16 (partition) = 1 if the job was backfilled, 0 otherwise",
        "; Note: field 17 (preceding job) = number of corrections of the prediction",
        "; Note: field 18 (think time) = initial prediction in seconds",
    ]
    records = (
        SwfRecord(
            job_id=job.request.job_id,
            submit_s=job.request.submit_s,
            wait_s=wait_s[index],
            run_s=job.run_s,
            allocated_procs=job.request.procs,
            avg_cpu_s=MISSING,
            used_memory_kb=MISSING,
            requested_procs=job.request.procs,
            requested_time_s=job.request.requested_s,
            requested_memory_kb=MISSING,
            status=job.status,
            user_id=job.request.user_id,
            group_id=job.request.group_id,
            executable_id=job.request.executable_id,
            queue_id=job.request.queue_id,
            partition_id=int(result.backfilled[index]),
            preceding_job_id=result.corrections[index],
            think_time_s=result.initial_prediction_s[index],
        )
        for index, job in enumerate(result.jobs)
    )
    write_swf(Path(path), header, records)


JOBS_CSV_COLUMNS = (
    "job_id",
    "workload_name",
    "user_id",
    "submission_time",
    "requested_number_of_resources",
    "requested_time",
    "success",
    "final_state",
    "starting_time",
    "execution_time",
    "finish_time",
    "waiting_time",
    "turnaround_time",
    "stretch",
    "bounded_slowdown",
    "initial_prediction",
    "final_prediction",
    "corrections",
    "backfilled",
)


def write_jobs_csv(path: Path, result: SimulationResult, workload_name: str = "w0") -> None:
    """Write the evalys-style jobs table (times in seconds)."""
    columns = job_arrays(result)
    finish = columns["start_s"] + columns["run_s"]
    turnaround = finish - columns["submit_s"]
    stretch = turnaround / np.maximum(columns["run_s"], 1)
    with _open_text(Path(path)) as out:
        writer = csv.writer(out)
        writer.writerow(JOBS_CSV_COLUMNS)
        for index, job in enumerate(result.jobs):
            writer.writerow(
                (
                    job.job_id,
                    workload_name,
                    job.user_id,
                    job.submit_s,
                    job.procs,
                    job.requested_s,
                    1,
                    "COMPLETED_SUCCESSFULLY",
                    int(columns["start_s"][index]),
                    job.run_s,
                    int(finish[index]),
                    int(columns["wait_s"][index]),
                    int(turnaround[index]),
                    f"{stretch[index]:.6g}",
                    f"{columns['bsld'][index]:.6g}",
                    result.initial_prediction_s[index],
                    result.final_prediction_s[index],
                    result.corrections[index],
                    int(result.backfilled[index]),
                )
            )
