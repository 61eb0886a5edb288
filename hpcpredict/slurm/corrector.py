"""When and how far the live corrector raises a running job's time limit (issue 7, part 2).

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
"""

from __future__ import annotations

from hpcpredict.sim.corrections import CorrectionPolicy, IncrementalCorrection

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
) -> int | None:
    """The limit to set now (seconds, whole minutes, <= `request_s`), or None if none is due.

    Due when the job is within `margin_s` of its current limit and that limit is below the
    request. The answer is the first of the policy's successive limits that is above the
    current one and leaves `margin_s` of headroom; the request when none does.
    """
    if current_limit_s >= request_s or elapsed_s + margin_s < current_limit_s:
        return None
    for corrections_done in range(_MAX_STEPS):
        candidate = policy.corrected_prediction_s(request_s, prediction_s, corrections_done, elapsed_s)
        limit = min(request_s, whole_minutes_s(candidate))
        if limit >= request_s:
            return request_s
        if limit > current_limit_s and limit > elapsed_s + margin_s:
            return limit
    return request_s
