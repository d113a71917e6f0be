"""A `prometheus_client` collector for a guard's metrics.

The counts live in the Rust core: `Guard.metrics()` returns the same families the gateway's
`GET /metrics` serves (admissions, refusals by reason and limit type, fitted calls, tokens
and cost billed, open holds, admission latency, store errors, uncounted calls, ...), and
this collector hands them to `prometheus_client` at each scrape:

    from prometheus_client import start_http_server
    from usage_guard.prometheus import register

    register(guard)          # on prometheus_client's default registry
    start_http_server(9100)

It needs `prometheus_client` (`pip install prometheus-client`); importing this module
without it raises ImportError saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

try:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ImportError as e:  # pragma: no cover - exercised only without prometheus_client
    raise ImportError(
        "usage_guard.prometheus needs prometheus_client: pip install prometheus-client"
    ) from e

from ._core import Guard
from .types import MetricFamily

__all__ = ["GuardCollector", "register"]


class GuardCollector(Collector):
    """Collects `guard.metrics()` at each scrape. Clones of a guard share its counts, so
    one collector per guard object is enough; two guards in one registry would repeat the
    same names (prometheus_client refuses that): register one of them."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard

    def collect(self) -> Iterator[Metric]:
        """One metric family per family of `guard.metrics()`, with its samples."""
        for name, family in self._guard.metrics().items():
            yield _family(name, family)


def _family(name: str, family: MetricFamily) -> Metric:
    """`family` as prometheus_client's family of its type."""
    samples, help_text = family["samples"], family["help"]
    if family["type"] == "histogram":
        buckets = [(labels["le"], value) for s, labels, value in samples if s.endswith("_bucket")]
        total = sum(value for s, _, value in samples if s.endswith("_sum"))
        return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=total)
    names = list(samples[0][1]) if samples else []
    metric: CounterMetricFamily | GaugeMetricFamily
    if family["type"] == "counter":
        metric = CounterMetricFamily(name, help_text, labels=names)
    else:
        metric = GaugeMetricFamily(name, help_text, labels=names)
    for _, labels, value in samples:
        metric.add_metric([labels[k] for k in names], value)
    return metric


def register(guard: Guard, registry: Optional[CollectorRegistry] = None) -> GuardCollector:
    """Registers a `GuardCollector` for `guard` on `registry` (prometheus_client's default
    registry when omitted) and returns it (`registry.unregister(collector)` removes it)."""
    collector = GuardCollector(guard)
    (REGISTRY if registry is None else registry).register(collector)
    return collector
