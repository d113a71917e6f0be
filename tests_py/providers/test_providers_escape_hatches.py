"""The SDKs' ways around a guarded call, with the official `openai` and `anthropic` SDKs against
the fake provider: a stream's body read off its HTTP response, fields sent in `extra_body`
(an output maximum, `n`, `stream`, `stream_options`, `background`), a background response,
and the raw responses reached from the client. Each is metered like the keyword it stands
for, or refused before the provider sees the call; none is sent unmetered."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pydantic
import pytest
from anthropic.lib.streaming import MessageStream
from fake_provider import WORD, FakeProvider
from provider_support import policy, prompt_tokens, reserved, room, used
from usage_guard.anthropic import GuardedAnthropic
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI

MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
CLAUDE = "claude-haiku-4-5"
BODY_READERS = ("iter_bytes", "iter_lines", "iter_text", "iter_raw", "read")
BODY_FIELDS = ("text", "content", "stream", "extensions")


def openai_client(fake: FakeProvider, guard: Any) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice")


def anthropic_client(fake: FakeProvider, guard: Any) -> GuardedAnthropic:
    sdk = anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0)
    return GuardedAnthropic(sdk, guard, user="alice")


def assert_body_sealed(response: Any) -> None:
    for name in BODY_READERS + ("json",):
        with pytest.raises(TypeError, match=f"response.{name}: .*iterating the stream"):
            getattr(response, name)()
    for name in BODY_FIELDS:
        with pytest.raises(TypeError, match=f"response.{name}:"):
            getattr(response, name)


# -- a stream's HTTP response --------------------------------------------------------------


def test_a_streams_response_gives_its_headers_but_not_its_body(fake, make_guard):
    guard = make_guard(policy())
    fake.extra_headers = {"x-request-id": "req_7"}
    client = openai_client(fake, guard)
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert stream.response.status_code == 200
    assert stream.response.headers["x-request-id"] == "req_7"
    assert_body_sealed(stream.response)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == WORD * 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    responses = client.responses.create(model="gpt-4o", input="Hi", stream=True)
    assert_body_sealed(responses.response)
    responses.close()
    # httpx's raise_for_status returns the response: the sealed one, not the SDK's.
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert_body_sealed(stream.response.raise_for_status())
    stream.close()


def test_parse_cut_short_by_the_fitted_maximum_is_billed(fake, make_guard):
    """`parse` raises LengthFinishReasonError when the output maximum cuts the structured
    answer short, which the guard's fit causes on a small budget: the provider answered, and
    the answer in the error is billed (released, such calls were free however often made)."""
    document = policy()
    document["limits"] = {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-4o",
                "rules": [{"metric": "tokens", "amount": 1000, "window": "day"}],
            }
        ]
    }
    guard = make_guard(document)
    fake.output_tokens = 5000
    client = openai_client(fake, guard)
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(model="gpt-4o", messages=MESSAGES)
    sent = fake.bodies("/v1/chat/completions")[-1]["max_completion_tokens"]
    assert used(guard, "alice", "gpt-4o") == 21 + sent
    assert reserved(guard, "alice", "gpt-4o") == 0


class _Number(pydantic.BaseModel):
    """A structured answer the fake's `{"text": ...}` never validates as."""

    number: int


def test_parse_whose_answer_does_not_validate_is_billed(fake, make_guard):
    """The provider answered and the SDK's parse raised (a ValidationError): the answer is
    billed from the JSON the provider sent (released, any call whose schema the model misses
    was free however often made). Responses' `parse` too; the raw twin is guarded as well."""
    guard = make_guard(policy())
    client = openai_client(fake, guard)
    with pytest.raises(pydantic.ValidationError):
        client.chat.completions.parse(model="gpt-4o", messages=MESSAGES, response_format=_Number)
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    with pytest.raises(pydantic.ValidationError):
        client.responses.parse(model="gpt-4o", input="Hi", text_format=_Number)
    assert used(guard, "alice", "gpt-4o") == 2 * (21 + 12)
    # The raw twin hands over its response (whose own parse raises), billed all the same.
    raw = client.chat.completions.with_raw_response.parse(
        model="gpt-4o", messages=MESSAGES, response_format=_Number
    )
    assert used(guard, "alice", "gpt-4o") == 3 * (21 + 12)
    assert reserved(guard, "alice", "gpt-4o") == 0
    with pytest.raises(pydantic.ValidationError):
        raw.parse()


