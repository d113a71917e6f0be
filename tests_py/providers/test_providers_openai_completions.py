"""GuardedOpenAI's legacy `completions.create` (the real `openai` SDK, HTTP to the fake
provider): admitted with the prompt counted as sent, `max_tokens` fitted, billed from the
reported usage (plain, and streamed with the usage the wrapper asks for), refused before the
provider when nothing is left, released when the provider fails."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import policy, prompt_tokens, reserved, used
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI

MODEL = "gpt-3.5-turbo-instruct"
PROMPT = "Say hello a few times."


def document(tokens_a_day: int = 1_000_000) -> dict[str, Any]:
    doc = policy(tokens_a_day=tokens_a_day)
    doc["models"][MODEL] = {"provider": "openai", "max_output_tokens": 4096}
    rules = [{"metric": "tokens", "amount": tokens_a_day, "window": "day"}]
    doc["limits"]["direct"].append({"user": "alice", "model": MODEL, "rules": rules})
    return doc


def client(fake: FakeProvider, guard: Any) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice")


def test_plain_bills_reported_usage(fake, make_guard):
    guard = make_guard(document())
    reply = client(fake, guard).completions.create(model=MODEL, prompt=PROMPT, max_tokens=100)
    assert reply.choices[0].text == WORD * 12
    assert used(guard, "alice", MODEL) == 21 + 12
    assert reserved(guard, "alice", MODEL) == 0
    assert reply.usage_limits["capped"] is False
    assert fake.bodies("/v1/completions") == [{"model": MODEL, "prompt": PROMPT, "max_tokens": 100}]


def test_stream_asks_for_usage_bills_it_and_hides_the_usage_chunk(fake, make_guard):
    guard = make_guard(document())
    chunks = list(
        client(fake, guard).completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=100, stream=True
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == WORD * 12
    assert all(c.choices for c in chunks), "the usage-only chunk was not asked for"
    sent = fake.bodies("/v1/completions")[0]
    assert sent["stream_options"] == {"include_usage": True}
    assert used(guard, "alice", MODEL) == 21 + 12
    assert reserved(guard, "alice", MODEL) == 0


def test_fitted_to_what_is_left_and_refused_when_nothing_is(fake, make_guard):
    guard = make_guard(document(tokens_a_day=400))
    fake.output_tokens = 1000
    counted = prompt_tokens({"model": MODEL, "prompt": PROMPT}, "openai.completions", MODEL)
    reply = client(fake, guard).completions.create(model=MODEL, prompt=PROMPT, max_tokens=1000)
    lowered = fake.bodies("/v1/completions")[0]["max_tokens"]
    assert lowered == 400 - counted
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", MODEL) == 21 + lowered
    with pytest.raises(ug.UsageLimitError) as e:
        client(fake, guard).completions.create(model=MODEL, prompt=PROMPT, max_tokens=10)
    assert e.value.reason == "USAGE_LIMIT_REACHED"
    assert len(fake.bodies("/v1/completions")) == 1


def test_provider_error_releases(fake, make_guard):
    guard = make_guard(document())
    fake.refusal = (
        500,
        {},
        {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}},
    )
    with pytest.raises(openai.InternalServerError):
        client(fake, guard).completions.create(model=MODEL, prompt=PROMPT, max_tokens=50)
    assert used(guard, "alice", MODEL) == 0 and reserved(guard, "alice", MODEL) == 0


async def test_async_completions(fake, make_guard):
    guard = make_guard(document())
    sdk = openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    guarded = GuardedAsyncOpenAI(sdk, guard, user="alice")
    reply = await guarded.completions.create(model=MODEL, prompt=PROMPT, max_tokens=100)
    assert reply.choices[0].text == WORD * 12
    stream = await guarded.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=100, stream=True
    )
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    assert text == WORD * 12
    assert used(guard, "alice", MODEL) == 2 * (21 + 12)
    assert reserved(guard, "alice", MODEL) == 0
