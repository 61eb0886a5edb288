"""The daemon's counters as Prometheus renders them (`hpcpredict.daemon.views.metrics`)."""

from __future__ import annotations

import pytest
from testbed.daemon_thread import metric_sample

from hpcpredict.daemon.views.metrics import LATENCY_BUCKETS_S, ServiceCounters


def rendered(counters: ServiceCounters) -> str:
    return counters.render({})[0].decode()


def test_latency_is_a_histogram_per_verb() -> None:
    """A PREDICT answered in 50 µs and events answered after their commits in 3 ms: PREDICT's
    p99 is read off its own buckets, not off a mix with the events'."""
    counters = ServiceCounters()
    for _ in range(99):
        counters.observe("PREDICT", "ok", 0.00005)
    counters.observe("PREDICT", "ok", 0.0015)
    for _ in range(50):
        counters.observe("END", "ok", 0.003)
    text = rendered(counters)
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="PREDICT", le="0.0001") == 99
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="PREDICT", le="0.002") == 100
    assert metric_sample(text, "hpcpredict_request_seconds_count", verb="PREDICT") == 100
    assert metric_sample(text, "hpcpredict_request_seconds_sum", verb="PREDICT") == pytest.approx(99 * 0.00005 + 0.0015)
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="END", le="0.002") == 0
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="END", le="0.005") == 50
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="END", le="+Inf") == 50


def test_a_latency_above_every_bucket_counts_only_in_inf() -> None:
    counters = ServiceCounters()
    counters.observe("SUBMIT", "ok", 2 * LATENCY_BUCKETS_S[-1])
    text = rendered(counters)
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="SUBMIT", le=repr(LATENCY_BUCKETS_S[-1])) == 0
    assert metric_sample(text, "hpcpredict_request_seconds_bucket", verb="SUBMIT", le="+Inf") == 1


def test_a_snapshot_is_not_written_by_later_requests() -> None:
    counters = ServiceCounters()
    counters.observe("PREDICT", "ok", 0.0001)
    snapshot = counters.snapshot()
    counters.observe("PREDICT", "ok", 0.0001)
    counters.observe("PING", "ok", 0.0001)
    text = rendered(snapshot)
    assert metric_sample(text, "hpcpredict_request_seconds_count", verb="PREDICT") == 1
    assert 'verb="PING"' not in text
    assert metric_sample(rendered(counters), "hpcpredict_request_seconds_count", verb="PREDICT") == 2
