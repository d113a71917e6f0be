"""The OpenAI SDK's other ways to stream, guarded like `create(stream=True)`:
`with_streaming_response.create` / `.parse` (plain and `stream=True`, reached from the
resource, `chat` or the client) and the `stream(...)` helpers of chat completions (also as
`beta.chat.completions`) and Responses: admitted and fitted before anything is sent, refused
when nothing is left, billed once from the reported usage, or for what an abandoned stream
delivered; a streamed response's body is read only through its metered stream."""

from __future__ import annotations

from typing import Any

import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from openai_clients import async_client, resource, sync_client
from provider_support import policy, reserved, used

GPT = "gpt-4o"
MESSAGES = [{"role": "user", "content": "Hi"}]
# (resource path, request, key of the output maximum)
KINDS = {
    "chat": ("chat.completions", {"messages": MESSAGES}, "max_completion_tokens"),
    "responses": ("responses", {"input": "Hi"}, "max_output_tokens"),
}


def spent(guard: ug.Guard) -> None:
    (left,) = [r["left"] for r in guard.usage("alice", GPT)["rules"] if r["metric"] == "tokens"]
    guard.admit("alice", GPT, prompt_tokens=left, max_tokens=0).bill(left, 0)


def sent_max(fake: FakeProvider, key: str) -> int:
    (request,) = fake.requests
    return int(request.body[key])


@pytest.mark.parametrize("kind", list(KINDS))
def test_with_streaming_response_is_guarded(fake: FakeProvider, make_guard: Any, kind: str) -> None:
    path, request, key = KINDS[kind]
    guard = make_guard(policy(tokens_a_day=400))
    streaming = resource(sync_client(fake, guard), path).with_streaming_response
    with streaming.create(model=GPT, **request) as response:
        assert response.parse().usage_billed["output_tokens"] == 12
    assert 12 < sent_max(fake, key) < 400  # fitted into what is left
    fake.reset()
    with streaming.create(model=GPT, stream=True, **request) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = response.parse()
        events = list(stream)
    assert len(events) > 12 and stream.usage_billed["input_tokens"] == 21
    assert used(guard, "alice", GPT) == 2 * (21 + 12) and reserved(guard, "alice", GPT) == 0
    fake.reset()
    spent(guard)
    for stream_it in (False, True):
        with pytest.raises(ug.UsageLimitError):
            with streaming.create(model=GPT, stream=stream_it, **request):
                pass
    assert fake.requests == []


def test_a_streamed_response_is_read_through_its_metered_stream(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(policy())
    client = sync_client(fake, guard)
    streaming = client.with_streaming_response.chat.completions  # from the client: the same
    with streaming.create(model=GPT, messages=MESSAGES, stream=True) as response:
        for name in ("read", "text", "json", "iter_bytes", "iter_lines", "iter_text"):
            with pytest.raises(TypeError, match="read through parse"):
                getattr(response, name)()
        with pytest.raises(TypeError):
            response.http_response.read()
    # Never parsed: nothing was delivered, the hold is given back.
    assert used(guard, "alice", GPT) == 0 and reserved(guard, "alice", GPT) == 0
    fake.output_tokens = 50
    with client.chat.with_streaming_response.completions.create(
        model=GPT, messages=MESSAGES, stream=True
    ) as response:
        for i, _ in enumerate(response.parse()):
            if i == 5:
                break
    assert used(guard, "alice", GPT) == 8 + 5 and reserved(guard, "alice", GPT) == 0


@pytest.mark.parametrize("kind", list(KINDS))
async def test_async_with_streaming_response_is_guarded(
    fake: FakeProvider, make_guard: Any, kind: str
) -> None:
    path, request, _ = KINDS[kind]
    guard = make_guard(policy())
    streaming = resource(async_client(fake, guard), path).with_streaming_response
    async with streaming.create(model=GPT, **request) as response:
        assert (await response.parse()).usage_billed["output_tokens"] == 12
    async with streaming.create(model=GPT, stream=True, **request) as response:
        stream = await response.parse()
        async for _ in stream:
            pass
    assert stream.usage_billed["output_tokens"] == 12
    calls = 2
    if hasattr(streaming, "parse"):  # chat's structured output (not on Responses)
        async with streaming.parse(model=GPT, **request) as response:
            assert (await response.parse()).usage_billed["output_tokens"] == 12
        calls += 1
    assert used(guard, "alice", GPT) == calls * (21 + 12)
    assert reserved(guard, "alice", GPT) == 0


@pytest.mark.parametrize(
    "path", ["chat.completions", "beta.chat.completions", "responses"], ids=lambda p: p
)
def test_stream_helpers_are_guarded(fake: FakeProvider, make_guard: Any, path: str) -> None:
    _, request, key = KINDS["responses" if path == "responses" else "chat"]
    guard = make_guard(policy(tokens_a_day=400))
    helper = resource(sync_client(fake, guard), path)
    with helper.stream(model=GPT, **request) as stream:
        kinds = {event.type for event in stream}
        assert stream.usage_billed["output_tokens"] == 12  # set as the stream settled
    assert kinds >= {"content.delta"} or kinds >= {"response.output_text.delta"}
    assert used(guard, "alice", GPT) == 21 + 12
    assert 12 < sent_max(fake, key) < 400  # fitted into what is left
    fake.reset()
    fake.output_tokens = 50
    with helper.stream(model=GPT, **request) as stream:
        for event in stream:
            if getattr(event, "delta", None) == WORD:
                break
    assert stream.usage_billed["output_tokens"] == 1  # billed on leaving the block
    assert reserved(guard, "alice", GPT) == 0
    fake.reset()
    spent(guard)
    with pytest.raises(ug.UsageLimitError):
        with helper.stream(model=GPT, **request):
            pass
    assert fake.requests == []


async def test_async_stream_helpers_are_guarded(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    client = async_client(fake, guard)
    async with client.beta.chat.completions.stream(model=GPT, messages=MESSAGES) as stream:
        async for _ in stream:
            pass
    assert (await stream.get_final_completion()).choices[0].message.content == WORD * 12
    async with client.responses.stream(model=GPT, input="Hi") as responses:
        async for _ in responses:
            pass
    assert stream.usage_billed["output_tokens"] == responses.usage_billed["output_tokens"] == 12
    assert used(guard, "alice", GPT) == 2 * (21 + 12) and reserved(guard, "alice", GPT) == 0


def test_beta_chat_parse_is_guarded(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    completion = sync_client(fake, guard).beta.chat.completions.parse(model=GPT, messages=MESSAGES)
    assert completion.usage_billed["output_tokens"] == 12
    assert used(guard, "alice", GPT) == 21 + 12
