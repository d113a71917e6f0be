"""The official `openai` SDK, wrapped by GuardedOpenAI, talking HTTP to the fake provider."""

from __future__ import annotations

import gc
from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import MODELS, cost_micros, policy, prompt_tokens, reserved, room, used
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI

MESSAGES = [{"role": "user", "content": "Say hello a few times."}]


def sdk(fake: FakeProvider, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0, **kw)


def async_sdk(fake: FakeProvider) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)


def test_chat_bills_reported_usage_and_attaches_limits(fake, make_guard):
    guard = make_guard(policy())
    fake.cached_tokens, fake.reasoning_tokens = 5, 4
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=100)
    assert reply.choices[0].message.content == WORD * 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert used(guard, "alice", "gpt-4o", "cost") == cost_micros(
        MODELS["gpt-4o"]["prices"], 21, 12, cached=5
    )
    assert reserved(guard, "alice", "gpt-4o") == 0
    assert reply.usage_limits["source"] == {"type": "direct", "id": "alice"}
    assert reply.usage_limits["capped"] is False
    assert reply.usage_restriction == reply.usage_limits["restriction"]
    assert reply.usage_restriction["max_value"] in (1_000_000, 1_000_000_000)
    # the caller's own maximum was below what is left: sent as given
    assert fake.bodies("/v1/chat/completions")[0]["max_tokens"] == 100
    # the attached view is not part of the model's data
    assert "usage_limits" not in reply.model_dump()


def test_user_per_call_is_not_sent(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, user="bob")
    body = fake.bodies("/v1/chat/completions")[0]
    assert "user" not in body
    assert used(guard, "bob", "gpt-4o") == 33
    assert used(guard, "alice", "gpt-4o") == 0


def test_refused_call_never_reaches_the_server(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1000))
    guard.admit("alice", "gpt-4o", prompt_tokens=600, max_tokens=0).bill(600, 400)
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    with pytest.raises(ug.UsageLimitError) as e:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.reason == "USAGE_LIMIT_REACHED"
    assert fake.requests == []
    assert used(guard, "alice", "gpt-4o") == 1000


def test_call_that_does_not_fit_is_refused_before_the_server(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1000))
    guard.admit("alice", "gpt-4o", prompt_tokens=900, max_tokens=0).bill(900, 0)
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    long = [{"role": "user", "content": "word " * 300}]
    with pytest.raises(ug.UsageLimitError):
        client.chat.completions.create(model="gpt-4o", messages=long)
    assert fake.requests == []
    assert used(guard, "alice", "gpt-4o") == 900
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_fitted_call_is_sent_with_the_lowered_maximum_and_capped(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=500))
    fake.output_tokens = 10_000  # the model would write on and on
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_completion_tokens": 4000}
    reply = client.chat.completions.create(**request)
    sent = fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"]
    assert sent == room(500, request, "openai", "gpt-4o")
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == sent
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", "gpt-4o") == 21 + sent


def test_not_capped_when_stopping_early_or_at_the_callers_own_maximum(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=500))
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    fake.output_tokens = 12  # stops by itself below the ceiling's maximum
    reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=4000)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage_limits["capped"] is False
    fake.output_tokens = 10_000  # stops at the caller's maximum, which the ceiling left alone
    reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=7)
    assert reply.choices[0].finish_reason == "length"
    assert fake.bodies("/v1/chat/completions")[1]["max_tokens"] == 7
    assert reply.usage_limits["capped"] is False


