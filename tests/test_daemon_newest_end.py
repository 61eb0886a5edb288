"""`NewestEnd` (staleness.py) keeps the history's newest end event by event; it must always equal
`newest_learned_end_s`, the scan of every user it replaces, whatever order the ends come in.
And the event payload's request without `dataclasses.asdict` is still `asdict`'s dict."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.daemon.core.events import request_to_json
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.staleness import NewestEnd, newest_learned_end_s
from hpcpredict.daemon.core.store import Store
from hpcpredict.learn.features import FeatureState
from hpcpredict.jobs import JobRequest

T0 = 1_700_000_000

# (user, end offset, undo?): ends in any order, a user's end going back in time included
end_ops = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 50), st.booleans()), min_size=1, max_size=40
)


@given(end_ops)
def test_newest_end_equals_the_scan_after_every_end_and_undo(ops: list[tuple[int, int, bool]]) -> None:
    features = FeatureState()
    newest = NewestEnd(features)
    assert newest.end_s is None
    for job_id, (user_id, offset_s, undo) in enumerate(ops):
        request = JobRequest(job_id=job_id, submit_s=T0, procs=1, requested_s=3600, user_id=user_id)
        saved_user = features.save_user(user_id)
        saved = newest.saved()
        features.job_ended(request, 60, T0 + offset_s)
        newest.user_ended(user_id)
        assert newest.end_s == newest_learned_end_s(features)
        if undo:  # what a failed transaction's undo does (PredictionService._ingest)
            features.restore_user(user_id, saved_user)
            newest.restore(saved)
            assert newest.end_s == newest_learned_end_s(features)


# (kind, job): submit, start, end of a few jobs of a few users, in any order and repeated
service_events = st.lists(
    st.tuples(st.sampled_from(["submitted", "started", "ended"]), st.integers(1, 8), st.integers(0, 5000)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=25, deadline=None)
@given(service_events)
def test_the_service_history_age_equals_the_scan(events: list[tuple[str, int, int]]) -> None:
    service = PredictionService.open(Store("sqlite://"), min_trained_jobs=0)
    for kind, job_id, at_s in events:
        request = JobRequest(job_id=job_id, submit_s=T0, procs=2, requested_s=3600, user_id=job_id % 3)
        if kind == "submitted":
            service.submitted(request, T0)
        elif kind == "started":
            service.started(job_id, T0 + at_s, request=request)
        else:
            service.ended(job_id, at_s, T0 + at_s, "COMPLETED", request=request)
        expected = newest_learned_end_s(service._predictor.features)
        assert service.history_age(T0 + 10_000).newest_end_s == expected
    service.store.close()


@given(st.builds(JobRequest, *(st.integers(-(2**63), 2**63 - 1) for _ in range(9))))
def test_request_to_json_is_asdict(request: JobRequest) -> None:
    assert request_to_json(request) == dataclasses.asdict(request)
