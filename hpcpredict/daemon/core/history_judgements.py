"""What `hpcpredict train` learns about its own errors on the history it replays.

The replay predicts every job at its submission, before the job's end teaches the model, which is
exactly the judgement the daemon makes live: so the errors of day one need not wait for live
jobs. `JudgingPredictor` wraps the predictor the replay feeds, keeps each first prediction with
what AVE2 would have said at the same moment, and `save` stores the ended jobs in
``history_judgements`` (replacing an earlier train's), apart from the live judgements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import delete

from hpcpredict.daemon.core.store import HistoryJudgementRow, Store
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.baselines import Ave2Predictor, Predictor


@dataclass
class JudgingPredictor:
    """A predictor that records its first prediction of each job, and AVE2's, as it goes."""

    inner: Predictor
    ave2: Ave2Predictor = field(default_factory=Ave2Predictor)
    _first: dict[int, tuple[int, int]] = field(default_factory=dict)  # job id -> (ours, AVE2)
    rows: list[HistoryJudgementRow] = field(default_factory=list)

    def predict(self, request: JobRequest, now_s: int) -> int:
        predicted_s = self.inner.predict(request, now_s)
        if request.job_id not in self._first:
            self._first[request.job_id] = (predicted_s, self.ave2.predict(request, now_s))
        return predicted_s

    def job_started(self, request: JobRequest, now_s: int) -> None:
        self.inner.job_started(request, now_s)
        self.ave2.job_started(request, now_s)

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        first = self._first.pop(request.job_id, None)
        if first is not None and run_s > 0:  # the live rule: jobs with a runtime are judged
            self.rows.append(HistoryJudgementRow(
                job_id=request.job_id, user_id=request.user_id, end_s=end_s, predicted_s=first[0],
                run_s=run_s, requested_s=request.requested_s, ave2_s=first[1],
            ))
        self.inner.job_ended(request, run_s, end_s)
        self.ave2.job_ended(request, run_s, end_s)

    def save(self, store: Store) -> int:
        """Replace the stored history judgements with this replay's; returns how many."""
        with store.session() as session, session.begin():
            session.execute(delete(HistoryJudgementRow))
            session.add_all(self.rows)
        return len(self.rows)
