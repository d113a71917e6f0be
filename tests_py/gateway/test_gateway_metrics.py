"""Metrics: one implementation in the Rust core, read three ways. `guard.metrics()` (data),
`guard.metrics_text()` and the gateway's `GET /metrics` (Prometheus text), and the
`prometheus_client` collector (`usage_guard.prometheus`) report the same counts: admissions,
refusals by reason and limit type, fitted calls, tokens and cost billed, open holds, the
admission latency, store errors, uncounted calls; the gateway adds requests and upstreams."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from provider_support import MODELS, cost_micros, policy
from test_gateway import BOB, MESSAGES, gateway_policy, oai
from usage_guard.prometheus import GuardCollector, register

# Every family the issue lists (15.6), by the name it has in the text.
CORE = [
    "usage_guard_admitted_total",
    "usage_guard_refused_total",
    "usage_guard_refusals_total",
    "usage_guard_fitted_total",
    "usage_guard_billed_input_tokens_total",
    "usage_guard_billed_output_tokens_total",
    "usage_guard_billed_cost_micros_total",
    "usage_guard_store_errors_total",
    "usage_guard_uncounted_total",
    "usage_guard_open_holds",
    "usage_guard_admission_seconds",
]
GATEWAY = [
    "usage_guard_gateway_requests_total",
    "usage_guard_gateway_admissions_total",
    "usage_guard_gateway_upstream_responses_total",
    "usage_guard_gateway_upstream_seconds",
]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text, parsed by prometheus_client's parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def from_data(guard: ug.Guard) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`guard.metrics()` flattened like `samples`."""
    return {
        (name, tuple(sorted(labels.items()))): value
        for family in guard.metrics().values()
        for name, labels, value in family["samples"]
    }


def value(guard: ug.Guard, sample: str, **labels: str) -> float:
    return from_data(guard)[(sample, tuple(sorted(labels.items())))]


def refusals(guard: ug.Guard) -> dict[tuple[str, str], float]:
    """`usage_guard_refusals_total` by (reason, limit_type)."""
    family = guard.metrics()["usage_guard_refusals"]
    return {(labels["reason"], labels["limit_type"]): v for _, labels, v in family["samples"]}


def library_guard(**kw: Any) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(policy(**kw)))


def test_the_library_counts_admissions_refusals_fits_bills_and_holds() -> None:
    guard = library_guard(tokens_a_day=400)
    prices = MODELS["gpt-4o"]["prices"]
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 1000}
    ticket = guard.admit("alice", "gpt-4o", request, provider="openai")
    assert value(guard, "usage_guard_fitted_total") == 1
    assert value(guard, "usage_guard_open_holds") == 1
    ticket.bill(input_tokens=21, output_tokens=12)
    assert value(guard, "usage_guard_open_holds") == 0
    assert value(guard, "usage_guard_billed_input_tokens_total") == 21
    assert value(guard, "usage_guard_billed_output_tokens_total") == 12
    assert value(guard, "usage_guard_billed_cost_micros_total") == cost_micros(prices, 21, 12)
    # a call that cannot fit what is left is refused, by reason and limit type
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("alice", "gpt-4o", prompt_tokens=500, max_tokens=10)
    assert refusals(guard) == {(e.value.reason, "direct"): 1}
    assert value(guard, "usage_guard_refused_total") == 1
    assert value(guard, "usage_guard_admitted_total") == 1
    # both admissions (the refused one too) are in the latency histogram, in a finite bucket
    assert value(guard, "usage_guard_admission_seconds_count") == 2
    assert value(guard, "usage_guard_admission_seconds_bucket", le="5") == 2
    assert 0 < value(guard, "usage_guard_admission_seconds_sum") < 5
    # a release and a dropped ticket close their holds too
    guard.admit("bob", "gpt-4o", prompt_tokens=10, max_tokens=10).release()
    dropped = guard.admit("bob", "gpt-4o", prompt_tokens=10, max_tokens=10)
    assert value(guard, "usage_guard_open_holds") == 1
    del dropped
    assert value(guard, "usage_guard_open_holds") == 0
    assert value(guard, "usage_guard_billed_input_tokens_total") == 21