async def test_an_async_parse_whose_answer_does_not_validate_is_billed(fake, make_guard):
    guard = make_guard(policy())
    sdk = openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    client = GuardedAsyncOpenAI(sdk, guard, user="alice")
    with pytest.raises(pydantic.ValidationError):
        await client.chat.completions.parse(
            model="gpt-4o", messages=MESSAGES, response_format=_Number
        )
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reserved(guard, "alice", "gpt-4o") == 0


async def test_an_async_streams_response_is_sealed_too(fake, make_guard):
    guard = make_guard(policy())
    sdk = openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    client = GuardedAsyncOpenAI(sdk, guard, user="alice")
    stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    for name in ("aiter_bytes", "aiter_lines", "aiter_text", "aiter_raw", "aread"):
        with pytest.raises(TypeError, match=f"response.{name}:"):
            getattr(stream.response, name)()
    assert stream.response.status_code == 200
    chunks = [c async for c in stream]
    assert chunks and used(guard, "alice", "gpt-4o") == 33


def test_anthropic_streams_seal_their_response(fake, make_guard):
    guard = make_guard(policy())
    fake.extra_headers = {"request-id": "req_9"}
    client = anthropic_client(fake, guard)
    created = client.messages.create(model=CLAUDE, max_tokens=100, messages=MESSAGES, stream=True)
    assert_body_sealed(created.response)
    created.close()
    with client.messages.stream(model=CLAUDE, max_tokens=100, messages=MESSAGES) as stream:
        assert isinstance(stream, MessageStream)  # the SDK's class, its response sealed
        assert stream.request_id == "req_9"
        assert_body_sealed(stream.response)
        text = "".join(stream.text_stream)
    assert text == WORD * 12
    assert used(guard, "alice", CLAUDE) == 33  # the first one was closed before any chunk
    assert reserved(guard, "alice", CLAUDE) == 0


# -- extra_body ----------------------------------------------------------------------------


def test_an_output_maximum_in_extra_body_is_fitted_where_it_was_sent(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1000))
    fake.output_tokens = 5000
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_completion_tokens": 100_000}
    fake.input_tokens = prompt_tokens(request, "openai", "gpt-4o")
    client = openai_client(fake, guard)
    reply = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, extra_body={"max_completion_tokens": 100_000}
    )
    sent = fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"]
    assert sent == room(1000, request, "openai", "gpt-4o")
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", "gpt-4o") <= 1000


def test_n_in_extra_body_is_reserved_for_every_answer(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=2000))
    client = openai_client(fake, guard)
    client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_completion_tokens=1500, extra_body={"n": 2}
    )
    body = fake.bodies("/v1/chat/completions")[0]
    assert body["n"] == 2
    assert 2 * body["max_completion_tokens"] <= 2000  # two answers fit in what was left


def test_a_key_given_twice_with_different_values_is_refused(fake, make_guard):
    guard = make_guard(policy())
    claude = anthropic_client(fake, guard)
    with pytest.raises(ValueError, match="extra_body.max_tokens: 64000 conflicts with"):
        claude.messages.create(
            model=CLAUDE, max_tokens=100, messages=MESSAGES, extra_body={"max_tokens": 64000}
        )
    gpt = openai_client(fake, guard)
    with pytest.raises(ValueError, match="extra_body.stream: False conflicts with"):
        gpt.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, extra_body={"stream": False}
        )
    assert fake.requests == []
    assert reserved(guard, "alice", CLAUDE) == reserved(guard, "alice", "gpt-4o") == 0
    # The same value both ways is one value: sent.
    claude.messages.create(
        model=CLAUDE, max_tokens=100, messages=MESSAGES, extra_body={"max_tokens": 100}
    )
    assert fake.bodies("/v1/messages")[0]["max_tokens"] == 100


