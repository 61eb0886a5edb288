"""What "the user's history" is keyed by: the user, or the user and one more field of the job.

The paper's features (docs/method.md §2) read a user's history: their last runtimes, their running
jobs. A user who runs two applications, or submits to a short and a long queue, mixes them in one
history. Keyed by the user *and* a field of the job (Smith, Foster & Taylor's "templates", JSSPP
1998: jobs alike in user and queue, or executable, run alike), each kind of job of a user has a
history of its own. The fields are those an SWF log carries (group, executable, queue, partition,
docs/swf.md) and the SLURM plugin sends (the job's group, name and partition:
`slurm/requests.py`, the protocol's ``gid``, ``name``, ``partition``), or the request itself: a
user's jobs with the same time limit are most often the same script.

One rule, here, for every driver: the learner's Python calls (`FeatureState`) key each event with
`history_key`, the compiled replays key the whole log at once with `history_keys`, the same
arithmetic on arrays. A key packs the user id (at most 2**31 - 1) in the high 32 bits and the
field in the low 32 (a missing field, -1, is one more value of it), so a key is a user id when the
history is keyed by the user alone, and two users never share a key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcpredict.jobs import JobRequest

if TYPE_CHECKING:  # numpy only where arrays are keyed: `--help` and the failsafe import this module
    import numpy as np

# history_by -> the JobRequest field keyed with the user (None: the user alone, the paper's rule)
HISTORY_KEYS: dict[str, str | None] = {
    "user": None,
    "user+group": "group_id",
    "user+executable": "executable_id",
    "user+queue": "queue_id",
    "user+partition": "partition_id",
    "user+request": "requested_s",
}
DEFAULT_HISTORY_BY = "user"
_LOW_BITS = 0xFFFFFFFF


def history_key(request: JobRequest, history_by: str) -> int:
    """The key of `request`'s history (`history_keys` on one job)."""
    field = HISTORY_KEYS[history_by]
    if field is None:
        return request.user_id
    return (request.user_id << 32) | (getattr(request, field) & _LOW_BITS)


def history_keys(history_by: str, user_ids: np.ndarray, attribute: np.ndarray | None) -> np.ndarray:
    """Every job's key: `user_ids` alone, or with `attribute` (the jobs' `HISTORY_KEYS` field)."""
    import numpy as np

    user_ids = np.asarray(user_ids, dtype=np.int64)
    if HISTORY_KEYS[history_by] is None:
        return user_ids
    if attribute is None:
        raise ValueError(f"history keyed by {history_by} needs the jobs' {HISTORY_KEYS[history_by]}")
    return np.left_shift(user_ids, 32) | (np.asarray(attribute, dtype=np.int64) & _LOW_BITS)


def check_history_by(history_by: object) -> None:
    if history_by not in HISTORY_KEYS:
        raise ValueError(f"history_by must be one of {', '.join(HISTORY_KEYS)}, got {history_by!r}")
