"""The official `ollama` client, wrapped by GuardedOllama, talking HTTP to the fake provider."""

from __future__ import annotations

import ollama
import pytest
import usage_guard as ug
from fake_provider import THINK, WORD
from provider_support import policy, prompt_tokens, reserved, used
from usage_guard.ollama import GuardedAsyncOllama, GuardedOllama

MODEL = "llama3.2"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]


def test_chat_bills_reported_counts(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    reply = client.chat(MODEL, messages=MESSAGES)
    assert reply.message.content == WORD * 12
    assert used(guard, "alice", MODEL) == 21 + 12
    assert reply.usage_limits["capped"] is False
    assert reserved(guard, "alice", MODEL) == 0


def test_refused_call_never_reaches_the_server(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=50))
    for model in (MODEL, "nomic-embed-text"):
        guard.admit("alice", model, prompt_tokens=50, max_tokens=0).bill(50, 0)
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    for call in (
        lambda: client.chat(MODEL, messages=MESSAGES),
        lambda: client.generate(MODEL, "hi", stream=True),
        lambda: client.embed("nomic-embed-text", "hi", user="alice"),
    ):
        with pytest.raises(ug.UsageLimitError):
            call()
    assert fake.requests == []


def test_fitted_generate_sets_num_predict_and_is_capped(fake, make_guard):
    # A call without an output maximum may take all that is left (not the default half).
    guard = make_guard({**policy(tokens_a_day=400), "settings": {"uncapped_output": "model"}})
    fake.output_tokens = 10_000
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    reply = client.generate(MODEL, "Say hello.", options={"temperature": 0.2})
    body = fake.bodies("/api/generate")[0]
    assert body["options"]["temperature"] == 0.2
    limit = 400 - prompt_tokens({"model": MODEL, "prompt": "Say hello."}, "ollama.generate", MODEL)
    assert 300 < body["options"]["num_predict"] <= limit
    assert reply.done_reason == "length"
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", MODEL) == 21 + body["options"]["num_predict"]


