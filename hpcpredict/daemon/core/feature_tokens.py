"""The features behind each served prediction, kept under a token until the job is reported.

SLURM's ``job_submit`` plugin asks PREDICT before the job has an id; the SLURM watcher reports
the job (SUBMIT) seconds later, when the learner may already have seen other jobs start and end.
Recomputing the features then would make a job learn from other features than the ones its
prediction (the limit SLURM planned with) was computed from; the simulator never allows that.
So PREDICT keeps its feature vector here under a fresh token, answers the token, the plugin
writes it into the job's mark (``admin_comment``), and the SUBMIT that carries it (or the END
of a job never submitted to the daemon, which the service records as submitted first) takes the
vector back (`features_for`), for the job's request only (same user, processors and request: a token
copied onto another job gives nothing).

Kept in memory, at most `capacity` (oldest dropped first): a job reported after a daemon restart,
or after `capacity` later predictions, has its features recomputed at its report, as before
tokens, and `TokenCounts` says how often that happened. Touched from one thread only (the
daemon's event loop, through `PredictionService.on_learner`).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from hpcpredict.jobs import JobRequest

DEFAULT_CAPACITY = 50_000  # ~10 MB; a watcher reports within seconds, even at 1,000 jobs/s


@dataclass
class TokenCounts:
    issued: int = 0
    taken: int = 0  # a SUBMIT given its PREDICT's features
    unknown: int = 0  # a token not held (a restart, dropped past capacity, or not ours)
    mismatched: int = 0  # a token for another request (user, processors or time limit)


@dataclass(frozen=True, slots=True)
class _Held:
    user_id: int
    procs: int
    requested_s: int
    features: np.ndarray


class FeatureTokens:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, prefix: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        # A new prefix per daemon start: a token from before a restart is unknown, never another's.
        self.prefix = secrets.token_hex(4) if prefix is None else prefix
        self.counts = TokenCounts()
        self._held: OrderedDict[str, _Held] = OrderedDict()

    def issue(self, request: JobRequest, features: np.ndarray) -> str:
        """Keep a copy of `features` (x_j, before any scaling) for `request`; its token."""
        self.counts.issued += 1
        token = f"{self.prefix}-{self.counts.issued:x}"
        self._held[token] = _Held(request.user_id, request.procs, request.requested_s,
                                  np.array(features, dtype=np.float64))
        if len(self._held) > self.capacity:
            self._held.popitem(last=False)
        return token

    def features_for(self, token: str, request: JobRequest) -> np.ndarray | None:
        """The features kept under `token` if they were computed for `request`, else None.

        Not removed: a SUBMIT whose transaction fails is sent again and must find them again
        (entries leave by age, past `capacity`); a second SUBMIT of one job records nothing.
        """
        held = self._held.get(token)
        if held is None:
            self.counts.unknown += 1
            return None
        if (held.user_id, held.procs, held.requested_s) != (request.user_id, request.procs, request.requested_s):
            self.counts.mismatched += 1
            return None
        self.counts.taken += 1
        return held.features

    def __len__(self) -> int:
        return len(self._held)
