"""The official `anthropic` SDK, wrapped by GuardedAnthropic, talking HTTP to the fake provider."""

from __future__ import annotations

import anthropic
import pytest
import usage_guard as ug
from fake_provider import THINK, WORD, FakeProvider
from provider_support import MODELS, cost_micros, policy, prompt_tokens, reserved, used
from usage_guard.anthropic import GuardedAnthropic, GuardedAsyncAnthropic

MODEL = "claude-haiku-4-5"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]


def sdk(fake: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)


def async_sdk(fake: FakeProvider) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)


def test_create_bills_reported_usage_with_cache_reads(fake, make_guard):
    guard = make_guard(policy())
    fake.cached_tokens = 6
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    reply = client.messages.create(model=MODEL, max_tokens=1000, messages=MESSAGES)
    assert reply.content[0].text == WORD * 12
    assert reply.usage.input_tokens == 15 and reply.usage.cache_read_input_tokens == 6
    # every input token counts (cache reads too), cache reads at the cached rate
    assert used(guard, "alice", MODEL) == 21 + 12
    assert used(guard, "alice", MODEL, "cost") == cost_micros(
        MODELS[MODEL]["prices"], 21, 12, cached=6
    )
    assert reply.usage_limits["capped"] is False
    assert reserved(guard, "alice", MODEL) == 0


def test_refused_call_never_reaches_the_server(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("alice", MODEL, prompt_tokens=100, max_tokens=0).bill(100, 0)
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    with pytest.raises(ug.UsageLimitError):
        client.messages.create(model=MODEL, max_tokens=1000, messages=MESSAGES)
    with pytest.raises(ug.UsageLimitError):
        with client.messages.stream(model=MODEL, max_tokens=1000, messages=MESSAGES):
            pass
    assert fake.requests == []


def test_fitted_call_lowers_max_tokens_and_the_thinking_budget(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=3000))
    fake.output_tokens = 10_000
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    request = {
        "model": MODEL,
        "max_tokens": 16000,
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "messages": MESSAGES,
    }
    reply = client.messages.create(**request)
    body = fake.bodies("/v1/messages")[0]
    expected = 3000 - prompt_tokens(request, "anthropic", MODEL) - 0
    # an estimate: the margin is kept free, so the maximum is at most what is left
    assert 2500 < body["max_tokens"] <= expected
    assert body["thinking"] == {"type": "enabled", "budget_tokens": body["max_tokens"] - 1}
    assert reply.stop_reason == "max_tokens"
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", MODEL) == 21 + body["max_tokens"]


def test_thinking_turned_off_when_even_the_smallest_budget_does_not_fit(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=800))
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    client.messages.create(
        model=MODEL,
        max_tokens=16000,
        thinking={"type": "enabled", "budget_tokens": 4000},
        messages=MESSAGES,
    )
    body = fake.bodies("/v1/messages")[0]
    assert body["max_tokens"] < 1024
    assert body["thinking"] == {"type": "disabled"}


