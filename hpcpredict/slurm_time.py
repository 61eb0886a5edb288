"""SLURM's time strings as seconds: one reader for squeue's limits and slurm.conf's settings.

SLURM writes and reads durations as "minutes", "minutes:seconds", "hours:minutes:seconds",
"days-hours", "days-hours:minutes" or "days-hours:minutes:seconds" (slurm.conf(5), squeue(1)); the
failsafe reads squeue's TimeLimit and TimeUsed with it, the SLURM model's slurm.conf reader its
PriorityMaxAge.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


def slurm_duration_s(text: str) -> int | None:
    """SLURM's "[D-]HH:MM:SS", "MM:SS" or "M" -> seconds; None for UNLIMITED, NOT_SET, INVALID..."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    days, first, second, third = match.groups()
    if days is not None:  # days-hr[:min[:sec]]
        return ((int(days) * 24 + int(first)) * 60 + int(second or 0)) * 60 + int(third or 0)
    if third is not None:  # hr:min:sec
        return (int(first) * 60 + int(second)) * 60 + int(third)
    return int(first) * 60 + int(second or 0)  # min[:sec]: a bare number is minutes, as --time takes it
