"""Refusal shapes with the official SDKs: the fake provider answers with `to_http(...)` and the
SDKs must raise the right errors, honour Retry-After, and not retry a day-long refusal."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy, used
from usage_guard import http
from usage_guard.openai import GuardedOpenAI

MESSAGES = [{"role": "user", "content": "hi"}]


def refusal_of(guard: ug.Guard, user: str = "alice", model: str = "gpt-4o") -> ug.UsageLimitError:
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit(user, model, prompt_tokens=10, max_tokens=10)
    return e.value


@pytest.fixture
def day_refusal(make_guard) -> ug.UsageLimitError:
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=0).bill(100, 0)
    return refusal_of(guard)


@pytest.fixture
def rate_refusal(make_guard, clock) -> ug.UsageLimitError:
    """A minute rule refusing with a Retry-After of 2 seconds."""
    guard = make_guard(policy(rules=[{"metric": "requests", "amount": 2, "window": "minute"}]))
    for _ in range(2):
        guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=1).bill(1, 1)
    # 2 requests in the 08:00 bucket: at 08:01:28 their weighted share is still 2 (rounded up);
    # it drops to 1 at 08:01:30.
    clock.advance(88)
    e = refusal_of(guard)
    assert e.is_rate_limit and e.retry_after == 2
    return e


def unavailable_refusal() -> ug.UsageLimitError:
    store_type = getattr(ug, "RedisStore", None)
    if store_type is None:
        pytest.skip("no store that can be unavailable on this branch yet (RedisStore lands later)")
    guard = ug.Guard(ug.Policy.from_dict(policy()), store=store_type("redis://127.0.0.1:1"))
    e = refusal_of(guard)
    assert e.unavailable
    return e


def openai_sdk(fake: FakeProvider, retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=retries)


def anthropic_sdk(fake: FakeProvider, retries: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=retries)


def test_shapes(day_refusal, rate_refusal):
    status, headers, body = day_refusal.to_http("openai")
    assert status == 429
    assert headers["x-should-retry"] == "false" and "retry-after" not in headers
    assert body["error"]["code"] == "usage_limit_reached"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] == str(day_refusal)

    status, headers, body = rate_refusal.to_http("openai")
    assert (status, headers["retry-after"]) == (429, "2")
    assert "x-should-retry" not in headers
    assert body["error"]["code"] == "rate_limit_exceeded"

    status, _, body = rate_refusal.to_http("anthropic")
    assert status == 429
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "rate_limit_exceeded"

    status, _, body = day_refusal.to_http("ollama")
    assert status == 429 and body == {"error": str(day_refusal)}
    assert http.refusal(day_refusal, "ollama") == day_refusal.to_http("ollama")
    assert http.refusal(rate_refusal, "openai") == rate_refusal.to_http("openai")
    with pytest.raises(ValueError):
        http.refusal(day_refusal, "gemini-ish")


def test_openai_rate_limit_honours_retry_after(fake, rate_refusal):
    fake.refusal = rate_refusal.to_http("openai")
    client = openai_sdk(fake, retries=1)
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    elapsed = time.monotonic() - started
    assert e.value.code == "rate_limit_exceeded"
    assert e.value.status_code == 429
    assert len(fake.requests) == 2  # the first try and one retry
    # the SDK's own first backoff is under a second; it waited the 2 s it was told
    assert elapsed >= 1.9


def test_openai_day_refusal_is_not_retried(fake, day_refusal):
    fake.refusal = day_refusal.to_http("openai")
    client = openai_sdk(fake, retries=3)
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.code == "usage_limit_reached"
    assert str(day_refusal) in str(e.value)
    assert len(fake.requests) == 1


def test_anthropic_rate_limit_error(fake, day_refusal, rate_refusal):
    fake.refusal = day_refusal.to_http("anthropic")
    client = anthropic_sdk(fake, retries=3)
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES)
    assert e.value.body["error"]["type"] == "rate_limit_error"
    assert len(fake.requests) == 1  # x-should-retry: false

    fake.reset()
    fake.refusal = rate_refusal.to_http("anthropic")
    with pytest.raises(anthropic.RateLimitError):
        anthropic_sdk(fake, retries=1).messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES
        )
    assert len(fake.requests) == 2


def test_ollama_response_error(fake, day_refusal):
    fake.refusal = day_refusal.to_http("ollama")
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=fake.url).chat("llama3.2", messages=MESSAGES)
    assert e.value.status_code == 429
    assert e.value.error == str(day_refusal)


def test_unavailable_is_503_internal_server_error(fake):
    e = unavailable_refusal()
    status, headers, body = e.to_http("openai")
    assert status == 503 and body["error"]["code"] == "usage_limits_unavailable"
    fake.refusal = e.to_http("anthropic")
    with pytest.raises(anthropic.InternalServerError):
        anthropic_sdk(fake, retries=0).messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES
        )
    fake.reset()
    fake.refusal = e.to_http("openai")
    with pytest.raises(openai.InternalServerError):
        openai_sdk(fake, retries=0).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(fake.requests) == 1


def test_guarded_refusal_answers_in_the_provider_shape(fake, make_guard):
    """A gateway: the guarded client refuses, the gateway answers with to_http, the caller's SDK
    raises the provider's own error."""
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=0).bill(100, 0)
    upstream = GuardedOpenAI(openai_sdk(fake, 0), guard, user="alice")
    with pytest.raises(ug.UsageLimitError) as e:
        upstream.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert fake.requests == []
    fake.refusal = e.value.to_http("openai")
    with pytest.raises(openai.RateLimitError) as sdk_error:
        openai_sdk(fake, 2).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert sdk_error.value.code == "usage_limit_reached"