def test_create_stream_bills_once_at_the_end(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    stream = client.messages.create(model=MODEL, max_tokens=1000, messages=MESSAGES, stream=True)
    text = "".join(e.delta.text for e in stream if e.type == "content_block_delta")
    assert text == WORD * 12
    assert used(guard, "alice", MODEL) == 33
    assert stream.usage_limits["capped"] is False
    stream.close()
    assert used(guard, "alice", MODEL) == 33


def test_messages_stream_helper_bills_on_exit(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=500))
    fake.output_tokens = 10_000
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    with client.messages.stream(model=MODEL, max_tokens=4000, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    sent = fake.bodies("/v1/messages")[0]["max_tokens"]
    assert sent < 500 and text == WORD * sent
    assert final.stop_reason == "max_tokens"
    assert stream.usage_limits["capped"] is True
    assert used(guard, "alice", MODEL) == 21 + sent
    assert reserved(guard, "alice", MODEL) == 0


@pytest.mark.parametrize("helper", [False, True])
def test_stream_abandoned_after_n_chunks_bills_reported_input_and_n_chunks(
    fake, make_guard, helper
):
    guard = make_guard(policy())
    fake.output_tokens, n = 100, 5
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    got = []
    if helper:
        with client.messages.stream(model=MODEL, max_tokens=1000, messages=MESSAGES) as stream:
            for text in stream.text_stream:
                got.append(text)
                if len(got) == n:
                    break
    else:
        stream = client.messages.create(
            model=MODEL, max_tokens=1000, messages=MESSAGES, stream=True
        )
        for event in stream:
            if event.type == "content_block_delta":
                got.append(event.delta.text)
                if len(got) == n:
                    break
        stream.close()
    assert ug._core.count_tokens("".join(got)) == n
    # the input was reported by message_start; the output is counted
    assert used(guard, "alice", MODEL) == 21 + n


def test_broken_stream_bills_what_arrived(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens, fake.break_after = 50, 3
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    got = []
    with pytest.raises(Exception) as e:
        for event in client.messages.create(
            model=MODEL, max_tokens=1000, messages=MESSAGES, stream=True
        ):
            if event.type == "content_block_delta":
                got.append(event.delta.text)
    assert not isinstance(e.value, ug.UsageLimitError)
    assert len(got) == 3
    assert used(guard, "alice", MODEL) == 21 + 3


def test_provider_error_releases(fake, make_guard):
    guard = make_guard(policy())
    fake.refusal = (
        529,
        {},
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    )
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    with pytest.raises(anthropic.APIStatusError):
        client.messages.create(model=MODEL, max_tokens=1000, messages=MESSAGES)
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(model=MODEL, max_tokens=1000, messages=MESSAGES):
            pass
    assert len(fake.requests) == 2
    assert used(guard, "alice", MODEL) == 0
    assert reserved(guard, "alice", MODEL) == 0


async def test_async_agrees_with_sync(fake, make_guard):
    fake.output_tokens = 10_000
    request = {"model": MODEL, "max_tokens": 8000, "messages": MESSAGES}
    sync_guard, async_guard = (
        make_guard(policy(tokens_a_day=600)),
        make_guard(policy(tokens_a_day=600)),
    )
    sync_reply = GuardedAnthropic(sdk(fake), sync_guard, user="alice").messages.create(**request)
    client = GuardedAsyncAnthropic(async_sdk(fake), async_guard, user="alice")
    async_reply = await client.messages.create(**request)
    first, second = fake.bodies("/v1/messages")
    assert first == second
    assert sync_reply.usage_limits == async_reply.usage_limits
    assert async_reply.usage_limits["capped"] is True

    fake.output_tokens = 7
    sync_guard, async_guard = make_guard(policy()), make_guard(policy())
    with GuardedAnthropic(sdk(fake), sync_guard, user="alice").messages.stream(
        model=MODEL, max_tokens=100, messages=MESSAGES
    ) as sync_stream:
        sync_stream.until_done()
    client = GuardedAsyncAnthropic(async_sdk(fake), async_guard, user="alice")
    async with client.messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text == WORD * 7
    assert stream.usage_limits["capped"] is False
    assert used(async_guard, "alice", MODEL) == used(sync_guard, "alice", MODEL) == 21 + 7
    assert stream.usage_limits == sync_stream.usage_limits


THINKING = {"type": "enabled", "budget_tokens": 2000}


@pytest.mark.parametrize("how", ["create", "stream", "helper"])
def test_thinking_tokens_are_billed_as_reasoning(fake, make_guard, how):
    guard = make_guard(policy())
    fake.output_tokens, fake.reasoning_tokens = 30, 8
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    request = {"model": MODEL, "max_tokens": 4000, "thinking": THINKING, "messages": MESSAGES}
    if how == "create":
        target = client.messages.create(**request)
        assert target.content[0].thinking == THINK * 8
    elif how == "stream":
        target = client.messages.create(**request, stream=True)
        kinds = [e.delta.type for e in target if e.type == "content_block_delta"]
        assert kinds.count("thinking_delta") == 8
    else:
        with client.messages.stream(**request) as target:
            assert target.get_final_message().content[0].thinking == THINK * 8
    billed = target.usage_billed
    assert (billed["input_tokens"], billed["output_tokens"]) == (21, 30)
    assert billed["reasoning_tokens"] == ug._core.count_tokens(THINK * 8) == 8
    assert used(guard, "alice", MODEL) == 51


def test_stream_abandoned_during_text_bills_thinking_and_text_received(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens, fake.reasoning_tokens = 100, 6
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    with client.messages.stream(
        model=MODEL, max_tokens=4000, thinking=THINKING, messages=MESSAGES
    ) as stream:
        for i, _ in enumerate(stream.text_stream):
            if i + 1 == 3:
                break
    billed = stream.usage_billed
    assert billed["output_tokens"] == 6 + 3 and billed["reasoning_tokens"] == 6
    assert used(guard, "alice", MODEL) == 21 + 9


def test_everything_else_passes_through(fake, make_guard):
    raw = sdk(fake)
    client = GuardedAnthropic(raw, make_guard(policy()), user="alice")
    assert client.models is raw.models
    # beta.messages is guarded like messages (Pydantic AI calls it); the rest of beta passes
    # through, and so do a batch job's reads (its create is refused: test_..._twins.py).
    assert client.beta.files is raw.beta.files
    assert client.beta.messages.batches.list == raw.beta.messages.batches.list
    assert client.messages.batches.retrieve == raw.messages.batches.retrieve
    assert client.messages.count_tokens == raw.messages.count_tokens


def test_beta_messages_create_is_guarded(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    client = GuardedAnthropic(sdk(fake), guard, user="alice")
    reply = client.beta.messages.create(model=MODEL, max_tokens=64_000, messages=MESSAGES)
    sent = fake.bodies("/v1/messages")[0]["max_tokens"]
    assert 0 < sent < 400 and reply.usage_limits["capped"] is True
    assert used(guard, "alice", MODEL) == 21 + sent
