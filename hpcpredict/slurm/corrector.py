"""When and how far the live corrector raises a running job's time limit (docs/method.md §8).

SLURM kills a job at its limit; hpcpredict lowered that limit to a prediction, so a job that
outlives it must get more time *before* SLURM's check (every ~30 s) reaches it. The decision is a
pure function of what SLURM itself shows — the request and the prediction (from the job's
``admin_comment`` mark), the current limit and the elapsed time — so the corrector keeps no state:
after a restart it reads SLURM again and decides the same, and a limit it already raised is
never raised twice for the same reason.

The new limit is the correction policy's (docs/method.md §8, the simulator's own `CorrectionPolicy`),
rounded up to SLURM's whole minutes: INCREMENTAL gives prediction + 1 min, + 5 min, + 15 min,
... then the request. A step that would leave less than `margin_s` of headroom is skipped for the
next one (the corrector only looks every few seconds), and the request is always the last
answer: a job is never killed by hpcpredict before the limit its user asked for.

Each successive limit is asked of the policy as the simulator asks it, when the job reaches the
limit before: the first as of the current limit (the job is within the margin of it), the next
ones as of the limit rejected before. That changes nothing for INCREMENTAL (it ignores the
elapsed time) and gives DOUBLING and SURVIVAL their successive answers (twice the last limit;
the user's quantile given the job outlives it) instead of the same answer again and again. SURVIVAL
also needs the job's user (`user_id`) and the time (`now_s`) for its running jobs.
"""

from __future__ import annotations

from hpcpredict.corrections.policies import CorrectionPolicy, IncrementalCorrection

DEFAULT_MARGIN_S = 120  # > SLURM's 30 s check + a poll interval + scontrol's own latency
_MAX_STEPS = 64


def whole_minutes_s(seconds: int) -> int:
    """`seconds` rounded up to SLURM's whole minutes (at least one), in seconds."""
    return max(60, -(-seconds // 60) * 60)


def corrected_limit_s(
    *,
    request_s: int,
    prediction_s: int,
    current_limit_s: int,
    elapsed_s: int,
    margin_s: int = DEFAULT_MARGIN_S,
    policy: CorrectionPolicy = IncrementalCorrection(),
    user_id: int | None = None,
    now_s: int | None = None,
) -> int | None:
    """The limit to set now (seconds, whole minutes, <= `request_s`), or None if none is due.

    Due when the job is within `margin_s` of its current limit and that limit is below the
    request. The answer is the first of the policy's successive limits that is above the
    current one and leaves `margin_s` of headroom; the request when none does.
    """
    if current_limit_s >= request_s or elapsed_s + margin_s < current_limit_s:
        return None
    reached_s = max(elapsed_s, current_limit_s)  # the simulator corrects at the predicted end
    for corrections_done in range(_MAX_STEPS):
        candidate = policy.corrected_prediction_s(request_s, prediction_s, corrections_done,
                                                  reached_s, user_id=user_id, now_s=now_s)
        limit = min(request_s, whole_minutes_s(candidate))
        if limit >= request_s:
            return request_s
        if limit > current_limit_s and limit > elapsed_s + margin_s:
            return limit
        reached_s = max(reached_s, limit)
    return request_s