def test_omit_in_extra_body_cannot_delete_the_fitted_maximum(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1000))
    fake.output_tokens = 5000
    client = openai_client(fake, guard)
    client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, extra_body={"max_completion_tokens": openai.omit}
    )
    assert 0 < fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"] < 1000


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "anthropic"])
def test_stream_in_extra_body_is_a_metered_stream(fake, make_guard, api):
    guard = make_guard(policy())
    fake.output_tokens = 30
    gpt, claude = openai_client(fake, guard), anthropic_client(fake, guard)
    extra = {"extra_body": {"stream": True}}
    model = CLAUDE if api == "anthropic" else "gpt-4o"
    stream = {
        "chat": lambda: gpt.chat.completions.create(model=model, messages=MESSAGES, **extra),
        "completions": lambda: gpt.completions.create(model=model, prompt="Hi", **extra),
        "responses": lambda: gpt.responses.create(model=model, input="Hi", **extra),
        "anthropic": lambda: claude.messages.create(
            model=model, max_tokens=100, messages=MESSAGES, **extra
        ),
    }[api]()
    events = list(stream)
    assert len(events) > 3  # a stream, not its text in one string
    assert used(guard, "alice", model) == 21 + (16 if api == "completions" else 30)
    assert stream.usage_billed is not None


def test_stream_options_in_extra_body_still_report_usage(fake, make_guard):
    guard = make_guard(policy())
    client = openai_client(fake, guard)
    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=MESSAGES,
        stream=True,
        extra_body={"stream_options": {"include_usage": False}},
    )
    chunks = list(stream)
    assert fake.bodies("/v1/chat/completions")[0]["stream_options"] == {"include_usage": True}
    assert all(c.choices for c in chunks)  # the usage chunk the caller did not ask for: hidden
    assert used(guard, "alice", "gpt-4o") == 21 + 12


def test_a_raw_stream_asked_in_extra_body_is_refused(fake, make_guard):
    guard = make_guard(policy())
    raw = openai_client(fake, guard).chat.completions.with_raw_response
    with pytest.raises(TypeError, match="stream: with_raw_response"):
        raw.create(model="gpt-4o", messages=MESSAGES, extra_body={"stream": True})
    assert fake.requests == []


# -- background responses ------------------------------------------------------------------


@pytest.mark.parametrize(
    "how",
    [{"background": True}, {"extra_body": {"background": True}}],
    ids=["keyword", "extra_body"],
)
def test_a_background_response_is_refused(fake, make_guard, how):
    guard = make_guard(policy())
    client = openai_client(fake, guard)
    for create in (client.responses.create, client.responses.with_raw_response.create):
        with pytest.raises(ValueError, match="background: True is not accepted"):
            create(model="gpt-4o", input="Write a long essay.", **how)
    assert fake.requests == []
    assert reserved(guard, "alice", "gpt-4o") == 0


# -- raw responses reached from the client -------------------------------------------------


def test_raw_responses_from_the_client_are_guarded_like_the_resources(fake, make_guard):
    guard = make_guard(policy())
    client = openai_client(fake, guard)
    for raw_chat in (
        client.with_raw_response.chat.completions,
        client.chat.with_raw_response.completions,
    ):
        raw = raw_chat.create(model="gpt-4o", messages=MESSAGES)
        assert raw.parse().usage_billed is not None
        with pytest.raises(TypeError, match="stream: with_raw_response"):
            raw_chat.create(model="gpt-4o", messages=MESSAGES, stream=True)
    client.with_raw_response.responses.create(model="gpt-4o", input="Hi").parse()
    assert used(guard, "alice", "gpt-4o") == 3 * 33
    assert len(fake.requests) == 3