def test_headers(make_guard):
    guard = make_guard(
        policy(tokens_a_day=1000, rules=[{"metric": "requests", "amount": 10, "window": "hour"}])
    )
    ticket = guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=100)
    assert http.headers(ticket) == {"x-ratelimit-remaining-tokens": str(ticket.ceiling["tokens"])}
    ticket.bill(100, 50)
    view = guard.usage("alice", "gpt-4o")
    h = http.headers(ticket, view, now="2026-11-30T08:30:00Z")
    assert h == {
        "x-ratelimit-remaining-requests": "9",
        "x-ratelimit-remaining-tokens": "850",
        "RateLimit-Policy": '"requests";q=10;qu="requests";w=3600, '
        '"tokens";q=1000;qu="tokens";w=86400, "cost";q=1000000000;qu="micro_usd";w=2592000',
        "RateLimit": f'"requests";r=9, "tokens";r=850;t={15 * 3600 + 1800}, '
        f'"cost";r={view["rules"][1]["left"]};t={15 * 3600 + 1800}',
    }

    class Reply:
        usage_limits: Any = view

    assert http.headers(Reply(), now="2026-11-30T08:30:00Z") == h
    assert http.headers(view, now="2026-11-30T08:30:00Z") == h


def test_prompt_over_the_context_window_is_refused_before_the_server(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(openai_sdk(fake, 0), guard, user="alice")
    huge = [{"role": "user", "content": "word " * 130_000}]  # over gpt-4o's 128k window
    with pytest.raises(ug.UsageLimitError) as e:
        client.chat.completions.create(model="gpt-4o", messages=huge)
    assert e.value.reason == "CONTEXT_WINDOW_EXCEEDED"
    assert fake.requests == []
    assert used(guard, "alice", "gpt-4o") == 0

    # answered by a gateway, the SDKs see the provider's own invalid-request error
    fake.refusal = e.value.to_http("openai")
    with pytest.raises(openai.BadRequestError) as bad:
        openai_sdk(fake, 2).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert bad.value.code == "context_length_exceeded"
    fake.reset()
    fake.refusal = e.value.to_http("anthropic")
    with pytest.raises(anthropic.BadRequestError):
        anthropic_sdk(fake, 2).messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES
        )
    assert len(fake.requests) == 1  # a 400 is never retried


def test_long_retry_after_is_handed_to_the_caller(fake, make_guard, clock):
    """An hour rule's Retry-After is long: the refusal tells SDKs not to sleep through it (the
    Anthropic SDK would) and hands it straight back, Retry-After included."""
    guard = make_guard(policy(rules=[{"metric": "requests", "amount": 1, "window": "hour"}]))
    guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=1).bill(1, 1)
    e = refusal_of(guard)
    assert e.is_rate_limit and e.retry_after > 60
    status, headers, body = http.refusal(e, "anthropic")
    assert headers["retry-after"] == str(e.retry_after)
    assert headers["x-should-retry"] == "false"
    fake.refusal = (status, headers, body)
    started = time.monotonic()
    with pytest.raises(anthropic.RateLimitError) as raised:
        anthropic_sdk(fake, retries=2).messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=MESSAGES
        )
    assert time.monotonic() - started < 5
    assert raised.value.response.headers["retry-after"] == str(e.retry_after)
    assert len(fake.requests) == 1
    assert e.to_http("anthropic")[1] == headers
