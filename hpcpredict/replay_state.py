"""How a predictor or a correction hands its state to a compiled replay loop and takes back what
the loop did with it: the one interface between the Python objects and the loops' arrays.

The compiled loops (`sim.easy.compiled_replay`, `sim.slurm_model.compiled_slurm_replay`) never
read an object's attributes. A class the loops can run declares it in its own body with
`compiled_kind` (the code of its rule: `learn.rules`, `corrections.limits`; a subclass that
changes a rule does not inherit the declaration) and implements `ReplaysCompiled`: `why_python`
says when its present state keeps it in the Python loop (a learner with calibration on, a
SURVIVAL history from before), `to_arrays` gives the loop its state, `from_arrays` leaves in the
object what the Python loop would have left. `why_python_for` is where the loops ask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np

from hpcpredict.history_keys import HISTORY_KEYS, history_keys

# The learner's rows for pending jobs at first (a row per job submitted and not yet ended);
# the driver doubles them when a submission finds none free.
FIRST_POOL_ROWS = 1024


@dataclass(frozen=True)
class ReplayJobs:
    """The replay's jobs as the compiled loops number them: their ids and submission times, the
    distinct user ids (sorted), where each user's first job is (`first_seen`) and each job's
    user (`user_row`, a row of `user_ids`); and, for a learner whose histories are keyed by the
    user and a field of the job (`hpcpredict.history_keys`), that field of every job."""

    job_ids: np.ndarray
    submit_s: np.ndarray
    user_ids: np.ndarray
    first_seen: np.ndarray
    user_row: np.ndarray
    history_attribute: np.ndarray | None = None

    @classmethod
    def of(cls, job_ids: np.ndarray, user_ids: np.ndarray, submit_s: np.ndarray,
           history_attribute: np.ndarray | None = None) -> ReplayJobs:
        distinct, first_seen, user_row = np.unique(user_ids, return_index=True, return_inverse=True)
        return cls(job_ids, submit_s, distinct, first_seen, user_row.astype(np.int64), history_attribute)

    def users_by_first_job(self) -> list[int]:
        """The users' rows in the order their first jobs come (the order the Python loop meets
        them)."""
        return np.argsort(self.first_seen).tolist()

    def histories(self, history_by: str) -> tuple[np.ndarray, list[int], np.ndarray]:
        """For histories keyed by `history_by`: the distinct keys, their rows in the order their
        first jobs come, and each job's row."""
        if HISTORY_KEYS[history_by] is None:
            return self.user_ids, self.users_by_first_job(), self.user_row
        keys = history_keys(history_by, self.user_ids[self.user_row], self.history_attribute)
        distinct, first_seen, key_row = np.unique(keys, return_index=True, return_inverse=True)
        return distinct, np.argsort(first_seen).tolist(), key_row.astype(np.int64)


def history_attribute(predictor: object, column: Callable[[str], np.ndarray]) -> np.ndarray | None:
    """The jobs' field that `predictor` keys its histories by with the user (its `history_by`,
    `hpcpredict.history_keys`), read with `column(name)`; None for the paper's histories by user
    (and for a predictor that keeps none)."""
    name = HISTORY_KEYS.get(getattr(predictor, "history_by", "user"))
    return None if name is None else column(name)


@dataclass
class PredictorArrays:
    """What a compiled loop reads of a predictor (its `kind`, `learn.rules`' code): per job, its
    user's row and (learner) the local time of its submission or (clairvoyant) its oracle
    runtime; the learner's NAG table, step constants, features and pool of pending rows; AVE2's
    histories. Empty arrays stand for what the predictor does not use (the loops' signature is
    one for all). `steps` and `n_sum` are NAG's t and N, which the loop advances."""

    kind: int
    user_row: np.ndarray
    local_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    oracle_s: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_two: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))
    nag_table: np.ndarray = field(default_factory=lambda: np.zeros((1, 1)))
    constants: np.ndarray = field(default_factory=lambda: np.zeros(1))
    factor: float = 0.0
    users: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    pool: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    slots: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    steps: int = 0
    n_sum: np.ndarray = field(default_factory=lambda: np.zeros(1))
    abs_negative: int = 0
    outlier_after: int = 0


@dataclass
class CorrectionArrays:
    """What a compiled loop reads of a correction (its `kind`, `corrections.limits`' code): for
    SURVIVAL its history in `corrections.survival_kernel`'s layout, its minimum history and
    quantile; for the stateless policies one unused row. `estimated` and `fallbacks` are the
    corrections SURVIVAL's estimate and its INCREMENTAL fallback answered, counted by the loop."""

    kind: int
    history: np.ndarray
    links: np.ndarray
    links_first: np.ndarray
    min_history: int = 1
    quantile: float = 0.5
    estimated: int = 0
    fallbacks: int = 0

    @classmethod
    def without_history(cls, kind: int) -> CorrectionArrays:
        """A stateless policy's: a history the loop never reads."""
        return cls(kind, np.zeros((1, 1), dtype=np.int64),
                   np.full((2, 1), -1, dtype=np.int64), np.full(1, -1, dtype=np.int64))


Arrays = TypeVar("Arrays", PredictorArrays, CorrectionArrays)


class ReplaysCompiled(Protocol[Arrays]):
    """A predictor or a correction a compiled loop can run (module doc)."""

    compiled_kind: int

    def why_python(self) -> str | None:
        """None when its present state is one the loops model; else why not, in a few words."""
        ...

    def to_arrays(self, jobs: ReplayJobs) -> Arrays:
        """Its state for a replay of `jobs`, as the loop reads it (arrays it may share)."""
        ...

    def from_arrays(self, arrays: Arrays, jobs: ReplayJobs) -> None:
        """Take back what the loop did: after it, the object is the one the Python loop leaves."""
        ...


def why_python_for(component: object, role: str) -> str | None:
    """Why a compiled loop cannot run `component` (the replay's `role`: "predictor",
    "correction"), or None when it can (module doc)."""
    if "compiled_kind" not in vars(type(component)):
        return f"the {role} {getattr(component, 'name', type(component).__name__)} has no compiled form"
    return component.why_python()  # type: ignore[attr-defined]
