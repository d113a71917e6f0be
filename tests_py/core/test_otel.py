"""usage_guard.otel with the OpenTelemetry SDK's in-memory exporters: a span per admission and
bill, child of the caller's span; the GenAI token histogram, admissions by outcome, and the
core's own counts observed — through a real guarded OpenAI client against the fake provider."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from doc_blocks import run_by
from fake_provider import FakeProvider

pytest.importorskip("opentelemetry.sdk")  # Python 3.10 and later

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provider_support import policy
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI
from usage_guard.otel import instrument

MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def otel() -> Any:
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    return MeterProvider(metric_readers=[reader]), tracer_provider, reader, spans


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point collected now, by instrument name."""
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_spans_are_children_of_the_callers_span(
    fake: FakeProvider, make_guard: Any, otel: Any
) -> None:
    meters, tracers, reader, spans = otel
    guard = instrument(make_guard(policy()), meter_provider=meters, tracer_provider=tracers)
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k"), guard, user="alice"
    )
    with tracers.get_tracer("app").start_as_current_span("handle request") as parent:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    by_name = {s.name: s for s in spans.get_finished_spans()}
    admit, bill = by_name["usage_guard.admit"], by_name["usage_guard.bill"]
    for span in (admit, bill):
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert span.attributes["gen_ai.request.model"] == "gpt-4o"
        assert span.attributes["gen_ai.provider.name"] == "openai"
    assert admit.attributes["usage_guard.source.type"] == "direct"
    assert admit.attributes["usage_guard.source.id"] == "alice"
    assert admit.attributes["usage_guard.reserved.tokens"] > 0
    assert bill.attributes["gen_ai.usage.input_tokens"] == 21
    assert bill.attributes["gen_ai.usage.output_tokens"] == 12


def test_metrics_tokens_admissions_and_core_counts(
    fake: FakeProvider, make_guard: Any, otel: Any
) -> None:
    meters, tracers, reader, spans = otel
    guard = instrument(
        make_guard(policy(tokens_a_day=100)), meter_provider=meters, tracer_provider=tracers
    )
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k"), guard, user="alice"
    )
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
    guard.admit("alice", "gpt-4o", prompt_tokens=60, max_tokens=0).bill(60, 0)
    with pytest.raises(ug.UsageLimitError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
    got = points(reader)
    usage = {
        p.attributes["gen_ai.token.type"]: p
        for p in got["gen_ai.client.token.usage"]
        if p.attributes.get("gen_ai.provider.name") == "openai"  # not the direct admit's
    }
    assert usage["input"].sum == 21 and usage["output"].sum == 12
    assert usage["output"].attributes["gen_ai.request.model"] == "gpt-4o"
    outcomes: dict[str, int] = {}
    for p in got["usage_guard.admissions"]:
        outcomes[p.attributes["outcome"]] = outcomes.get(p.attributes["outcome"], 0) + p.value
    assert outcomes == {"admitted": 2, "refused": 1}
    refused = [p for p in got["usage_guard.refusals"] if p.value]
    assert refused and refused[0].attributes["reason"]
    assert [p.value for p in got["usage_guard.billed_output_tokens"]] == [12]
    assert [p.value for p in got["usage_guard.open_holds"]] == [0]
    assert got["usage_guard.billed.cost"][0].value > 0
    refusal = [s for s in spans.get_finished_spans() if s.status.status_code.name == "ERROR"]
    assert refusal and refusal[0].attributes["usage_guard.refused.limit_type"] == "direct"
    assert refusal[0].attributes["usage_guard.refused.metric"] == "tokens"


async def test_async_spans_and_bill(fake: FakeProvider, make_guard: Any, otel: Any) -> None:
    meters, tracers, reader, spans = otel
    guard = instrument(make_guard(policy()), meter_provider=meters, tracer_provider=tracers)
    client = GuardedAsyncOpenAI(
        openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="k"), guard, user="bob"
    )
    with tracers.get_tracer("app").start_as_current_span("job") as parent:
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    names = sorted(s.name for s in spans.get_finished_spans())
    assert names == ["job", "usage_guard.admit", "usage_guard.bill"]
    trace_ids = {s.context.trace_id for s in spans.get_finished_spans()}
    assert trace_ids == {parent.get_span_context().trace_id}


def test_a_models_name_the_caller_chose_makes_no_new_metric_series(
    make_guard: Any, otel: Any
) -> None:
    """Names the policy does not declare (refused as unknown, or admitted under `allow`) are
    `_OTHER` on the metrics, so callers cannot grow a series per name; a declared model, and
    one reached by another of its names, keeps its id. The span keeps the name asked for."""
    meters, tracers, reader, spans = otel
    document = policy()
    guard = instrument(make_guard(document), meter_provider=meters, tracer_provider=tracers)
    for i in range(50):
        with pytest.raises(ug.ModelNotFound):
            guard.admit("alice", f"made-up-{i}", prompt_tokens=1, max_tokens=1)
    guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=1).bill(1, 1)
    guard.admit("alice", "GPT-4o", prompt_tokens=1, max_tokens=1).bill(1, 1)
    allowing = instrument(
        make_guard({**document, "settings": {"unknown_models": "allow"}}),
        meter_provider=meters,
        tracer_provider=tracers,
    )
    for i in range(20):
        allowing.admit("alice", f"free-{i}", prompt_tokens=1, max_tokens=1).bill(1, 1)
    for name, found in points(reader).items():
        if name.startswith("usage_guard.") or name.startswith("gen_ai."):
            models = {p.attributes.get("gen_ai.request.model") for p in found} - {None}
            assert models <= {"gpt-4o", "_OTHER"}, (name, sorted(models)[:5])
    admitted = [
        p.value
        for p in points(reader)["usage_guard.admissions"]
        if p.attributes.get("outcome") == "admitted"
        and p.attributes.get("gen_ai.request.model") == "gpt-4o"
    ]
    assert admitted == [2]
    admits = [s for s in spans.get_finished_spans() if s.name == "usage_guard.admit"]
    assert admits[0].attributes["gen_ai.request.model"] == "made-up-0"


def test_instrument_refuses_what_is_not_a_guard(make_guard: Any, otel: Any) -> None:
    with pytest.raises(TypeError, match="guard: must be a usage_guard.Guard"):
        instrument("not a guard")  # type: ignore[arg-type]
    guard = instrument(make_guard(policy()), meter_provider=otel[0], tracer_provider=otel[1])
    with pytest.raises(TypeError, match="already instrumented"):
        instrument(guard)  # type: ignore[arg-type]


def test_the_docs_snippet_runs_as_written(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    (block,) = run_by("docs/opentelemetry.md", "core/test_otel.py")
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/opentelemetry.md", "exec"), namespace)
    assert (
        capsys.readouterr().out == "['handle request', 'usage_guard.admit', 'usage_guard.bill']\n"
    )
    assert "gen_ai.client.token.usage" in points(namespace["reader"])
