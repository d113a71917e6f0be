"""Errors a client can act on (issue 30, item 9): the drain after SIGTERM answers 503 in
each provider's shape (not connection refused); a stream the upstream breaks ends with an
error event the SDK raises; a Redis-down 503 says when to retry; the `Bearer` scheme in any
case is a key and a header without it is not; an output maximum of 0 is the caller's
mistake (400 naming the field), not a usage limit."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import anthropic
import httpx
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import reserved, used
from serve_support import serve
from test_gateway import ALICE, MESSAGES, gateway_policy, oai, settle


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Callable[[], tuple[ug.Guard, ug.Gateway]]]:
    """`start()` → (guard, gateway) in front of the fake provider; stopped after the test."""
    running: list[ug.Gateway] = []

    def make() -> tuple[ug.Guard, ug.Gateway]:
        guard = ug.Guard(ug.Policy.from_dict(gateway_policy(fake)))
        running.append(ug.Gateway(guard, "127.0.0.1:0"))
        return guard, running[-1]

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def test_the_drain_answers_new_calls_503_in_shape_with_retry_after(fake, tmp_path):
    """`usage-guard serve`, SIGTERM while a stream runs: the listener stays open, new calls
    get 503 `shutting_down` with Retry-After in the OpenAI, Anthropic and Ollama shapes, the
    stream runs to its end, and the process exits 0 once it has."""
    fake.output_tokens, fake.chunk_delay = 30, 0.05
    with serve(gateway_policy(fake), tmp_path) as (proc, url):
        got: list[str] = []

        def consume() -> None:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0)
            for c in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
                if c.choices and c.choices[0].delta.content:
                    got.append(c.choices[0].delta.content)

        reader = threading.Thread(target=consume)
        reader.start()
        while not got:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)  # the signal reaches the gateway (a bounded wait, not a measure)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0)
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert e.value.status_code == 503
        assert e.value.response.json()["error"]["code"] == "shutting_down"
        assert e.value.response.headers["retry-after"] == "1"
        claude = anthropic.Anthropic(base_url=url, api_key=ALICE, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as a:
            claude.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES)
        assert a.value.status_code == 503
        assert a.value.response.json()["error"]["type"] == "overloaded_error"
        assert a.value.response.headers["retry-after"] == "1"
        local = httpx.post(
            f"{url}/api/chat",
            json={"model": "llama3.2", "messages": MESSAGES},
            headers={"authorization": f"Bearer {ALICE}"},
            timeout=10,
        )
        assert local.status_code == 503 and local.headers["retry-after"] == "1"
        assert local.json() == {"error": "The gateway is shutting down"}  # Ollama's shape
        reader.join(10)
        assert len(got) == 30
        assert proc.wait(timeout=30) == 0


def test_a_stream_the_upstream_breaks_ends_with_an_error_event_in_each_shape(fake, start):
    guard, gateway = start()
    fake.output_tokens, fake.break_after = 50, 3
    got: list[str] = []
    with pytest.raises(openai.APIError) as e:
        for c in oai(gateway).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        ):
            if c.choices and c.choices[0].delta.content:
                got.append(c.choices[0].delta.content)
    assert not isinstance(e.value, openai.APIConnectionError)
    assert e.value.code == "upstream_broke" and len(got) == 3
    client = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    texts: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as a:
        with client.messages.stream(
            model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES
        ) as stream:
            for text in stream.text_stream:
                texts.append(text)
    assert a.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert "broke off" in a.value.message and len(texts) == 3
    local = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {ALICE}"})
    parts: list[Any] = []
    with pytest.raises(ollama.ResponseError) as o:
        for part in local.chat(model="llama3.2", messages=MESSAGES, stream=True):
            parts.append(part.message.content)
    assert "broke off" in str(o.value) and len(parts) == 3
    for model in ("gpt-4o", "claude-haiku-4-5", "llama3.2"):
        settle(guard, "alice", model)
        assert reserved(guard, "alice", model) == 0


def test_a_redis_down_503_says_when_to_retry(fake, redis_server):
    document = gateway_policy(fake)
    guard = ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(redis_server.url))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=5)
        redis_server.stop()
        with pytest.raises(openai.APIStatusError) as e:
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert e.value.status_code == 503
        assert e.value.response.json()["error"]["code"] == "usage_limits_unavailable"
        assert e.value.response.headers["retry-after"] == "1"
        assert "x-should-retry" not in e.value.response.headers
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


REDIS_DOWN = [
    ("/v1/chat/completions", {"model": "gpt-4o", "messages": MESSAGES, "stream": True}),
    ("/v1/messages", {"model": "claude-haiku-4-5", "max_tokens": 5, "messages": MESSAGES}),
    ("/api/chat", {"model": "llama3.2", "messages": MESSAGES}),
    ("/v1/embeddings", {"model": "text-embedding-3-small", "input": "hi"}),
]


def test_a_redis_down_503_says_when_to_retry_in_every_shape_through_serve(
    fake, redis_server, tmp_path
):
    """`usage-guard serve --store redis://...`, its Redis stopped: a stream, an Anthropic, an
    Ollama and an embeddings call are each 503 in their shape with `Retry-After`, and the
    process keeps serving /healthz."""
    args = ("--store", redis_server.url)
    with serve(gateway_policy(fake), tmp_path, args=args) as (proc, url):
        headers = {"authorization": f"Bearer {ALICE}"}
        chat = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5}
        first = httpx.post(f"{url}/v1/chat/completions", json=chat, headers=headers, timeout=30)
        assert first.status_code == 200
        redis_server.stop()
        answers = {}
        for path, body in REDIS_DOWN:
            r = httpx.post(f"{url}{path}", json=body, headers=headers, timeout=30)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["retry-after"] == "1", path
            assert "x-should-retry" not in r.headers, path
            answers[path] = r.json()
        assert answers["/v1/chat/completions"]["error"]["code"] == "usage_limits_unavailable"
        assert answers["/v1/messages"]["error"]["type"] == "api_error"
        assert answers["/api/chat"] == {"error": "Usage limits cannot be checked right now"}
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200
        assert proc.poll() is None
        assert len(fake.requests) == 1


def test_the_bearer_scheme_in_any_case_and_no_key_without_it(fake, start):
    guard, gateway = start()
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5}
    url = f"{gateway.url}/v1/chat/completions"
    for value in (f"Bearer {ALICE}", f"BEARER {ALICE}", f"bearer  {ALICE}"):
        r = httpx.post(url, json=request, headers={"authorization": value})
        assert r.status_code == 200, (value, r.text)
    for value in (ALICE, f"Basic {ALICE}", "Bearer"):
        r = httpx.post(url, json=request, headers={"authorization": value})
        assert r.status_code == 401, value
        assert r.json()["error"]["code"] == "invalid_api_key"
    assert "must be `Bearer <key>`" in r.json()["error"]["message"]
    # Anthropic's x-api-key is a key, as its SDK sends it.
    client = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    reply = client.messages.create(model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES)
    assert reply.content[0].text == WORD * 12  # type: ignore[union-attr]
    assert used(guard, "alice", "gpt-4o") == 3 * (21 + 5)


ZERO = [
    ("/v1/chat/completions", {"model": "gpt-4o", "max_tokens": 0}, "max_tokens", "openai"),
    (
        "/v1/chat/completions",
        {"model": "gpt-4o", "max_completion_tokens": 0},
        "max_completion_tokens",
        "openai",
    ),
    ("/v1/responses", {"model": "gpt-4o", "max_output_tokens": 0}, "max_output_tokens", "openai"),
    ("/v1/messages", {"model": "claude-haiku-4-5", "max_tokens": 0}, "max_tokens", "anthropic"),
    ("/api/chat", {"model": "llama3.2", "options": {"num_predict": 0}}, "num_predict", "ollama"),
]


@pytest.mark.parametrize(("path", "fields", "field", "shape"), ZERO, ids=[z[2] for z in ZERO])
@pytest.mark.parametrize("value", [0, -1, 2.5], ids=["zero", "negative", "fraction"])
def test_an_output_maximum_below_1_is_a_400_naming_the_field(
    fake, start, path, fields, field, shape, value
):
    if shape == "ollama" and value == -1:
        pytest.skip("Ollama's negative num_predict means no maximum")
    guard, gateway = start()
    body = {**fields, "messages": MESSAGES}
    if path == "/v1/responses":
        body = {**fields, "input": "hi"}
    if "options" in body:
        body["options"] = {"num_predict": value}
    else:
        body[field] = value
    r = httpx.post(f"{gateway.url}{path}", json=body, headers={"authorization": f"Bearer {ALICE}"})
    assert r.status_code == 400, r.text
    assert "x-should-retry" not in r.headers
    answer = r.json()
    if shape == "openai":
        assert answer["error"]["type"] == "invalid_request_error"
        message = answer["error"]["message"]
    elif shape == "anthropic":
        assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
        message = answer["error"]["message"]
    else:
        message = answer["error"]
    assert field in message, message
    assert fake.requests == []
    assert reserved(guard, "alice", fields["model"]) == 0
