"""Histories keyed by the user and a field of the job (`--history-by`, issue 54): one rule for the
learner's Python calls, both compiled replays, the daemon and the SLURM side.

The bundled KTH-SP2 sample carries real groups and requests (no queue or partition); the SLURM
fields are the plugin's and the watcher's own parsers on one job.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcpredict.corrections.policies import IncrementalCorrection
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.daemon.views.explain import explain_job
from hpcpredict.daemon.fronts.protocol import job_request as predict_request
from hpcpredict.history_keys import HISTORY_KEYS, history_key, history_keys
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.features import FeatureContext
from hpcpredict.learn.predictor import HyperparameterMismatchError, LearnedPredictor
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.logs.workload import load_workload
from hpcpredict.sim.easy.schedulers import SCHEDULERS
from hpcpredict.sim.easy.simulation import simulate
from hpcpredict.sim.runner import feature_context
from hpcpredict.sim.slurm_model.slurm_backfill import SlurmBackfill, simulate_slurm
from hpcpredict.sim.slurm_model.slurm_params import SlurmParams
from hpcpredict.slurm.adapter import SlurmJob
from hpcpredict.slurm.requests import job_request as watched_request
from test_daemon_service import assert_same_state, sample_events, send

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
ids = st.integers(min_value=-1, max_value=2**31 - 1)


@given(st.lists(st.tuples(ids, ids, ids, ids, ids, st.integers(1, 2**31 - 1)), min_size=1, max_size=30),
       st.sampled_from(sorted(HISTORY_KEYS)))
def test_one_job_and_a_whole_log_are_keyed_alike_and_kinds_never_merge(fields, history_by: str) -> None:
    requests = [JobRequest(job_id=i, submit_s=0, procs=1, requested_s=request, user_id=max(user, 0),
                           group_id=group, executable_id=executable, queue_id=queue, partition_id=partition)
                for i, (user, group, executable, queue, partition, request) in enumerate(fields)]
    name = HISTORY_KEYS[history_by]
    attribute = None if name is None else np.array([getattr(r, name) for r in requests])
    keys = history_keys(history_by, np.array([r.user_id for r in requests]), attribute)
    assert keys.tolist() == [history_key(r, history_by) for r in requests]
    kinds = {(r.user_id, None if name is None else getattr(r, name)) for r in requests}
    assert len(set(keys.tolist())) == len(kinds)  # one key per (user, field), and no two share one
    if name is None:
        assert keys.tolist() == [r.user_id for r in requests]


@pytest.fixture(scope="module")
def sample():
    return load_workload(SAMPLE)


@pytest.mark.parametrize("history_by", ["user+group", "user+request"])
def test_both_loops_of_both_models_replay_a_keyed_learner_alike(sample, history_by: str) -> None:
    def learner() -> LearnedPredictor:
        return LearnedPredictor.from_settings(LearnerSettings(history_by=history_by), feature_context(sample))

    schedules = {}
    for compiled in (True, False):
        easy = simulate(sample.jobs, sample.machine_procs, SCHEDULERS["easy-sjbf"], learner(),
                        IncrementalCorrection(), compiled=compiled)
        slurm = simulate_slurm(sample.jobs, sample.machine_procs, SlurmBackfill(SlurmParams()), learner(),
                               IncrementalCorrection(), compiled=compiled)
        assert (easy.loop, slurm.loop) == (("compiled",) * 2 if compiled else ("python",) * 2)
        schedules[compiled] = (easy.start_s, easy.initial_prediction_s, slurm.start_s, slurm.initial_prediction_s)
    assert schedules[True] == schedules[False]
    plain = simulate(sample.jobs, sample.machine_procs, SCHEDULERS["easy-sjbf"],
                     LearnedPredictor.from_settings(LearnerSettings(), feature_context(sample)), IncrementalCorrection())
    assert plain.initial_prediction_s != schedules[True][1]  # the option changes the predictions


def test_a_keyed_learner_keeps_a_history_per_kind_and_its_checkpoint_says_so(sample) -> None:
    learner = LearnedPredictor(history_by="user+request")
    for job in sample.jobs[:400]:
        learner.predict(job.request, job.submit_s)
        learner.job_started(job.request, job.submit_s)
        learner.job_ended(job.request, job.run_s, job.submit_s + job.run_s)
    kinds = {(job.user_id, job.requested_s) for job in sample.jobs[:400]}
    assert len(learner.features.users) == len(kinds) > len({job.user_id for job in sample.jobs[:400]})
    restored = LearnedPredictor.from_state(learner.state_dict())
    assert restored.history_by == "user+request"
    assert_same_state(restored.state_dict(), learner.state_dict())
    later = sample.jobs[400]
    assert restored.predict(later.request, later.submit_s) == learner.predict(later.request, later.submit_s)
    with pytest.raises(HyperparameterMismatchError, match="history_by"):
        LearnedPredictor().load_state_dict(learner.state_dict())


def test_the_daemon_restarts_a_keyed_learner_bit_for_bit(tmp_path: Path) -> None:
    """The daemon's restore (checkpoint, then the logged events applied again) and its undo of a
    failed event (`savepoint`) key the histories as the learner does."""
    def keyed() -> LearnedPredictor:
        return LearnedPredictor(context=FeatureContext(0, "Europe/Stockholm"), history_by="user+request")

    events = sample_events(1200)
    whole_url, split_url = (f"sqlite:///{tmp_path / name}.db" for name in ("whole", "split"))
    store = Store(whole_url)
    service = PredictionService.open(store, keyed, checkpoint_every=100)
    whole = [send(service, event) for event in events]
    expected = service.state_dict()
    store.close()
    results = []
    for begin, end in ((0, 777), (777, len(events))):
        store = Store(split_url)
        service = PredictionService.open(store, keyed, checkpoint_every=100)
        results += [send(service, event) for event in events[begin:end]]
        del service  # a crash: no final checkpoint
        store.close()
    assert results == whole
    store = Store(split_url)
    assert_same_state(PredictionService.open(store, keyed, checkpoint_every=100).state_dict(), expected)
    store.close()
    assert str(expected["hyper/history_by"]) == "user+request"
    # why a job got its prediction: the history it was predicted from is its kind's
    ended = {}
    for _, _, job_id, kind, request, _ in events:
        if kind == "ended" and request is not None:
            ended.setdefault((request.user_id, request.requested_s), []).append(job_id)
    store = Store(whole_url)
    try:
        late = next(event for event in reversed(events) if event[3] == "submitted"
                    and len(ended.get((event[4].user_id, event[4].requested_s), [])) >= 3)
        why = explain_job(store, late[2], keyed)
    finally:
        store.close()
    assert why.history["completed_jobs"] >= 1


def test_the_plugins_predict_and_the_watchers_submit_key_a_slurm_job_alike() -> None:
    """PREDICT (the plugin's fields) predicts with the key the watcher's SUBMIT then learns under:
    the same job's group, name and partition give the same JobRequest fields."""
    asked = predict_request({"uid": "1000", "gid": "1000", "procs": "4", "time_limit": "3600",
                             "partition": "debug", "name": "lammps-run"}, job_id=42, now_s=100)
    seen = SlurmJob(job_id=42, user_name="u", uid=1000, gid=1000, state="PENDING", partition="debug",
                    name="lammps-run", cpus=4, nodes=1, submit_s=100, start_s=None, end_s=None,
                    time_limit_s=3600, admin_comment="")
    learned = watched_request(seen, None)
    for history_by in HISTORY_KEYS:
        assert history_key(asked, history_by) == history_key(learned, history_by), history_by
