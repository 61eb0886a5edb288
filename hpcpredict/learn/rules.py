"""The predictors' per-job rules, written once: plain Python that the predictors call, and
that the compiled replay loops compile into theirs (`learn.predictor_kernel` registers them
with `hpcpredict.compiled.usable_in_kernels`).

Why plain Python rather than compiled functions: the Python objects call these once or twice
per job, where a compiled function's dispatch would cost more than the rule, and this module
imports no numba, so the command line and the failsafe that import the predictors for their
names start without it. A change here changes both loops alike (the file is one of
`compiled.KERNEL_FILES`, so the cached loops compile again).

The codes below are how a compiled loop names a predictor (`replay_state.PredictorArrays.kind`).
"""

from __future__ import annotations

# The predictors the compiled loops model, by code.
REQUESTED, CLAIRVOYANT, AVE2, LEARNED = range(4)


def clip_prediction(value: float, requested_s: int) -> int:
    """Clip a raw prediction to whole seconds in [1, requested_s] (docs/method.md §5, last line).

    NaN (a diverged model) falls back to the request, the safe answer for a scheduler.
    """
    if value != value:  # NaN
        return max(1, requested_s)
    # max(1, min(int(value), requested_s)) written as comparisons: the same result, without two
    # builtin calls (it runs twice per job in a learned replay).
    seconds = int(value)
    if seconds > requested_s:
        seconds = requested_s
    return seconds if seconds > 1 else 1


def learned_seconds(f: float, requested_s: int, abs_negative: bool) -> int:
    """The learned model's output `f` as a prediction: a negative output as |f| (the "abs" rule)
    or 1 s, then clipped (`clip_prediction`)."""
    if f < 0.0:
        f = -f if abs_negative else 1.0
    # Capped first: clip_prediction's int() cannot take an infinity; NaN passes through
    # (min(f, requested_s), as a comparison).
    if requested_s < f:
        f = float(requested_s)
    return clip_prediction(f, requested_s)


def ave2_seconds(last_s: int, previous_s: int, requested_s: int) -> int:
    """AVE2's prediction from the user's last two runtimes, the most recent first (-1: none):
    their mean rounded down, clipped; the request until the user has two."""
    if last_s < 0 or previous_s < 0:
        return requested_s
    return clip_prediction((last_s + previous_s) // 2, requested_s)
