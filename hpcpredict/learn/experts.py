"""Per-user expert choice (docs/method.md §6): for each user, predict with whichever of the learned
model, AVE2 and the request has had the lowest recent loss on that user's jobs.

The three experts answer every job; at its end each is scored with the learner's own loss (the
E-Loss in hours by default), and a user's scores are exponentially discounted sums: with
``decay`` = 0.9 a job's loss counts 0.9^k after k more of the user's jobs, so about the last ten
jobs decide. The next prediction is the expert with the lowest score (follow the leader; ties go
to the learned model, then AVE2). A user with no scored job gets the learned model: the shared
model is what borrows from everyone.

It is cheap (three numbers per user), online, and explainable in one line ("user 1042: AVE2,
whose recent loss is a third of the model's"). Scoring needs the prediction each expert *gave*
at submission; the learner keeps the learned one until the end (AVE2 and the request are read
again from the job's features and request).

>>> scores = ExpertScores()
>>> scores.choice(7)  # nobody scored yet: the learned model
0
>>> scores.update(7, (4.0, 1.0, 9.0))
>>> EXPERTS[scores.choice(7)]
'ave2'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EXPERTS: tuple[str, ...] = ("learned", "ave2", "requested")
LEARNED, AVE2, REQUESTED = range(len(EXPERTS))
EXPERT_DECAY = 0.9  # per job of the user: the last ~10 jobs decide (module doc)


class ExpertScores:
    """Discounted loss of each expert on each user's jobs."""

    def __init__(self, decay: float = EXPERT_DECAY) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"the decay must be in [0, 1), got {decay!r}")
        self.decay = decay
        self.users: dict[int, np.ndarray] = {}

    def choice(self, user_id: int) -> int:
        """Index into EXPERTS of the expert to predict with for this user's next job."""
        scores = self.users.get(user_id)
        return LEARNED if scores is None else int(np.argmin(scores))  # first minimum on ties

    def update(self, user_id: int, losses: Sequence[float]) -> None:
        """One of the user's jobs ended: `losses` are the experts' losses on it (EXPERTS order)."""
        scores = self.users.get(user_id)
        if scores is None:
            scores = self.users[user_id] = np.zeros(len(EXPERTS))
        scores *= self.decay
        scores += losses

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            "user_id": np.array(list(self.users), dtype=np.int64),
            "scores": np.array(list(self.users.values()), dtype=np.float64).reshape(-1, len(EXPERTS)),
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.users = {
            user_id: np.array(row, dtype=np.float64)
            for user_id, row in zip(state["user_id"].tolist(), state["scores"].tolist())
        }
