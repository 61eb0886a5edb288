"""The predictors as the compiled replay loops run them: `predicted_at_submission` and
`heard_end`, the `predict` and `job_ended` of every predictor they model (`learn.rules`' codes),
on the rules the Python predictors apply (`learn.rules`, compiled in here) and the learner's
own kernels (`feature_kernels`: the features, NAG's step)."""

from __future__ import annotations

import numpy as np

from hpcpredict.compiled import compiled, usable_in_kernels
from hpcpredict.learn.feature_kernels import learn_and_end, submit_and_score
from hpcpredict.learn.rules import (
    AVE2,
    CLAIRVOYANT,
    LEARNED,
    ave2_seconds,
    clip_prediction,
    learned_seconds,
)

usable_in_kernels(clip_prediction, learned_seconds, ave2_seconds)


@compiled
def predicted_at_submission(
    index: int, now_s: int, predictor: int, abs_negative: bool, requested_s: np.ndarray,
    procs: np.ndarray, user_row: np.ndarray, local_s: np.ndarray, oracle_s: np.ndarray,
    users: np.ndarray, weights: np.ndarray, pool: np.ndarray, pool_of: np.ndarray,
    free_rows: np.ndarray, state: np.ndarray, free_rows_at: int, last_two: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """`clip_prediction(predictor.predict(...))` for a job submitted now, as both replay loops
    ask it (`replay_kernel.replay`, `slurm_replay_kernel.replay`); the learner scores the job into a free row
    of the pool (`state[free_rows_at]` of them are free, the caller made sure one is)."""
    job_requested_s = requested_s[index]
    if predictor == LEARNED:
        top = state[free_rows_at] - 1
        state[free_rows_at] = top
        row = free_rows[top]
        pool_of[index] = row
        f = submit_and_score(users, user_row[index], float(procs[index]), float(job_requested_s),
                             float(now_s), local_s[index], weights, pool[row])
        predicted = learned_seconds(f, job_requested_s, abs_negative)
    elif predictor == CLAIRVOYANT:
        predicted = clip_prediction(float(oracle_s[index]), job_requested_s)
    elif predictor == AVE2:
        user = user_row[index]
        predicted = ave2_seconds(last_two[user, 0], last_two[user, 1], job_requested_s)
    else:
        predicted = job_requested_s
    return clip_prediction(float(predicted), job_requested_s)


@compiled
def heard_end(
    job: int, now_s: int, predictor: int, run_s: np.ndarray, procs: np.ndarray,
    user_row: np.ndarray, pool: np.ndarray, pool_of: np.ndarray, free_rows: np.ndarray,
    nag: np.ndarray, constants: np.ndarray, n_sum: np.ndarray, outlier_after: int,
    factor: float, users: np.ndarray, slots: np.ndarray, last_two: np.ndarray,
    state: np.ndarray, free_rows_at: int, steps_at: int,
) -> None:  # pragma: no cover - compiled
    """`predictor.job_ended` for a job that ended now: the learner learns from its row of the
    pool and frees it (NAG's t in `state[steps_at]`, N in `n_sum`), AVE2 keeps its runtime."""
    if predictor == LEARNED:
        row, steps = pool_of[job], state[steps_at]
        stepped, new_n_sum = learn_and_end(
            pool[row], nag, constants, steps, n_sum[0], float(run_s[job]), float(procs[job]),
            steps >= outlier_after, factor, users, slots, user_row[job], row, float(now_s))
        if stepped:
            state[steps_at] = steps + 1
            n_sum[0] = new_n_sum
        free_rows[state[free_rows_at]] = row
        state[free_rows_at] += 1
    elif predictor == AVE2:
        user = user_row[job]
        last_two[user, 1] = last_two[user, 0]
        last_two[user, 0] = run_s[job]
