"""Replay the SLURM model in its compiled loop (`slurm_replay_kernel.replay`) when the predictor
and the correction are ones it models; `slurm_backfill.simulate_slurm` asks and replays in its
Python loop otherwise (that loop stays the reference for every option).

What the loop models: every SLURM setting and the daemon's guard (its wait and xfactor rules:
`guard_wait_s` per job), with the predictors and corrections the EASY family's compiled loop
models, under the same conditions (`compiled_replay.why_python_for_jobs`, the one declaration).
The predictor and the correction hand over their state and take it back through the same
interface (`replay_state`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hpcpredict.corrections.policies import INCREMENTAL_STEPS_S, CorrectionPolicy
from hpcpredict.learn.baselines import Predictor
from hpcpredict.sim.slurm_model import slurm_replay_kernel as K
from hpcpredict.replay_state import ReplayJobs
from hpcpredict.sim.easy.compiled_replay import (
    JobArrays,
    ReplayColumns,
    bad_correction,
    hand_back,
    run_loop,
)
from hpcpredict.sim.engine.profile import never_fits
from hpcpredict.sim.slurm_model.slurm_params import SlurmParams


def replay(
    columns: dict[str, np.ndarray], machine_procs: int, profile: np.ndarray, params: SlurmParams,
    guard_wait_s: np.ndarray | None, predictor: Predictor, correction: CorrectionPolicy,
    correction_lead_s: int, progress: Callable[[int], None] | None, progress_every: int,
) -> ReplayColumns:
    """Replay in the compiled loop (`compiled_replay.why_python_for_jobs` must say None): `columns` the jobs' int64 columns (job_id, user_id, submit_s, run_s, procs,
    requested_s), `profile` the empty running profile's table, `guard_wait_s` how long each job
    waits before it turns the guard on (None: no guard). Progress is reported as the Python loop
    reports it."""
    int64 = np.int64
    job_ids, submit_s = columns["job_id"], columns["submit_s"]
    count = len(job_ids)
    replay_jobs = ReplayJobs.of(job_ids, columns["user_id"], submit_s, columns.get("history_attribute"))
    arrays = predictor.to_arrays(replay_jobs)  # type: ignore[attr-defined]
    correction_arrays = correction.to_arrays(replay_jobs)  # type: ignore[attr-defined]
    jobs = JobArrays.empty(count)
    # Each running job has a termination and at most one correction in the heap, plus one pass.
    heap = np.zeros((3, 2 * count + 1), dtype=int64)
    pending = np.zeros(max(count, 1), dtype=int64)
    lowered = np.zeros(max(count, 1), dtype=int64)
    lowered_at = np.full(count, -1, dtype=int64)
    started = np.zeros(params.bf_max_job_test, dtype=int64)
    jumped = np.zeros(params.bf_max_job_test, dtype=np.bool_)
    state = np.zeros(K.STATE_SIZE, dtype=int64)
    state[K.SEQUENCE_AT] = count  # the submissions' sequences are their indices
    state[K.STEPS_AT] = arrays.steps
    config = np.zeros(K.CONFIG_SIZE, dtype=int64)
    config[K.PREDICTOR_AT] = arrays.kind
    config[K.CORRECTION_AT] = correction_arrays.kind
    config[K.GUARD_AT] = guard_wait_s is not None
    config[K.ABS_NEGATIVE_AT] = arrays.abs_negative
    config[K.OUTLIER_AFTER_AT] = arrays.outlier_after
    config[K.SURVIVAL_MIN_AT] = correction_arrays.min_history
    config[K.LEAD_AT] = correction_lead_s
    config[K.MACHINE_AT] = machine_procs
    config[K.MULTIFACTOR_AT] = params.multifactor
    config[K.WEIGHT_AGE_AT] = params.priority_weight_age
    config[K.WEIGHT_SIZE_AT] = params.priority_weight_job_size
    config[K.MAX_AGE_AT] = params.priority_max_age_s
    config[K.FAVOR_SMALL_AT] = params.priority_favor_small
    config[K.MAX_TEST_AT] = params.bf_max_job_test
    config[K.WINDOW_AT] = params.bf_window_s
    config[K.RESOLUTION_AT] = params.bf_resolution_s
    config[K.INTERVAL_AT] = params.bf_interval_s
    config[K.RESERVE_AT] = params.bf_job_part_count_reserve
    waits = np.zeros(count, dtype=int64) if guard_wait_s is None else guard_wait_s.astype(int64)
    history_row = replay_jobs.user_row
    steps_s = np.array(INCREMENTAL_STEPS_S, dtype=int64)

    def replay_until(stop_at: int, pool: np.ndarray, slots: np.ndarray, free_rows: np.ndarray) -> int:
        return K.replay(
            submit_s, columns["run_s"], columns["procs"], columns["requested_s"], waits,
            arrays.user_row, arrays.local_s, arrays.oracle_s, profile, arrays.nag_table,
            arrays.constants, arrays.factor, arrays.users, slots, pool, jobs.pool_of, free_rows,
            arrays.last_two, jobs.start_s, jobs.prediction_s, jobs.initial_s, jobs.corrections,
            jobs.backfilled, jobs.first_reserved_s, heap, pending, lowered, lowered_at, started, jumped, state,
            arrays.n_sum, config, steps_s, stop_at, history_row, correction_arrays.history,
            correction_arrays.links, correction_arrays.links_first, correction_arrays.quantile)

    run_loop(replay_until, state, K.FINISHED_AT, K.FREE_ROWS_AT, arrays.pool, arrays.slots, count,
             progress, progress_every,
             lambda status: _raise(status, state, columns, machine_procs, correction))
    hand_back(predictor, arrays, correction, correction_arrays, replay_jobs, state, K.STEPS_AT,
              K.ESTIMATED_AT, K.FALLBACKS_AT)
    return jobs.columns()


def _raise(status: int, state: np.ndarray, columns: dict[str, np.ndarray], machine_procs: int,
           correction: CorrectionPolicy) -> None:
    """The error the Python loop raises for what stopped the compiled one."""
    job = int(state[K.ERROR_JOB_AT])
    if status == K.BAD_CORRECTION:
        raise bad_correction(correction, int(state[K.ERROR_VALUE_AT]), int(columns["job_id"][job]),
                             int(columns["requested_s"][job]))
    if status == K.NEVER_FITS:
        raise never_fits(int(columns["procs"][job]), machine_procs)
    if status == K.OVER_ALLOCATED:
        raise AssertionError(
            f"over-allocation: job {job} needs {int(columns['procs'][job])}, "
            f"{int(state[K.ERROR_VALUE_AT])} free")
    raise AssertionError(f"compiled SLURM replay stopped with status {status}")
