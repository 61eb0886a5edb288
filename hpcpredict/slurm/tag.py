"""The mark `job_submit.lua` leaves in a job's ``admin_comment``: its request and prediction.

``hpcpredict:request_s=3600,prediction_s=720,mode=lower,procs=32,token=5f3a9c01-2a`` — users
cannot set ``admin_comment`` (admins only), so the original request survives the lowered limit,
and every later reader (the corrector, the completion script, ``slurm-convert``) knows what the
user asked for and what hpcpredict predicted, and whether the plugin was lowering limits
(``mode``). ``procs`` is the processor count the prediction was made for (the one the watcher
and the completion script report, whatever SLURM allocated: docs/protocol.md, "Processors"), and
``token`` the daemon's key to the features it predicted from (daemon/core/feature_tokens.py). Marks of
older plugins lack the later fields (``mode``: plugins before the starvation guard, which only
restores such jobs). Other text an admin put in the comment is kept after the mark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAG_PREFIX = "hpcpredict:"
_TAG = re.compile(
    r"hpcpredict:request_s=(\d+),prediction_s=(\d+)(?:,mode=(lower|record))?"
    r"(?:,procs=(\d+))?(?:,token=([0-9a-f-]{1,40}))?"
)


@dataclass(frozen=True, slots=True)
class PredictionTag:
    request_s: int
    prediction_s: int
    mode: str | None = None  # "lower" | "record" | None (an older plugin's mark)
    procs: int | None = None  # the processors predicted for (None: an older plugin's mark)
    token: str | None = None  # the daemon's feature token (None: an older plugin or daemon)

    def format(self) -> str:
        text = f"{TAG_PREFIX}request_s={self.request_s},prediction_s={self.prediction_s}"
        for key in ("mode", "procs", "token"):
            value = getattr(self, key)
            text += "" if value is None else f",{key}={value}"
        return text


def parse_tag(admin_comment: str | None) -> PredictionTag | None:
    """The mark in `admin_comment`, or None when the plugin did not mark the job."""
    if not admin_comment:
        return None
    match = _TAG.search(admin_comment)
    if match is None:
        return None
    procs = match.group(4)
    return PredictionTag(int(match.group(1)), int(match.group(2)), match.group(3),
                         None if procs is None else int(procs), match.group(5))


# The limit SLURM's backfill scheduler gives a job submitted without one, in a partition with no
# MaxTime, when it is the backfill scheduler that starts it: a year (YEAR_MINUTES; backfill.c sets
# ``job_ptr->time_limit = comp_time_limit`` when the job's limit was NO_VAL), where the main
# scheduler leaves the same job UNLIMITED. Seen on 22.05 and 26.05 (tests/test_slurm_e2e.py). No
# user asked for it: a job showing it and no mark of the plugin has no request.
BACKFILL_NO_LIMIT_S = 365 * 24 * 3600


def request_s(tag: PredictionTag | None, time_limit_s: int | None) -> int | None:
    """What the user asked for: the request the plugin recorded in its mark (the limit SLURM
    shows may be the lowered one), else the limit SLURM holds; None when there is neither, or
    when SLURM's limit is the year its backfill scheduler gives a job with none
    (`BACKFILL_NO_LIMIT_S`)."""
    if tag is not None:
        return tag.request_s
    return None if time_limit_s == BACKFILL_NO_LIMIT_S else time_limit_s
