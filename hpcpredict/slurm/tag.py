"""The mark `job_submit.lua` leaves in a job's ``admin_comment``: its request and prediction.

``hpcpredict:request_s=3600,prediction_s=720,mode=lower`` — users cannot set ``admin_comment``
(design.md), so the original request survives the lowered limit, and every later reader (the
corrector, the completion script, ``slurm-convert``) knows what the user asked for and what
hpcpredict predicted, and whether the plugin was lowering limits (``mode``; absent in marks of
plugins older than the starvation guard, which only restores such jobs). Other text an admin put in the comment is kept after the mark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TAG_PREFIX = "hpcpredict:"
_TAG = re.compile(r"hpcpredict:request_s=(\d+),prediction_s=(\d+)(?:,mode=(lower|record))?")


@dataclass(frozen=True, slots=True)
class PredictionTag:
    request_s: int
    prediction_s: int
    mode: str | None = None  # "lower" | "record" | None (an older plugin's mark)

    def format(self) -> str:
        mode = "" if self.mode is None else f",mode={self.mode}"
        return f"{TAG_PREFIX}request_s={self.request_s},prediction_s={self.prediction_s}{mode}"


def parse_tag(admin_comment: str | None) -> PredictionTag | None:
    """The mark in `admin_comment`, or None when the plugin did not mark the job."""
    if not admin_comment:
        return None
    match = _TAG.search(admin_comment)
    if match is None:
        return None
    return PredictionTag(int(match.group(1)), int(match.group(2)), match.group(3))
