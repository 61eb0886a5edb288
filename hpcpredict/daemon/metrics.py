"""Counters and a latency histogram for the daemon, rendered in Prometheus' text format.

Kept by the thread that owns the service (the daemon's event loop), so plain integers suffice;
the HTTP thread asks that thread to render them.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

# Seconds; the plugin's budget is a few hundred milliseconds and the goal is p99 < 2 ms.
LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25, 1.0)


@dataclass
class Metrics:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (verb, ok|error code)
    _bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    _latency_sum_s: float = 0.0
    _latency_count: int = 0
    connections: int = 0
    # PREDICTs answered with the request because the model was not ready, by reason(s)
    fallbacks: Counter[str] = field(default_factory=Counter)

    def observe(self, verb: str, outcome: str, seconds: float) -> None:
        self.requests[(verb, outcome)] += 1
        self._bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self._latency_sum_s += seconds
        self._latency_count += 1

    def render(
        self,
        gauges: dict[str, tuple[str, float]],
        counters: dict[str, tuple[str, float]] | None = None,
    ) -> str:
        """Prometheus exposition text; `gauges` and `counters` map a name to (help, value)."""
        lines = [
            "# HELP hpcpredict_requests_total Requests answered, by verb and outcome.",
            "# TYPE hpcpredict_requests_total counter",
        ]
        for (verb, outcome), count in sorted(self.requests.items()):
            lines.append(f'hpcpredict_requests_total{{verb="{verb}",outcome="{outcome}"}} {count}')
        lines += [
            "# HELP hpcpredict_request_seconds Time to answer a request, parsing included.",
            "# TYPE hpcpredict_request_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip(LATENCY_BUCKETS_S, self._bucket_counts):
            cumulative += count
            lines.append(f'hpcpredict_request_seconds_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'hpcpredict_request_seconds_bucket{{le="+Inf"}} {self._latency_count}')
        lines.append(f"hpcpredict_request_seconds_sum {self._latency_sum_s!r}")
        lines.append(f"hpcpredict_request_seconds_count {self._latency_count}")
        lines += [
            "# HELP hpcpredict_connections_total Socket connections accepted.",
            "# TYPE hpcpredict_connections_total counter",
            f"hpcpredict_connections_total {self.connections}",
            "# HELP hpcpredict_fallback_predictions_total PREDICTs answered with the user's request "
            "because the model was not ready, by reason.",
            "# TYPE hpcpredict_fallback_predictions_total counter",
        ]
        for reason, count in sorted(self.fallbacks.items()):
            lines.append(f'hpcpredict_fallback_predictions_total{{reason="{reason}"}} {count}')
        for name, (help_text, value) in (counters or {}).items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value!r}"]
        for name, (help_text, value) in gauges.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value!r}"]
        return "\n".join(lines) + "\n"