def test_the_text_and_the_data_are_the_same_counts() -> None:
    guard = library_guard(tokens_a_day=10)
    guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=2).bill(1, 2)
    with pytest.raises(ug.UsageLimitError):
        guard.admit("alice", "gpt-4o", prompt_tokens=50, max_tokens=50)
    text = guard.metrics_text()
    assert samples(text) == from_data(guard)
    for name in CORE:
        assert f"# TYPE {name} " in text
    families = guard.metrics()
    assert families["usage_guard_admitted"]["type"] == "counter"
    assert families["usage_guard_open_holds"]["type"] == "gauge"
    assert families["usage_guard_admission_seconds"]["type"] == "histogram"


def test_the_prometheus_client_collector_reports_the_guard() -> None:
    guard = library_guard(tokens_a_day=10)
    registry = CollectorRegistry()
    collector = register(guard, registry)
    assert isinstance(collector, GuardCollector)
    guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=2).bill(1, 2)
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("alice", "gpt-4o", prompt_tokens=50, max_tokens=50)
    assert registry.get_sample_value("usage_guard_admitted_total") == 1
    labels = {"reason": e.value.reason, "limit_type": "direct"}
    assert registry.get_sample_value("usage_guard_refusals_total", labels) == 1
    assert registry.get_sample_value("usage_guard_admission_seconds_count") == 2
    # read at each scrape: a later bill shows in the next one
    guard.admit("bob", "gpt-4o", prompt_tokens=3, max_tokens=4).bill(3, 4)
    assert registry.get_sample_value("usage_guard_billed_input_tokens_total") == 4
    # what prometheus_client exposes is what the guard's own text says
    exposed = samples(generate_latest(registry).decode())
    assert exposed == samples(guard.metrics_text())
    registry.unregister(collector)
    assert registry.get_sample_value("usage_guard_admitted_total") is None


def test_the_gateway_serves_the_guard_metrics_and_its_own(fake: FakeProvider) -> None:
    guard = ug.Guard(ug.Policy.from_dict(gateway_policy(fake, tokens_a_day=400)))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        client = oai(gateway)
        # fitted: 1000 is more than the 400 a day leaves
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=1000)
        list(
            client.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, max_tokens=50, stream=True
            )
        )
        # a library call on the same guard counts in the same place: bob's day is used up
        guard.admit("bob", "gpt-4o", prompt_tokens=5, max_tokens=5).bill(5, 395)
        with pytest.raises(openai.RateLimitError):
            oai(gateway, key=BOB).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        response = httpx.get(f"{gateway.url}/metrics")
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        served = samples(response.text)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    for name in CORE + GATEWAY:
        assert f"# TYPE {name} " in response.text
    # every count of the guard, exactly as guard.metrics() has it (nothing ran since)
    core = from_data(guard)
    assert {k: v for k, v in served.items() if k in core} == core
    assert value(guard, "usage_guard_admitted_total") == 3
    assert value(guard, "usage_guard_fitted_total") == 1
    assert value(guard, "usage_guard_billed_input_tokens_total") == 21 + 21 + 5
    assert value(guard, "usage_guard_billed_output_tokens_total") == 12 + 12 + 395
    assert value(guard, "usage_guard_open_holds") == 0
    assert list(refusals(guard).values()) == [1]
    assert [t for _, t in refusals(guard)] == ["direct"]
    endpoint = "/v1/chat/completions"
    requests = "usage_guard_gateway_requests_total"
    assert served[(requests, (("endpoint", endpoint), ("status", "200")))] == 2
    assert served[(requests, (("endpoint", endpoint), ("status", "429")))] == 1
    admissions = ("usage_guard_gateway_admissions_total", (("endpoint", endpoint),))
    assert served[admissions] == 2
    upstream = (
        "usage_guard_gateway_upstream_responses_total",
        (("provider", "openai"), ("status", "200")),
    )
    assert served[upstream] == 2
    assert served[("usage_guard_gateway_upstream_seconds_count", ())] == 2
    assert gateway_text_matches(gateway, served)


def gateway_text_matches(gateway: ug.Gateway, served: dict[Any, float]) -> bool:
    """`Gateway.metrics()` is the text `GET /metrics` answers."""
    return samples(gateway.metrics()) == served
