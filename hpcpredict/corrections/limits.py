"""The stateless corrections' rules, written once: plain Python that the policies of
`corrections.policies` call, and that the compiled replay loops compile into theirs
(`corrections.correction_kernel` registers them with `hpcpredict.compiled.usable_in_kernels`;
this module imports no numba, for the same reason as `learn.rules`).

The codes below are how a compiled loop names a correction (`replay_state.CorrectionArrays.kind`).
"""

from __future__ import annotations

from collections.abc import Sequence

# The corrections the compiled loops model, by code.
TO_REQUEST, INCREMENTAL, DOUBLING, SURVIVAL = range(4)

#: INCREMENTAL steps after the k-th correction (Tsafrir, Etsion & Feitelson, TPDS 2007; docs/method.md §8).
#: They replace each other (initial + step k), they do not accumulate.
INCREMENTAL_STEPS_S: tuple[int, ...] = (
    60, 5 * 60, 15 * 60, 30 * 60, 3600, 2 * 3600, 5 * 3600, 10 * 3600, 20 * 3600, 50 * 3600,
    100 * 3600,
)


def incremental_limit(requested_s: int, initial_s: int, done: int, steps_s: Sequence[int]) -> int:
    """INCREMENTAL's `done + 1`-th limit: the initial prediction plus step `done`, within the
    request; the request once the steps are spent. `steps_s`: `INCREMENTAL_STEPS_S` (an argument:
    a compiled loop takes them as an array)."""
    if done >= len(steps_s):
        return requested_s
    extended = initial_s + steps_s[done]
    return extended if extended < requested_s else requested_s


def doubling_limit(requested_s: int, elapsed_s: int) -> int:
    """RECURSIVE DOUBLING's limit for a job that has run `elapsed_s`: twice that (at least one
    second more), capped at the request (the reference did not cap: docs/method.md §10)."""
    doubled = max(2 * elapsed_s, elapsed_s + 1)
    return doubled if doubled < requested_s else requested_s


def stateless_limit(kind: int, requested_s: int, initial_s: int, done: int, elapsed_s: int,
                    steps_s: Sequence[int]) -> int:
    """The limit of the stateless correction `kind` (TO_REQUEST, INCREMENTAL or DOUBLING)."""
    if kind == INCREMENTAL:
        return incremental_limit(requested_s, initial_s, done, steps_s)
    if kind == DOUBLING:
        return doubling_limit(requested_s, elapsed_s)
    return requested_s