def test_stream_asks_for_usage_and_bills_it_once(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    with client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as stream:
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == WORD * 12
    body = fake.bodies("/v1/chat/completions")[0]
    assert body["stream_options"] == {"include_usage": True}
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert stream.usage_limits["capped"] is False
    stream.close()  # settled already: nothing billed twice
    assert used(guard, "alice", "gpt-4o") == 33
    assert reserved(guard, "alice", "gpt-4o") == 0


@pytest.mark.parametrize("n", [1, 5])
def test_stream_abandoned_after_n_chunks_bills_n_chunks(fake, make_guard, n):
    guard = make_guard(policy())
    fake.output_tokens = 200
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "messages": MESSAGES}
    stream = client.chat.completions.create(**request, stream=True)
    got = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
        if len(got) == n:
            break
    stream.close()
    assert ug._core.count_tokens("".join(got)) == n
    assert used(guard, "alice", "gpt-4o") == prompt_tokens(request, "openai", "gpt-4o") + n
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_broken_stream_bills_what_arrived(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens, fake.break_after = 50, 4
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "messages": MESSAGES}
    got = []
    with pytest.raises(Exception) as e:
        for chunk in client.chat.completions.create(**request, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert not isinstance(e.value, ug.UsageLimitError)
    assert len(got) == 4
    assert used(guard, "alice", "gpt-4o") == prompt_tokens(request, "openai", "gpt-4o") + 4


def test_provider_error_releases(fake, make_guard):
    guard = make_guard(policy())
    fake.refusal = (
        500,
        {},
        {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}},
    )
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert len(fake.requests) == 1
    assert used(guard, "alice", "gpt-4o") == 0
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_responses_plain_and_stream(fake, make_guard):
    # A call without an output maximum may take all that is left (not the default half).
    guard = make_guard({**policy(tokens_a_day=300), "settings": {"uncapped_output": "model"}})
    fake.output_tokens, fake.reasoning_tokens = 10_000, 3
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "input": "Say hello."}
    reply = client.responses.create(**request)
    sent = fake.bodies("/v1/responses")[0]["max_output_tokens"]
    assert sent == room(300, request, "openai.responses", "gpt-4o")
    assert reply.usage_limits["capped"] is True
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert used(guard, "alice", "gpt-4o") == 21 + sent

    guard = make_guard(policy())
    fake.output_tokens = 9
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    stream = client.responses.create(**request, stream=True)
    deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
    assert "".join(deltas) == WORD * 9
    assert used(guard, "alice", "gpt-4o") == 21 + 9
    assert stream.usage_limits["capped"] is False


def test_responses_stream_fits_max_output_tokens_and_reasoning_effort(fake, make_guard):
    """A maximum a usage limit lowered under 4,096 tokens sends `reasoning.effort` "low" (the
    rest of `reasoning` kept); a call that fits is sent as given."""
    fake.output_tokens, fake.reasoning_tokens = 9, 4
    request = {
        "model": "gpt-4o",
        "input": "Say hello.",
        "max_output_tokens": 6000,
        "reasoning": {"effort": "high", "summary": "auto"},
    }
    guard = make_guard(policy(tokens_a_day=2000))
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    stream = client.responses.create(**request, stream=True)
    assert "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    sent = fake.bodies("/v1/responses")[-1]
    assert sent["max_output_tokens"] == room(2000, request, "openai.responses", "gpt-4o") < 4096
    assert sent["reasoning"] == {"effort": "low", "summary": "auto"}
    assert stream.usage_limits["capped"] is False  # the answer did not stop at the maximum
    assert used(guard, "alice", "gpt-4o") == 21 + 9
    assert reserved(guard, "alice", "gpt-4o") == 0

    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    list(client.responses.create(**request, stream=True))
    sent = fake.bodies("/v1/responses")[-1]
    assert (sent["max_output_tokens"], sent["reasoning"]["effort"]) == (6000, "high")