def test_stream_bills_final_counts_once(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    stream = client.chat(MODEL, messages=MESSAGES, stream=True, user="bob")
    assert fake.requests == []  # an Ollama stream is sent at its first chunk
    text = "".join(part.message.content for part in stream)
    assert text == WORD * 12
    assert "user" not in fake.bodies("/api/chat")[0]
    assert used(guard, "bob", MODEL) == 33 and used(guard, "alice", MODEL) == 0
    stream.close()
    assert used(guard, "bob", MODEL) == 33


def test_stream_abandoned_after_n_chunks_bills_n_chunks(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens, n = 100, 6
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    stream = client.generate(MODEL, "Say hello.", stream=True)
    got = []
    for part in stream:
        got.append(part.response)
        if len(got) == n:
            break
    stream.close()
    count = prompt_tokens(
        {"model": MODEL, "prompt": "Say hello.", "stream": True}, "ollama.generate", MODEL
    )
    assert used(guard, "alice", MODEL) == count + n


def test_stream_never_started_is_released(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    stream = client.chat(MODEL, messages=MESSAGES, stream=True)
    assert reserved(guard, "alice", MODEL) > 0
    stream.close()
    assert fake.requests == []
    assert used(guard, "alice", MODEL) == 0 and reserved(guard, "alice", MODEL) == 0


def test_broken_stream_bills_what_arrived(fake, make_guard):
    guard = make_guard(policy())
    fake.output_tokens, fake.break_after = 40, 2
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    got = []
    with pytest.raises(Exception) as e:
        for part in client.chat(MODEL, messages=MESSAGES, stream=True):
            got.append(part.message.content)
    assert not isinstance(e.value, ug.UsageLimitError)
    assert len(got) == 2
    count = prompt_tokens({"model": MODEL, "messages": MESSAGES, "stream": True}, "ollama", MODEL)
    assert used(guard, "alice", MODEL) == count + 2


def test_embed_bills_input(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    reply = client.embed("nomic-embed-text", ["a", "b", "c"])
    assert len(reply.embeddings) == 3
    assert used(guard, "alice", "nomic-embed-text") == 21
    # The legacy endpoint reached the server unmetered; it is refused, nothing sent.
    with pytest.raises(TypeError, match="legacy endpoint"):
        client.embeddings("nomic-embed-text", "a text")
    assert [r.path for r in fake.requests] == ["/api/embed"]


def test_provider_error_releases(fake, make_guard):
    guard = make_guard(policy())
    fake.refusal = (500, {}, {"error": "model crashed"})
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    with pytest.raises(ollama.ResponseError):
        client.chat(MODEL, messages=MESSAGES)
    with pytest.raises(ollama.ResponseError):
        list(client.chat(MODEL, messages=MESSAGES, stream=True))
    assert len(fake.requests) == 2
    assert used(guard, "alice", MODEL) == 0 and reserved(guard, "alice", MODEL) == 0


async def test_async_agrees_with_sync(fake, make_guard):
    fake.output_tokens = 10_000
    sync_guard, async_guard = (
        make_guard(policy(tokens_a_day=300)),
        make_guard(policy(tokens_a_day=300)),
    )
    sync_reply = GuardedOllama(ollama.Client(host=fake.url), sync_guard, user="alice").chat(
        MODEL, messages=MESSAGES
    )
    client = GuardedAsyncOllama(ollama.AsyncClient(host=fake.url), async_guard, user="alice")
    async_reply = await client.chat(MODEL, messages=MESSAGES)
    first, second = fake.bodies("/api/chat")
    assert first == second
    assert sync_reply.usage_limits == async_reply.usage_limits
    assert async_reply.usage_limits["capped"] is True

    fake.output_tokens, n = 50, 4
    sync_guard, async_guard = make_guard(policy()), make_guard(policy())
    client = GuardedAsyncOllama(ollama.AsyncClient(host=fake.url), async_guard, user="alice")
    sync_stream = GuardedOllama(ollama.Client(host=fake.url), sync_guard, user="alice").generate(
        MODEL, "Say hello.", stream=True
    )
    for i, _ in enumerate(sync_stream):
        if i + 1 == n:
            break
    sync_stream.close()
    stream = await client.generate(MODEL, "Say hello.", stream=True)
    got = 0
    async for _ in stream:
        got += 1
        if got == n:
            break
    await stream.aclose()
    count = prompt_tokens(
        {"model": MODEL, "prompt": "Say hello.", "stream": True}, "ollama.generate", MODEL
    )
    assert used(async_guard, "alice", MODEL) == used(sync_guard, "alice", MODEL) == count + n


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_is_billed_as_reasoning(fake, make_guard, stream):
    guard = make_guard(policy())
    fake.output_tokens, fake.reasoning_tokens = 20, 7
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    target = client.chat(MODEL, messages=MESSAGES, think=True, stream=stream)
    if stream:
        parts = list(target)
        assert "".join(p.message.thinking or "" for p in parts) == THINK * 7
    else:
        assert target.message.thinking == THINK * 7
    assert fake.bodies("/api/chat")[0]["think"] is True
    billed = target.usage_billed
    assert (billed["output_tokens"], billed["reasoning_tokens"]) == (20, 7)
    assert used(guard, "alice", MODEL) == 41


def test_positional_and_keyword_arguments(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    with pytest.raises(TypeError):
        client.chat(MODEL, model=MODEL, messages=MESSAGES)
    assert fake.requests == [] and reserved(guard, "alice", MODEL) == 0
    client.generate(model=MODEL, prompt="hi", options={"num_predict": 5})
    assert fake.bodies("/api/generate")[0]["options"]["num_predict"] == 5
    assert used(guard, "alice", MODEL) == 21 + 5


def test_everything_else_passes_through(fake, make_guard):
    raw = ollama.Client(host=fake.url)
    client = GuardedOllama(raw, make_guard(policy()), user="alice")
    assert client.list == raw.list and client.pull == raw.pull
    assert client.client is raw
    with pytest.raises(ollama.ResponseError):
        client.show(MODEL)  # not guarded: sent as is (the fake has no /api/show)
    assert [r.path for r in fake.requests] == ["/api/show"]
