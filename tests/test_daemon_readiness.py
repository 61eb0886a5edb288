"""Readiness (hpcpredict/daemon/core/readiness.py): a model that has learned too little, or whose
history is too old, answers every PREDICT with the request and says so everywhere."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from testbed.daemon_thread import Running, write_token_file
from hpcpredict.cli import main
from hpcpredict.daemon.fronts.client import parse_answer
from hpcpredict.daemon.core.config import ConfigError, DaemonConfig, load_config
from hpcpredict.daemon.fronts.handlers import Handlers
from hpcpredict.daemon.core.readiness import DEFAULT_MIN_TRAINED_JOBS, FallbackReason, assess
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.staleness import STALE_AFTER_S, age_at
from hpcpredict.daemon.core.store import Store
from hpcpredict.learn.features import N_FEATURES
from hpcpredict.learn.polynomial import QuadraticExpansion

NOW_S = 1_800_000_000  # the handlers' clock in these tests (2027)
DAY_S = 86_400


def ask(handlers: Handlers, line: str) -> dict[str, str]:
    return parse_answer(handlers.handle_line(line.encode()))


def learn_jobs(handlers: Handlers, count: int, *, end_s: int, user: int = 7, first_id: int = 1) -> None:
    """`count` jobs of `user` running 600 s of 3,600 requested, the last ending at `end_s`."""
    for k in range(count):
        job_id = first_id + k
        end = end_s - (count - 1 - k) * 1_000
        ask(handlers, f"SUBMIT job={job_id} uid={user} procs=4 time_limit=3600 submit={end - 700}")
        ask(handlers, f"START job={job_id} start={end - 600}")
        assert ask(handlers, f"END job={job_id} start={end - 600} end={end}")["learned"] == "1"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield store
    store.close()


def handlers_on(store: Store, min_trained_jobs: int = DEFAULT_MIN_TRAINED_JOBS) -> Handlers:
    service = PredictionService.open(store, min_trained_jobs=min_trained_jobs)
    return Handlers(service, clock=lambda: NOW_S)


# ---------------------------------------------------------------------------- the rule
def test_the_default_floor_is_one_learned_job_per_weight_of_the_model() -> None:
    assert DEFAULT_MIN_TRAINED_JOBS == QuadraticExpansion(N_FEATURES).n_terms == 231
    assert DaemonConfig().min_trained_jobs == DEFAULT_MIN_TRAINED_JOBS


@pytest.mark.parametrize(
    ("trained", "minimum", "newest_end_s", "reasons"),
    [
        (0, 231, None, ("untrained",)),  # nothing learned: untrained, not also "stale"
        (230, 231, NOW_S - DAY_S, ("untrained",)),
        (231, 231, NOW_S - DAY_S, ()),
        (5_000, 231, NOW_S - 31 * DAY_S, ("stale",)),
        (3, 231, NOW_S - 400 * DAY_S, ("untrained", "stale")),
        (0, 0, None, ()),  # the floor off: the operator acts on an untrained model
    ],
)
def test_reasons(trained: int, minimum: int, newest_end_s: int | None, reasons: tuple[str, ...]) -> None:
    readiness = assess(trained_jobs=trained, min_trained_jobs=minimum, history=age_at(newest_end_s, NOW_S))
    assert readiness.reasons == tuple(FallbackReason(r) for r in reasons)
    assert readiness.ready == (not reasons) and readiness.reason_text == ",".join(reasons)
    assert ("not ready" in readiness.describe()) == bool(reasons)


# ---------------------------------------------------------------------------- the protocol
def test_an_untrained_model_answers_the_request_and_says_so(store: Store) -> None:
    handlers = handlers_on(store)
    answer = ask(handlers, "PREDICT uid=7 procs=4 time_limit=7200")
    # an untrained model predicts 1 s: in lower mode every limit would drop to one minute
    assert answer.pop("token")  # the features are kept all the same (docs/protocol.md)
    assert answer == {"prediction": "7200", "time_limit": "7200", "ready": "0", "reason": "untrained"}
    ping = ask(handlers, "PING")
    assert (ping["ready"], ping["reason"], ping["trained_jobs"], ping["min_trained_jobs"]) == ("0", "untrained", "0", "231")
    assert handlers.metrics.fallbacks == {"untrained": 1}


def test_the_model_answers_once_it_has_learned_enough(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hpcpredict.daemon.core.service")
    handlers = handlers_on(store, min_trained_jobs=3)
    assert ask(handlers, "PING")["ready"] == "0"
    learn_jobs(handlers, 2, end_s=NOW_S - 3_600)
    assert ask(handlers, "PREDICT uid=7 procs=4 time_limit=3600")["prediction"] == "3600"
    learn_jobs(handlers, 1, end_s=NOW_S - 60, first_id=10)
    answer = ask(handlers, "PREDICT uid=7 procs=4 time_limit=3600")
    assert answer["ready"] == "1" and "reason" not in answer
    assert int(answer["prediction"]) < 3600  # the model's own prediction
    ping = ask(handlers, "PING")
    assert (ping["ready"], ping["trained_jobs"]) == ("1", "3") and "reason" not in ping
    messages = [record.getMessage() for record in caplog.records]
    # said once when it was found not ready, once when it became ready; not at every request
    assert sum(m.startswith("not ready") for m in messages) == 1
    assert sum(m.startswith("ready: the model has learned 3 jobs") for m in messages) == 1


def test_a_stale_history_answers_the_request_even_for_a_user_never_seen(store: Store) -> None:
    """The stale fallback was the model's cap on known users only: a new user got 7 s."""
    handlers = handlers_on(store, min_trained_jobs=3)
    learn_jobs(handlers, 5, end_s=NOW_S - STALE_AFTER_S - DAY_S)
    for uid in (7, 4242):  # the user it learned, and one it never saw
        answer = ask(handlers, f"PREDICT uid={uid} procs=4 time_limit=3600")
        assert answer.pop("token")
        assert answer == {"prediction": "3600", "time_limit": "3600", "ready": "0", "reason": "stale"}
    assert ask(handlers, "PING")["stale"] == "1"
    # a recent job learned: fresh again
    learn_jobs(handlers, 1, end_s=NOW_S - 60, first_id=100)
    assert ask(handlers, "PREDICT uid=4242 procs=4 time_limit=3600")["ready"] == "1"


