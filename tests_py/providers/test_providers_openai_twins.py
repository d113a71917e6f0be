"""GuardedOpenAI's remaining generation paths (the real `openai` SDK, HTTP to the fake
provider): the raw and streaming twins of the legacy `completions` and of `embeddings`,
reached from the resource and from the client, are guarded like chat's (admitted and fitted
before anything is sent, refused when nothing is left, billed from the answer; a raw stream
refused); `beta.responses.create` is guarded like `responses.create`; Responses' `compact` and
`connect` and `batches.create` are refused before anything is sent, while the reads pass."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from openai_clients import async_client, resource, sync_client
from provider_support import policy, reserved, used

GPT = "gpt-4o"
EMBEDDER = "text-embedding-3-small"
MESSAGES = [{"role": "user", "content": "Hi"}]
BATCH = {"input_file_id": "file-1", "endpoint": "/v1/responses", "completion_window": "24h"}


def spent(guard: ug.Guard, model: str) -> None:
    (left,) = [r["left"] for r in guard.usage("alice", model)["rules"] if r["metric"] == "tokens"]
    guard.admit("alice", model, prompt_tokens=left, max_tokens=0).bill(left, 0)


# -- legacy completions and embeddings -------------------------------------------------------

RAW_COMPLETIONS = ["completions.with_raw_response", "with_raw_response.completions"]
STREAMING_COMPLETIONS = [
    "completions.with_streaming_response",
    "with_streaming_response.completions",
]


@pytest.mark.parametrize("path", RAW_COMPLETIONS)
def test_raw_completions_are_guarded(fake: FakeProvider, make_guard: Any, path: str) -> None:
    guard = make_guard(policy(tokens_a_day=400))
    raw = resource(sync_client(fake, guard), path)
    reply = raw.create(model=GPT, prompt="Hi", max_tokens=1000).parse()
    assert reply.choices[0].text == WORD * 12
    assert reply.usage_billed["output_tokens"] == 12 and reply.usage_limits is not None
    assert 12 < fake.bodies("/v1/completions")[0]["max_tokens"] < 400  # fitted to what is left
    assert used(guard, "alice", GPT) == 21 + 12 and reserved(guard, "alice", GPT) == 0
    fake.reset()
    with pytest.raises(TypeError, match="stream: with_raw_response"):
        raw.create(model=GPT, prompt="Hi", stream=True)
    spent(guard, GPT)
    with pytest.raises(ug.UsageLimitError):
        raw.create(model=GPT, prompt="Hi")
    assert fake.requests == []


@pytest.mark.parametrize("path", STREAMING_COMPLETIONS)
def test_streaming_completions_are_guarded(fake: FakeProvider, make_guard: Any, path: str) -> None:
    guard = make_guard(policy(tokens_a_day=400))
    streaming = resource(sync_client(fake, guard), path)
    with streaming.create(model=GPT, prompt="Hi", max_tokens=1000) as response:
        assert response.parse().usage_billed["output_tokens"] == 12
    assert 12 < fake.bodies("/v1/completions")[0]["max_tokens"] < 400
    with streaming.create(model=GPT, prompt="Hi", stream=True) as response:
        with pytest.raises(TypeError, match="read through parse"):
            response.read()
        stream = response.parse()
        text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
    assert text == WORD * 12 and stream.usage_billed["output_tokens"] == 12
    assert fake.bodies("/v1/completions")[1]["stream_options"] == {"include_usage": True}
    assert used(guard, "alice", GPT) == 2 * (21 + 12) and reserved(guard, "alice", GPT) == 0
    fake.reset()
    spent(guard, GPT)
    for stream_it in (False, True):
        with pytest.raises(ug.UsageLimitError):
            with streaming.create(model=GPT, prompt="Hi", stream=stream_it):
                pass
    assert fake.requests == []


@pytest.mark.parametrize("reach", ["resource", "client"])
def test_embeddings_twins_are_guarded(fake: FakeProvider, make_guard: Any, reach: str) -> None:
    guard = make_guard(policy(tokens_a_day=1000))
    client = sync_client(fake, guard)
    if reach == "resource":
        raw, streaming = (
            client.embeddings.with_raw_response,
            client.embeddings.with_streaming_response,
        )
    else:
        raw, streaming = (
            client.with_raw_response.embeddings,
            client.with_streaming_response.embeddings,
        )
    reply = raw.create(model=EMBEDDER, input=["a", "b"]).parse()
    assert len(reply.data) == 2 and reply.usage_billed["input_tokens"] == 21
    with streaming.create(model=EMBEDDER, input="a") as response:
        assert response.parse().usage_billed["input_tokens"] == 21
    assert used(guard, "alice", EMBEDDER) == 2 * 21 and reserved(guard, "alice", EMBEDDER) == 0
    fake.reset()
    spent(guard, EMBEDDER)
    with pytest.raises(ug.UsageLimitError):
        raw.create(model=EMBEDDER, input="a")
    with pytest.raises(ug.UsageLimitError):
        with streaming.create(model=EMBEDDER, input="a"):
            pass
    assert fake.requests == []


async def test_async_completions_and_embeddings_twins_are_guarded(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(policy())
    client = async_client(fake, guard)
    raw = await client.completions.with_raw_response.create(model=GPT, prompt="Hi")
    assert raw.parse().usage_billed["output_tokens"] == 12  # a raw answer is read already
    async with client.with_streaming_response.completions.create(
        model=GPT, prompt="Hi", stream=True
    ) as response:
        stream = await response.parse()
        chunks = [chunk async for chunk in stream]
    assert chunks and stream.usage_billed["output_tokens"] == 12
    assert used(guard, "alice", GPT) == 2 * (21 + 12)
    raw = await client.with_raw_response.embeddings.create(model=EMBEDDER, input="a")
    assert raw.parse().usage_billed["input_tokens"] == 21
    async with client.embeddings.with_streaming_response.create(
        model=EMBEDDER, input="a"
    ) as response:
        assert (await response.parse()).usage_billed["input_tokens"] == 21
    assert used(guard, "alice", EMBEDDER) == 2 * 21
    assert reserved(guard, "alice", GPT) == reserved(guard, "alice", EMBEDDER) == 0


# -- beta.responses ----------------------------------------------------------------------------


def test_beta_responses_are_guarded_like_responses(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy(tokens_a_day=400))
    client = sync_client(fake, guard)
    reply = client.beta.responses.create(model=GPT, input="Hi", max_output_tokens=1000)
    assert reply.output[0].content[0].text == WORD * 12
    assert reply.usage_billed["output_tokens"] == 12
    assert 12 < fake.bodies("/v1/responses")[0]["max_output_tokens"] < 400  # fitted
    stream = client.beta.responses.create(model=GPT, input="Hi", stream=True)
    assert [event for event in stream] and stream.usage_billed["output_tokens"] == 12
    for raw in (client.beta.with_raw_response, client.with_raw_response.beta):
        assert raw.responses.create(model=GPT, input="Hi").parse().usage_billed is not None
        with pytest.raises(TypeError, match="stream: with_raw_response"):
            raw.responses.create(model=GPT, input="Hi", stream=True)
    streaming = client.beta.responses.with_streaming_response
    with streaming.create(model=GPT, input="Hi") as response:
        assert response.parse().usage_billed["output_tokens"] == 12
    assert used(guard, "alice", GPT) == 5 * (21 + 12) and reserved(guard, "alice", GPT) == 0
    fake.reset()
    with pytest.raises(ValueError, match="background: True is not accepted"):
        client.beta.responses.create(model=GPT, input="Hi", background=True)
    with pytest.raises(ValueError, match="multi_agent: a multi-agent response"):
        client.beta.responses.create(model=GPT, input="Hi", multi_agent={"enabled": True})
    spent(guard, GPT)
    with pytest.raises(ug.UsageLimitError):
        client.beta.responses.create(model=GPT, input="Hi")
    with pytest.raises(ug.UsageLimitError):
        client.with_streaming_response.beta.responses.create(model=GPT, input="Hi").__enter__()
    assert fake.requests == []


async def test_async_beta_responses_are_guarded(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    client = async_client(fake, guard)
    reply = await client.beta.responses.create(model=GPT, input="Hi")
    stream = await client.beta.responses.create(model=GPT, input="Hi", stream=True)
    events = [event async for event in stream]
    assert events and reply.usage_billed["output_tokens"] == stream.usage_billed["output_tokens"]
    assert used(guard, "alice", GPT) == 2 * (21 + 12) and reserved(guard, "alice", GPT) == 0


# -- refused: compaction, WebSocket sessions, batch jobs ---------------------------------------

COMPACTIONS = [
    "responses",
    "responses.with_raw_response",
    "responses.with_streaming_response",
    "with_raw_response.responses",
    "beta.responses",
    "beta.responses.with_raw_response",
    "with_streaming_response.beta.responses",
]


@pytest.mark.parametrize("path", COMPACTIONS)
def test_compaction_is_refused(fake: FakeProvider, make_guard: Any, path: str) -> None:
    guard = make_guard(policy())
    compact = resource(sync_client(fake, guard), path).compact
    with pytest.raises(TypeError, match=r"compact \(a compaction generates tokens\) is not"):
        compact(model=GPT, input="Hi")
    assert fake.requests == [] and reserved(guard, "alice", GPT) == 0


@pytest.mark.parametrize("path", ["responses", "beta.responses"])
def test_websocket_sessions_are_refused_and_reads_pass(
    fake: FakeProvider, make_guard: Any, path: str
) -> None:
    client = sync_client(fake, make_guard(policy()))
    responses = resource(client, path)
    with pytest.raises(TypeError, match=rf"{path}.connect .*call {path}.create\(stream=True\)"):
        responses.connect()
    assert fake.requests == []
    # Reads reach the provider (the fake knows none of them: 404).
    with pytest.raises(openai.NotFoundError):
        responses.cancel("resp_1")
    with pytest.raises(openai.NotFoundError):
        responses.input_tokens.count(model=GPT, input="Hi")
    with pytest.raises(openai.NotFoundError):
        responses.with_raw_response.cancel("resp_1")
    assert len(fake.requests) == 3


@pytest.mark.parametrize(
    "path",
    [
        "batches",
        "batches.with_raw_response",
        "batches.with_streaming_response",
        "with_raw_response.batches",
        "with_streaming_response.batches",
    ],
)
def test_batch_jobs_are_refused_and_reads_pass(
    fake: FakeProvider, make_guard: Any, path: str
) -> None:
    batches = resource(sync_client(fake, make_guard(policy())), path)
    with pytest.raises(TypeError, match=r"batches\..*a batch job.*one by one"):
        batches.create(**BATCH)
    assert fake.requests == []
    with pytest.raises(openai.NotFoundError):
        result = batches.cancel("batch_1")
        result.__enter__()  # a streaming twin sends on entering its block
    assert len(fake.requests) == 1


async def test_async_refusals(fake: FakeProvider, make_guard: Any) -> None:
    client = async_client(fake, make_guard(policy()))
    for call in (
        lambda: client.responses.compact(model=GPT, input="Hi"),
        lambda: client.beta.responses.with_raw_response.compact(model=GPT, input="Hi"),
        lambda: client.responses.connect(),
        lambda: client.batches.create(**BATCH),
        lambda: client.with_raw_response.batches.create(**BATCH),
    ):
        with pytest.raises(TypeError, match="is not metered, so a guarded client refuses it"):
            await call()
    assert fake.requests == []