def test_embeddings_bill_input_only(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    reply = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(reply.data) == 2
    assert used(guard, "alice", "text-embedding-3-small") == 21
    assert reply.usage_limits["capped"] is False
    assert reserved(guard, "alice", "text-embedding-3-small") == 0


def test_everything_else_passes_through(fake, make_guard):
    raw = sdk(fake)
    client = GuardedOpenAI(raw, make_guard(policy()), user="alice")
    assert client.base_url == raw.base_url
    assert client.models is raw.models
    assert client.chat.completions.with_raw_response is not None
    assert client.client is raw


async def test_async_agrees_with_sync(fake, make_guard):
    fake.output_tokens = 10_000
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5000}
    sync_guard, async_guard = (
        make_guard(policy(tokens_a_day=400)),
        make_guard(policy(tokens_a_day=400)),
    )
    sync_reply = GuardedOpenAI(sdk(fake), sync_guard, user="alice").chat.completions.create(
        **request
    )
    async_client = GuardedAsyncOpenAI(async_sdk(fake), async_guard, user="alice")
    async_reply = await async_client.chat.completions.create(**request)
    first, second = fake.bodies("/v1/chat/completions")
    assert first == second
    assert sync_reply.usage_limits == async_reply.usage_limits
    assert async_reply.usage_limits["capped"] is True
    assert used(sync_guard, "alice", "gpt-4o") == used(async_guard, "alice", "gpt-4o") > 21

    # streams agree too, abandoned ones included
    fake.output_tokens = 30
    sync_guard, async_guard = make_guard(policy()), make_guard(policy())
    stream = GuardedOpenAI(sdk(fake), sync_guard, user="alice").chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    )
    got = 0
    for chunk in stream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 3:
            break
    stream.close()
    async_client = GuardedAsyncOpenAI(async_sdk(fake), async_guard, user="alice")
    astream = await async_client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True
    )
    got = 0
    async for chunk in astream:
        got += bool(chunk.choices and chunk.choices[0].delta.content)
        if got == 3:
            break
    await astream.close()
    base = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    assert used(async_guard, "alice", "gpt-4o") == used(sync_guard, "alice", "gpt-4o") == base + 3
    assert astream.usage_limits == stream.usage_limits


def test_stream_dropped_without_close_bills_what_arrived(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens = 100
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "messages": MESSAGES}

    def read_two() -> None:
        got = 0
        for chunk in client.chat.completions.create(**request, stream=True):
            got += bool(chunk.choices and chunk.choices[0].delta.content)
            if got == 2:
                return  # the stream is dropped here, never closed

    read_two()
    gc.collect()
    assert used(guard, "alice", "gpt-4o") == prompt_tokens(request, "openai", "gpt-4o") + 2
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_with_options_stays_guarded(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("bob", "gpt-4o", prompt_tokens=100, max_tokens=0).bill(100, 0)
    client = GuardedOpenAI(sdk(fake), guard, user="alice").with_options(timeout=5.0)
    assert isinstance(client, GuardedOpenAI) and client.timeout == 5.0
    with pytest.raises(ug.UsageLimitError):
        client.for_user("bob").chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert fake.requests == []
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=10)
    assert used(guard, "alice", "gpt-4o") == 21 + 10


def test_parse_is_guarded(fake, make_guard):
    import pydantic

    class Answer(pydantic.BaseModel):
        text: str

    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    reply = client.chat.completions.parse(
        model="gpt-4o", messages=MESSAGES, response_format=Answer, max_tokens=50
    )
    assert reply.choices[0].message.parsed == Answer(text=WORD * 12)
    assert fake.bodies("/v1/chat/completions")[0]["response_format"]["type"] == "json_schema"
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reply.usage_limits["capped"] is False


def test_billed_reasoning_cached_and_compute_time(fake, make_guard):
    guard = make_guard(policy())
    fake.cached_tokens, fake.reasoning_tokens, fake.delay = 8, 5, 0.25
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    billed = reply.usage_billed
    assert billed["input_tokens"] == 21 and billed["cached_input_tokens"] == 8
    assert billed["output_tokens"] == 12 and billed["reasoning_tokens"] == 5
    assert billed["cost_micros"] == cost_micros(MODELS["gpt-4o"]["prices"], 21, 12, cached=8)
    assert 250 <= billed["compute_ms"] < 5000
    stream = client.responses.create(model="gpt-4o", input="hi", stream=True)
    for _ in stream:
        pass
    assert stream.usage_billed["reasoning_tokens"] == 5
    assert stream.usage_billed["cached_input_tokens"] == 8
    assert stream.usage_billed["compute_ms"] >= 250


