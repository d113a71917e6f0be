"""The guarded Anthropic client's other ways to the same call: `messages.parse`, the raw
twins, `beta.messages.stream`, each metered; the streaming-response twins, the tool runner and
batch jobs refused before anything is sent (they reached the provider unmetered)."""

from __future__ import annotations

import inspect
from typing import Any

import anthropic
import pydantic
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy, reserved, used
from usage_guard.anthropic import GuardedAnthropic, GuardedAsyncAnthropic

MODEL = "claude-haiku-4-5"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
ASK: dict[str, Any] = {"model": MODEL, "max_tokens": 1000, "messages": MESSAGES}


def guarded(fake: FakeProvider, guard: ug.Guard) -> GuardedAnthropic:
    sdk = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)
    return GuardedAnthropic(sdk, guard, user="alice")


def exhausted(make_guard: Any) -> ug.Guard:
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("alice", MODEL, prompt_tokens=100, max_tokens=0).bill(100, 0)
    return guard


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta.messages"])
def test_the_raw_twin_is_billed_from_its_answer(
    fake: FakeProvider, make_guard: Any, beta: bool
) -> None:
    guard = make_guard(policy())
    client = guarded(fake, guard)
    messages = client.beta.messages if beta else client.messages
    raw = messages.with_raw_response.create(**ASK)
    assert raw.parse().usage.output_tokens == 12
    assert used(guard, "alice", MODEL) == 21 + 12 and reserved(guard, "alice", MODEL) == 0
    with pytest.raises(TypeError, match="stream=True"):
        messages.with_raw_response.create(**ASK, stream=True)


def test_parse_and_the_beta_stream_are_metered(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    client = guarded(fake, guard)
    with client.beta.messages.stream(**ASK) as stream:
        text = "".join(stream.text_stream)
    assert text and used(guard, "alice", MODEL) == 21 + 12
    assert stream.usage_billed is not None  # type: ignore[attr-defined]

    class Hello(pydantic.BaseModel):
        text: str

    # The fake's answer is words, not the JSON asked for: the SDK's parse fails after the
    # provider answered (before, the call was released: nothing billed), and it is billed.
    with pytest.raises(pydantic.ValidationError):
        client.messages.parse(**ASK, output_format=Hello)
    assert used(guard, "alice", MODEL) == 2 * (21 + 12) and reserved(guard, "alice", MODEL) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.messages.with_raw_response.create(**ASK),
        lambda c: c.beta.messages.with_raw_response.create(**ASK),
        lambda c: c.beta.messages.stream(**ASK).__enter__(),
        lambda c: c.messages.parse(**ASK),
    ],
    ids=["raw", "beta raw", "beta stream", "parse"],
)
def test_past_the_limit_nothing_is_sent(fake: FakeProvider, make_guard: Any, call: Any) -> None:
    with pytest.raises(ug.UsageLimitError):
        call(guarded(fake, exhausted(make_guard)))
    assert fake.requests == []


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda m: m.with_streaming_response.create(**ASK), "with_streaming_response"),
        (lambda m: m.tool_runner(**ASK, tools=[]), "tool_runner"),
        (lambda m: m.batches.create(requests=[]), "batch job"),
        (lambda m: m.with_raw_response.batches.create(requests=[]), "batch job"),
        (lambda m: m.with_streaming_response.batches.create(requests=[]), "batch job"),
    ],
    ids=["streaming response", "tool runner", "batches", "raw batches", "streaming batches"],
)
@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta.messages"])
def test_what_cannot_be_metered_is_refused(
    fake: FakeProvider, make_guard: Any, call: Any, what: str, beta: bool
) -> None:
    client = guarded(fake, make_guard(policy()))
    messages = client.beta.messages if beta else client.messages
    if what == "tool_runner" and not hasattr(messages._target, "tool_runner"):
        pytest.skip("this SDK's messages have no tool runner")
    with pytest.raises(TypeError, match=what):
        call(messages)
    assert fake.requests == []


async def test_async_twins_are_metered(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)
    client = GuardedAsyncAnthropic(sdk, guard, user="alice")
    raw = await client.messages.with_raw_response.create(**ASK)
    parsed = raw.parse()  # awaitable on today's SDK (cached: the guard's), not on older ones
    if inspect.isawaitable(parsed):
        parsed = await parsed
    assert parsed.usage.output_tokens == 12
    async with client.beta.messages.stream(**ASK) as stream:
        async for _ in stream.text_stream:
            pass
    assert used(guard, "alice", MODEL) == 2 * (21 + 12) and reserved(guard, "alice", MODEL) == 0


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta.messages"])
def test_the_twins_reached_from_the_client_are_the_guarded_ones(
    fake: FakeProvider, make_guard: Any, beta: bool
) -> None:
    # `client.with_raw_response.messages.create` was the SDK's own: sent past a spent limit.
    client = guarded(fake, exhausted(make_guard))
    raw, streaming = client.with_raw_response, client.with_streaming_response
    if beta:
        raw, streaming = raw.beta, streaming.beta
    with pytest.raises(ug.UsageLimitError):
        raw.messages.create(**ASK)
    with pytest.raises(TypeError, match="with_streaming_response"):
        streaming.messages.create(**ASK)
    assert fake.requests == []