def test_the_1996_sample_trained_today_answers_requests(sample_log: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'old.db'}"
    assert CliRunner().invoke(main, ["train", str(sample_log), "--db", db]).exit_code == 0
    store = Store(db)
    try:
        handlers = Handlers(PredictionService.open(store), clock=time.time)
        answer = ask(handlers, "PREDICT uid=999999 procs=8 time_limit=3600")  # a user it never saw
        assert (answer["prediction"], answer["ready"], answer["reason"]) == ("3600", "0", "stale")
        assert ask(handlers, "PING")["trained_jobs"] == "4997"
    finally:
        store.close()


# ---------------------------------------------------------------------------- configuration
def test_min_trained_jobs_in_the_config_file_and_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text("[daemon]\nmin_trained_jobs = 50\n")
    assert load_config(path).min_trained_jobs == 50
    for bad in ("-1", '"many"', "true"):
        path.write_text(f"[daemon]\nmin_trained_jobs = {bad}\n")
        with pytest.raises(ConfigError, match="min_trained_jobs"):
            load_config(path)
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert "--min-trained-jobs" in result.output
    result = CliRunner().invoke(main, ["serve", "--min-trained-jobs", "-3"])
    assert result.exit_code == 2


# ---------------------------------------------------------------------------- the daemon
def get(running: Running, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(running.url + path, timeout=10) as response:
        return response.status, response.read()


def test_health_metrics_and_the_start_log_say_not_ready(
    short_dir: Path, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = DaemonConfig(db=store_url, socket=str(short_dir / "d.sock"), http="127.0.0.1:0",
                          http_token_file=write_token_file(short_dir), spool=str(short_dir / "s.spool"))
    running = Running(config)
    try:
        assert any(r.getMessage().startswith("not ready, every PREDICT answers the user's request (untrained")
                   for r in caplog.records)
        status, body = get(running, "/health")
        health = json.loads(body)
        assert status == 200 and health["status"] == "not_ready" and health["ready"] is False
        assert health["reasons"] == ["untrained"] and "fewer than min_trained_jobs = 231" in health["readiness"]
        with running.client() as client:
            assert client.request("PREDICT", uid=3, procs=1, time_limit=600)["prediction"] == "600"
        posted = urllib.request.Request(running.url + "/predict",
                                        data=json.dumps({"uid": 3, "procs": 1, "time_limit": 600}).encode(),
                                        headers={"Authorization": f"Bearer {running.token}"})
        with urllib.request.urlopen(posted, timeout=10) as response:
            assert json.load(response) == {"prediction_s": 600, "time_limit_s": 600, "ready": False,
                                           "reason": "untrained"}
        status, text = get(running, "/metrics")
        metrics = text.decode()
        assert "hpcpredict_ready 0" in metrics and "hpcpredict_min_trained_jobs 231" in metrics
        assert 'hpcpredict_fallback_predictions_total{reason="untrained"} 2' in metrics
    finally:
        running.stop()
    ready = Running(replace(config, min_trained_jobs=0))  # the floor off: ready from the start
    try:
        health = json.loads(get(ready, "/health")[1])
        assert health["status"] == "ok" and health["ready"] is True and health["reasons"] == []
        assert "hpcpredict_ready 1" in get(ready, "/metrics")[1].decode()
    finally:
        ready.stop()
