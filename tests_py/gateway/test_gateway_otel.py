"""The gateway's OTLP export (`[gateway.otel]`): the instruments and spans of
docs/opentelemetry.md, POSTed as OTLP/HTTP JSON to a collector stand-in run here (a plain
HTTP server taking /v1/metrics and /v1/traces). A collector that is down, hangs or is slow
never fails or holds a call; spans past the queue are dropped and counted."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import used
from test_gateway import ALICE, MESSAGES, gateway_policy

DOC = (Path(__file__).resolve().parents[2] / "docs" / "opentelemetry.md").read_text()
TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


class Collector:
    """An OTLP/HTTP receiver: keeps each JSON body POSTed, by path. While `hold` is clear,
    each request waits for it (a collector that hangs)."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[Any]] = {"/v1/metrics": [], "/v1/traces": []}
        self.hold = threading.Event()
        self.hold.set()
        self.waiting = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["content-length"]))
                if not collector.hold.is_set():
                    collector.waiting.set()
                    collector.hold.wait(30)
                kind = self.headers["content-type"]
                assert kind == "application/json", kind
                collector.bodies.setdefault(self.path, []).append(json.loads(body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[dict[str, Any]]:
        return [
            span
            for body in self.bodies["/v1/traces"]
            for rs in body["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        ]

    def metrics(self) -> dict[str, Any]:
        """The last export's metrics by name."""
        last = self.bodies["/v1/metrics"][-1]
        return {
            m["name"]: m
            for rm in last["resourceMetrics"]
            for sm in rm["scopeMetrics"]
            for m in sm["metrics"]
        }


def attributes(item: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for a in item["attributes"]:
        v = a["value"]
        out[a["key"]] = int(v["intValue"]) if "intValue" in v else v["stringValue"]
    return out


def points(metric: dict[str, Any]) -> list[dict[str, Any]]:
    data = metric.get("sum") or metric.get("histogram") or metric["gauge"]
    return list(data["dataPoints"])


def wait_for(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.hold.set()
    c.server.shutdown()


def start(fake: FakeProvider, otel: dict[str, Any], **kw: Any) -> tuple[ug.Guard, ug.Gateway]:
    doc = gateway_policy(fake, **kw)
    doc["gateway"]["otel"] = {"export_interval_seconds": 1, **otel}
    guard = ug.Guard(ug.Policy.from_dict(doc))
    return guard, ug.Gateway(guard, "127.0.0.1:0")


def client(gateway: ug.Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0, timeout=10)


def documented_instruments() -> set[str]:
    """The instruments docs/opentelemetry.md's table names (its families row aside)."""
    names = re.findall(r"^\| `([a-z_.]+)`", DOC, re.M)
    return set(names)


def test_the_gateway_exports_the_documented_instruments_and_spans(fake, collector):
    guard, gateway = start(fake, {"endpoint": collector.url}, tokens_a_day=3000)
    try:
        parent = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
        client(gateway).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers=parent
        )
        with pytest.raises(openai.APIStatusError):
            long = [{"role": "user", "content": "word " * 4000}]
            client(gateway).chat.completions.create(model="gpt-4o", messages=long)
        wait_for(lambda: len(collector.spans()) >= 3)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)

    spans = {(s["name"], s["status"]["code"]): s for s in collector.spans()}
    admit, bill = spans[("usage_guard.admit", 0)], spans[("usage_guard.bill", 0)]
    refused = spans[("usage_guard.admit", 2)]
    # Children of the caller's span (its traceparent), like the Python layer's spans.
    for span in (admit, bill):
        assert (span["traceId"], span["parentSpanId"]) == (TRACE, PARENT)
    assert refused["traceId"] != TRACE and "parentSpanId" not in refused
    a = attributes(admit)
    assert a["gen_ai.request.model"] == "gpt-4o"
    assert (a["gen_ai.provider.name"], a["gen_ai.operation.name"]) == ("openai", "chat")
    assert (a["usage_guard.user"], a["usage_guard.source.type"]) == ("alice", "direct")
    assert a["usage_guard.reserved.tokens"] > 0 and "usage_guard.ceiling.max_output_tokens" in a
    b = attributes(bill)
    billed = b["gen_ai.usage.input_tokens"] + b["gen_ai.usage.output_tokens"]
    assert billed == used(guard, "alice", "gpt-4o") > 0
    r = attributes(refused)
    assert r["usage_guard.refused.reason"] == refused["status"]["message"]
    assert r["usage_guard.refused.reason"].startswith("USAGE_LIMIT")
    assert r["usage_guard.refused.metric"] == "tokens"

    # Every exported export is the final state once the gateway stopped (cumulative).
    metrics = collector.metrics()
    missing = documented_instruments() - set(metrics)
    assert not missing, missing
    outcomes = {
        attributes(p)["outcome"]: p["asDouble"] for p in points(metrics["usage_guard.admissions"])
    }
    assert outcomes == {"admitted": 1, "refused": 1}
    tokens = {
        attributes(p)["gen_ai.token.type"]: float(p["sum"])
        for p in points(metrics["gen_ai.client.token.usage"])
    }
    assert tokens == {
        "input": b["gen_ai.usage.input_tokens"],
        "output": b["gen_ai.usage.output_tokens"],
    }
    assert metrics["gen_ai.client.token.usage"]["unit"] == "{token}"
    cost = points(metrics["usage_guard.billed.cost"])[0]["asDouble"]
    assert cost == pytest.approx(b["usage_guard.billed.cost_micros"] / 1e6)
    # The core's families, as usage_guard.<family> (the Python layer's names too).
    core = {
        attributes(p).get("reason"): p["asDouble"] for p in points(metrics["usage_guard.refusals"])
    }
    assert sum(core.values()) == 1
    assert points(metrics["usage_guard.admitted"])[0]["asDouble"] == 1


def test_a_collector_that_hangs_neither_holds_nor_fails_calls(fake, collector):
    """While the collector holds an export open (60 s timeout), calls are answered and
    billed; spans past max_queue are dropped and counted, the rest exported once it answers."""
    collector.hold.clear()
    guard, gateway = start(
        fake, {"endpoint": collector.url, "export_timeout_seconds": 60, "max_queue": 4}
    )
    try:
        assert collector.waiting.wait(10)
        for _ in range(10):
            client(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert not collector.hold.is_set()  # every call answered while the export hung
        assert used(guard, "alice", "gpt-4o") > 0
        collector.hold.set()
        wait_for(lambda: len(collector.spans()) >= 4)
        time.sleep(1.5)  # one more export: the dropped count
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    assert len(collector.spans()) == 4  # the queue's bound
    dropped = points(collector.metrics()["usage_guard.otel.dropped_spans"])[0]["asDouble"]
    assert dropped == 20 - 4


def test_a_collector_that_is_down_never_fails_calls(fake, collector):
    collector.server.shutdown()
    collector.server.server_close()  # nothing listens on its port now
    guard, gateway = start(fake, {"endpoint": collector.url, "export_timeout_seconds": 1})
    try:
        for _ in range(5):
            client(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        time.sleep(1.2)  # an export failed meanwhile
        client(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert used(guard, "alice", "gpt-4o") > 0
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


@pytest.mark.parametrize(
    ("otel", "said"),
    [
        ({}, "gateway.otel.endpoint: is required"),
        ({"endpoint": "collector:4318"}, "gateway.otel.endpoint"),
        ({"endpoint": "http://c:4318", "max_queue": 0}, "gateway.otel.max_queue: must be"),
        ({"endpoint": "http://c:4318", "protocol": "grpc"}, "gateway.otel.protocol"),
        ({"endpoint": "http://c:4318", "export_timeout_seconds": 61}, "from 1 to 60"),
    ],
)
def test_bad_otel_settings_are_refused_naming_the_key(otel, said):
    with pytest.raises(ug.PolicyError) as refused:
        ug.Policy.from_dict({"gateway": {"otel": otel}})
    assert said in str(refused.value)
