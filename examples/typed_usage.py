"""The guarded clients keep the SDK's types: under `mypy --strict` (the project's checks run
it over this file) each answer is the SDK's type with the guard's attributes, each stream the
SDK's stream, so `reply.choices[0].message.content` and `reply.usage_limits["capped"]` are
checked. `assert_type` fails the check if any of them became `Any`.

    OPENAI_API_KEY=... python examples/typed_usage.py alice "Write a haiku about budgets."

Any OpenAI-compatible server works: set OPENAI_BASE_URL (e.g. http://localhost:11434/v1).
The Anthropic and Ollama functions are called the same way (tests_py/package/test_typing.py
runs every one against a local fake provider).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import usage_guard as ug
from anthropic.types import RawMessageStreamEvent
from ollama import ChatResponse
from openai import OpenAI
from openai.types.chat import ChatCompletionChunk
from typing_extensions import assert_type
from usage_guard.anthropic import (
    GuardedAnthropic,
    GuardedAsyncAnthropic,
    GuardedMessage,
    GuardedMessageStream,
)
from usage_guard.ollama import GuardedAsyncOllama, GuardedChatResponse, GuardedOllama
from usage_guard.openai import (
    GuardedAsyncOpenAI,
    GuardedAsyncStream,
    GuardedChatCompletion,
    GuardedOpenAI,
    GuardedStream,
)
from usage_guard.types import Billed, UsageLimits

HELLO = "Say hello."


def openai_chat(client: GuardedOpenAI, model: str) -> GuardedChatCompletion:
    """One chat call: the SDK's `ChatCompletion`, with what the guard adds."""
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": HELLO}], max_completion_tokens=50
    )
    assert_type(reply, GuardedChatCompletion)
    assert_type(reply.choices[0].message.content, Optional[str])
    assert_type(reply.usage_limits, UsageLimits)
    assert_type(reply.usage_limits["capped"], bool)
    assert_type(reply.usage_billed, Optional[Billed])
    return reply


def openai_stream(client: GuardedOpenAI, model: str) -> tuple[str, Optional[UsageLimits]]:
    """A streamed chat call: the SDK's `Stream` of chunks, billed when it ends."""
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": HELLO}], stream=True
    )
    assert_type(stream, GuardedStream[ChatCompletionChunk])
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    return text, stream.usage_limits


async def openai_async(client: GuardedAsyncOpenAI, model: str) -> tuple[str, str]:
    """The same from asyncio: an answer, then a stream."""
    reply = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": HELLO}]
    )
    assert_type(reply, GuardedChatCompletion)
    stream = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": HELLO}], stream=True
    )
    assert_type(stream, GuardedAsyncStream[ChatCompletionChunk])
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    return reply.choices[0].message.content or "", text


def anthropic_message(client: GuardedAnthropic, model: str) -> GuardedMessage:
    """One message: the SDK's `Message`, with what the guard adds."""
    message = client.messages.create(
        model=model, max_tokens=50, messages=[{"role": "user", "content": HELLO}]
    )
    assert_type(message, GuardedMessage)
    assert_type(message.usage.output_tokens, int)
    assert_type(message.usage_warnings, list[ug.types.RuleWarning])
    return message


def anthropic_stream(client: GuardedAnthropic, model: str) -> tuple[str, GuardedMessageStream]:
    """`messages.stream(...)`: the SDK's `MessageStream`, billed when the block exits."""
    with client.messages.stream(
        model=model, max_tokens=50, messages=[{"role": "user", "content": HELLO}]
    ) as stream:
        assert_type(stream, GuardedMessageStream)
        text = "".join(stream.text_stream)
    return text, stream


async def anthropic_async(client: GuardedAsyncAnthropic, model: str) -> str:
    """`messages.create(stream=True)` from asyncio: the SDK's raw events."""
    events = await client.messages.create(
        model=model, max_tokens=50, messages=[{"role": "user", "content": HELLO}], stream=True
    )
    kinds = [event.type async for event in events]
    assert_type(events.usage_billed, Optional[Billed])
    return ",".join(kinds)


def ollama_chat(client: GuardedOllama, model: str) -> GuardedChatResponse:
    """An Ollama chat: the SDK's `ChatResponse`, with what the guard adds."""
    reply = client.chat(model, messages=[{"role": "user", "content": HELLO}])
    assert_type(reply, GuardedChatResponse)
    assert_type(reply.message.content, Optional[str])
    assert_type(reply.usage_degraded, Optional[str])
    return reply


async def ollama_stream_async(client: GuardedAsyncOllama, model: str) -> str:
    """A streamed Ollama chat from asyncio: the SDK's `ChatResponse` parts."""
    parts = await client.chat(model, messages=[{"role": "user", "content": HELLO}], stream=True)
    text = ""
    async for part in parts:
        assert_type(part, ChatResponse)
        text += part.message.content or ""
    return text


def unused_event_type(event: RawMessageStreamEvent) -> str:
    """The SDK's own event types stay usable beside the guarded ones."""
    return event.type


if __name__ == "__main__":
    user = sys.argv[1] if len(sys.argv) > 1 else "alice"
    guard = ug.Guard(ug.Policy.load(Path(__file__).with_name("policy.toml")))
    client = GuardedOpenAI(OpenAI(), guard, user=user)
    reply = openai_chat(client, "gpt-5")
    print(reply.choices[0].message.content, reply.usage_limits["capped"], reply.usage_billed)