def test_sdk_options_pass_through_and_are_not_the_request(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    client.chat.completions.create(
        model="gpt-4o",
        messages=MESSAGES,
        extra_headers={"x-trace": "t1"},
        extra_body={"user": "end-user-7"},
        timeout=10.0,
    )
    recorded = fake.requests[0]
    assert recorded.headers["x-trace"] == "t1"
    assert recorded.body["user"] == "end-user-7"  # OpenAI's own `user` field, via extra_body
    assert used(guard, "alice", "gpt-4o") == 33


async def test_async_stream_dropped_without_close_bills_what_arrived(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens = 100
    client = GuardedAsyncOpenAI(async_sdk(fake), guard, user="alice")
    request = {"model": "gpt-4o", "messages": MESSAGES}

    async def read_two() -> None:
        got = 0
        async for chunk in await client.chat.completions.create(**request, stream=True):
            got += bool(chunk.choices and chunk.choices[0].delta.content)
            if got == 2:
                return

    await read_two()
    gc.collect()
    assert used(guard, "alice", "gpt-4o") == prompt_tokens(request, "openai", "gpt-4o") + 2


@pytest.mark.parametrize("asked", [False, True])
async def test_usage_chunk_reaches_only_callers_who_asked_for_it(fake, make_guard, asked):
    guard = make_guard(policy())
    options = {"stream_options": {"include_usage": True}} if asked else {}
    request = {"model": "gpt-4o", "messages": MESSAGES, "stream": True, **options}
    chunks = list(GuardedOpenAI(sdk(fake), guard, user="alice").chat.completions.create(**request))
    client = GuardedAsyncOpenAI(async_sdk(fake), guard, user="alice")
    achunks = [c async for c in await client.chat.completions.create(**request)]
    for got in (chunks, achunks):
        # code written as `chunk.choices[0]` keeps working when it did not ask for usage
        assert all(c.choices for c in got[:-1])
        assert bool(got[-1].choices) is not asked
        assert (got[-1].usage is not None) is asked
    assert all(
        b["stream_options"] == {"include_usage": True} for b in fake.bodies("/v1/chat/completions")
    )
    assert used(guard, "alice", "gpt-4o") == 2 * 33


def test_usage_attributes_reach_the_rules_and_the_reply_says_what_they_did(fake, make_guard):
    document = policy()
    document["models"]["gpt-4o-mini"] = {
        "provider": "openai",
        "prices": {"input": 0.15, "output": 0.6},
    }
    document["rules"] = [
        {
            "name": "gpt-4o per agent",
            "applies_when": {"model": "gpt-4o"},
            "count_by": ["agent"],
            "amount": "requests",
            "budget": 1,
            "window": "day",
            "action": "degrade",
            "degrade_to": "gpt-4o-mini",
            "warn_at": [1.0],
        }
    ]
    guard = make_guard(document)
    client = GuardedOpenAI(sdk(fake), guard, user="alice")
    first = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, usage_attributes={"agent": "a1"}
    )
    assert first.usage_degraded is None
    assert [w["rule"] for w in first.usage_warnings] == ["gpt-4o per agent"]
    second = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, usage_attributes={"agent": "a1"}
    )
    assert second.usage_degraded == "gpt-4o"
    assert second.usage_warnings == []
    assert [b["model"] for b in fake.bodies("/v1/chat/completions")] == ["gpt-4o", "gpt-4o-mini"]
    # usage_attributes is ours: the SDK never sees it.
    assert all("usage_attributes" not in b for b in fake.bodies("/v1/chat/completions"))
