"""Counters and latency histograms for the daemon, exposed through prometheus_client.

The counts are plain integers bumped by the thread that owns the service (the daemon's event
loop): a PREDICT pays two dict look-ups and a bisect, no lock. Latency is kept per verb: a
PREDICT is answered from memory in tens of microseconds, an event after its commit in a
millisecond or more, and the plugin's budget (p99 < 2 ms) is PREDICT's alone, which one
histogram of every verb would hide. A scrape takes a `snapshot` on
the loop, then renders it elsewhere with prometheus_client's families and encoder (text format
0.0.4 by default, OpenMetrics when the scraper asks for it), into a registry made for that one
scrape: no registry at import, nothing global.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

# Seconds; the plugin's budget is a few hundred milliseconds and the goal is p99 < 2 ms.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0)


@dataclass
class Latency:
    """One verb's histogram: `counts[i]` requests took at most LATENCY_BUCKETS_S[i] (and more than
    the bound before), the last entry those above every bound."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    sum_s: float = 0.0

    def copy(self) -> Latency:
        return Latency(list(self.counts), self.sum_s)


@dataclass
class ServiceCounters:
    """What the daemon counts for /metrics (named apart from the simulator's `sim.metrics.Metrics`)."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (verb, ok|error code)
    # verb -> its latency (the verbs are the protocol's few and "?" for a line refused unparsed)
    latency: dict[str, Latency] = field(default_factory=dict)
    connections: int = 0
    answered_at_accept: int = 0  # connections whose one PING/PREDICT was answered as accepted
    shed_connections: int = 0  # idle held connections closed to make room (open_files.py)
    # PREDICTs answered with the request because the model was not ready, by reason(s)
    fallbacks: Counter[str] = field(default_factory=Counter)
    # The admin API's answers, by endpoint (route name, never the raw path) and status code
    http_requests: Counter[tuple[str, int]] = field(default_factory=Counter)

    def observe(self, verb: str, outcome: str, seconds: float) -> None:
        self.requests[(verb, outcome)] += 1
        latency = self.latency.get(verb)
        if latency is None:
            latency = self.latency[verb] = Latency()
        latency.counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        latency.sum_s += seconds

    def snapshot(self) -> ServiceCounters:
        """A copy the loop no longer writes to, for rendering on another thread."""
        return dataclasses.replace(
            self,
            requests=Counter(self.requests),
            latency={verb: latency.copy() for verb, latency in self.latency.items()},
            fallbacks=Counter(self.fallbacks),
            http_requests=Counter(self.http_requests),
        )

    def render(
        self,
        gauges: dict[str, tuple[str, float]],
        counters: dict[str, tuple[str, float]] | None = None,
        *,
        accept: str = "",
        process_id: int | None = None,
    ) -> tuple[bytes, str]:
        """(exposition body, its Content-Type) for a scraper sending ``Accept: accept``.

        `gauges` and `counters` map a full metric name to (help, value); with `process_id`,
        prometheus_client's process metrics of that process (CPU, memory, open file descriptors,
        from /proc: the daemon's, even when rendered by its read worker).
        """
        from prometheus_client import CollectorRegistry, ProcessCollector  # only for a scrape
        from prometheus_client.exposition import choose_encoder

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(list(self._families(gauges, counters or {}))))
        if process_id is not None:
            ProcessCollector(pid=lambda: process_id, registry=registry)
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type

    def _families(
        self, gauges: dict[str, tuple[str, float]], counters: dict[str, tuple[str, float]]
    ) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        requests = CounterMetricFamily(
            "hpcpredict_requests", "Requests answered, by verb and outcome.", labels=["verb", "outcome"]
        )
        for (verb, outcome), count in sorted(self.requests.items()):
            requests.add_metric([verb, outcome], count)
        yield requests
        histogram = HistogramMetricFamily(
            "hpcpredict_request_seconds",
            "Time to answer a request, by verb: from its line read to its answer (an event's "
            "includes its commit), parsing included.",
            labels=["verb"],
        )
        for verb, latency in sorted(self.latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(LATENCY_BUCKETS_S, latency.counts):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", cumulative + latency.counts[-1]))
            histogram.add_metric([verb], buckets, sum_value=latency.sum_s)
        yield histogram
        yield CounterMetricFamily("hpcpredict_connections", "Socket connections accepted.", value=self.connections)
        yield CounterMetricFamily(
            "hpcpredict_connections_answered_at_accept",
            "Socket connections whose one PING or PREDICT had arrived with the client's half-close "
            "when accepted, answered there without a transport (the plugin's pattern).",
            value=self.answered_at_accept,
        )
        yield CounterMetricFamily(
            "hpcpredict_connections_shed",
            "Idle socket connections closed to make room: too many were held open for the "
            "open-files limit, or accept() found no descriptor left.",
            value=self.shed_connections,
        )
        fallbacks = CounterMetricFamily(
            "hpcpredict_fallback_predictions",
            "PREDICTs answered with the user's request because the model was not ready, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(self.fallbacks.items()):
            fallbacks.add_metric([reason], count)
        yield fallbacks
        http = CounterMetricFamily(
            "hpcpredict_http_requests",
            "Admin API answers, by endpoint and HTTP status (503: over the concurrency limits).",
            labels=["endpoint", "status"],
        )
        for (endpoint, status), count in sorted(self.http_requests.items()):
            http.add_metric([endpoint, str(status)], count)
        yield http
        for name, (help_text, value) in counters.items():
            yield CounterMetricFamily(name, help_text, value=value)
        for name, (help_text, value) in gauges.items():
            yield GaugeMetricFamily(name, help_text, value=value)


class _Families:
    """A collector of families built beforehand (the scrape's snapshot)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families
