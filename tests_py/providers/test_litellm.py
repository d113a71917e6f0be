"""usage_guard.litellm with the real `litellm` SDK (completions, text completions, the
Responses API and embeddings, async and sync) against the fake provider: admitted and fitted
before the call, billed once from the reported usage, refused with `UsageLimitError`, other
call types refused, and N concurrent callers on a small budget never billed past it."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch

litellm = pytest.importorskip("litellm")  # Python 3.10 and later
import usage_guard as ug  # noqa: E402
from doc_blocks import run_by  # noqa: E402
from fake_provider import WORD, FakeProvider  # noqa: E402
from provider_support import policy, prompt_tokens, reserved, used  # noqa: E402
from usage_guard.litellm import UsageGuardHandler  # noqa: E402

# LiteLLM's logging worker (it runs the success callbacks) binds to the first event loop it
# sees: every test of the module runs on one loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")

GPT = "gpt-4o"
MESSAGES = [{"role": "user", "content": "Say hello."}]


# One handler for the module, as a process has one: LiteLLM keeps the callbacks it first saw
# for its success and failure events. Each test gives it a new guard.
HANDLER = UsageGuardHandler()


@pytest.fixture
def handler(make_guard: Any) -> Any:
    def install(tokens_a_day: int) -> tuple[ug.Guard, UsageGuardHandler]:
        guard = make_guard(policy(tokens_a_day=tokens_a_day))
        HANDLER.guard = guard
        litellm.callbacks = [HANDLER]
        return guard, HANDLER

    yield install
    litellm.callbacks = []


async def call(fake: FakeProvider, **kw: Any) -> Any:
    return await litellm.acompletion(
        model=f"openai/{GPT}", messages=MESSAGES, api_base=f"{fake.url}/v1", api_key="k", **kw
    )


async def settled(guard: ug.Guard, user: str = "alice") -> None:
    """Waits for LiteLLM's success callbacks (it runs them as background tasks)."""
    for _ in range(200):
        if reserved(guard, user, GPT) == 0:
            return
        await asyncio.sleep(0.02)


async def test_fitted_billed_once(fake: FakeProvider, handler: Any) -> None:
    guard, _ = handler(400)
    fake.output_tokens = 10_000
    reply = await call(fake, user="alice")
    sent = fake.requests[0].body["max_completion_tokens"]
    assert 0 < sent < 400 and reply.choices[0].message.content == WORD * sent
    await settled(guard)
    assert used(guard, "alice", GPT) == 21 + sent


async def test_refused_before_the_provider(fake: FakeProvider, handler: Any) -> None:
    guard, _ = handler(50)
    guard.admit("alice", GPT, prompt_tokens=50, max_tokens=0).bill(50, 0)
    with pytest.raises(Exception) as raised:
        await call(fake, user="alice")
    assert isinstance(raised.value, ug.UsageLimitError), repr(raised.value)
    assert fake.requests == []


async def test_a_stream_is_billed_at_its_end(fake: FakeProvider, handler: Any) -> None:
    guard, _ = handler(100_000)
    stream = await call(fake, user="bob", stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream])
    assert text == WORD * 12
    await settled(guard, "bob")
    assert 12 < used(guard, "bob", GPT) <= 12 + 21


async def test_an_abandoned_stream_is_released(fake: FakeProvider, handler: Any) -> None:
    """LiteLLM reports neither success nor failure for a stream left before its end: its
    hold is released when LiteLLM lets the call go, not left to expire."""
    guard, handler_ = handler(100_000)
    fake.output_tokens = 50
    stream = await call(fake, user="bob", stream=True)
    async for _chunk in stream:
        break
    assert reserved(guard, "bob", GPT) > 0
    del stream, _chunk
    for _ in range(100):
        gc.collect()
        if reserved(guard, "bob", GPT) == 0:
            break
        await asyncio.sleep(0.02)
    assert reserved(guard, "bob", GPT) == 0
    assert handler_._tickets == {}


def sync_call(fake: FakeProvider, **kw: Any) -> Any:
    return litellm.completion(
        model=f"openai/{GPT}", messages=MESSAGES, api_base=f"{fake.url}/v1", api_key="k", **kw
    )


async def test_a_sync_completion_is_fitted_and_billed_once(
    fake: FakeProvider, handler: Any
) -> None:
    guard, _ = handler(400)
    fake.output_tokens = 10_000
    reply = sync_call(fake, user="alice")
    sent = fake.requests[0].body["max_completion_tokens"]
    assert 0 < sent < 400 and reply.choices[0].message.content == WORD * sent
    await settled(guard)
    assert used(guard, "alice", GPT) == 21 + sent
    stream = sync_call(fake, user="alice", stream=True, max_tokens=5)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream) == WORD * 5
    await settled(guard)
    # LiteLLM reports a stream's usage by its own count of the prompt (as for acompletion).
    assert 5 < used(guard, "alice", GPT) - (21 + sent) <= 5 + 21


async def test_a_sync_completion_is_refused_before_the_provider(
    fake: FakeProvider, handler: Any
) -> None:
    guard, _ = handler(50)
    guard.admit("alice", GPT, prompt_tokens=50, max_tokens=0).bill(50, 0)
    with pytest.raises(Exception) as raised:
        sync_call(fake, user="alice")
    assert isinstance(raised.value, ug.UsageLimitError), repr(raised.value)
    assert fake.requests == []


async def test_a_sync_completion_liteLLM_runs_no_rules_for_is_metered_too(
    fake: FakeProvider, handler: Any
) -> None:
    """LiteLLM runs its pre-call rules only when the first message is a dict with "content":
    a conversation that starts with a tool-call turn, or `Message` objects, is admitted (by
    the wrapped `litellm.completion`) and billed once all the same; past the limit, refused
    before the provider."""
    guard, _ = handler(400)
    tool_turn = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "user", "content": "Say hello."},
    ]
    base = {"model": f"openai/{GPT}", "api_base": f"{fake.url}/v1", "api_key": "k"}
    litellm.completion(messages=tool_turn, user="alice", max_tokens=10, **base)
    await settled(guard)
    assert used(guard, "alice", GPT) == 21 + 10 and len(fake.requests) == 1
    message = litellm.Message(role="user", content="Say hello.")
    litellm.completion(messages=[message], user="alice", max_tokens=10, **base)
    await settled(guard)
    assert used(guard, "alice", GPT) == 2 * (21 + 10)
    guard.admit("alice", GPT, prompt_tokens=400 - 62, max_tokens=0).bill(400 - 62, 0)
    for messages in (tool_turn, [message]):
        with pytest.raises(ug.UsageLimitError):
            litellm.completion(messages=messages, user="alice", **base)
    assert len(fake.requests) == 2


async def settled_on(guard: ug.Guard, model: str) -> None:
    for _ in range(200):
        if reserved(guard, "alice", model) == 0:
            return
        await asyncio.sleep(0.02)


async def test_text_completions_responses_and_embeddings_are_fitted_and_billed(
    fake: FakeProvider, handler: Any
) -> None:
    guard, handler_ = handler(1000)
    fake.output_tokens = 10_000
    base = {"api_base": f"{fake.url}/v1", "api_key": "k", "user": "alice"}
    await litellm.atext_completion(model=f"openai/{GPT}", prompt="Hi", max_tokens=5000, **base)
    await settled(guard)
    sent = fake.requests[-1].body["max_tokens"]
    assert 0 < sent < 1000 and used(guard, "alice", GPT) == 21 + sent
    # Without max_tokens: LiteLLM's (and the completions API's) default, 16, is what the guard
    # reserves, and it is sent (a chat model's text completion goes out as a chat completion).
    guard, _ = handler(1000)
    litellm.text_completion(model=f"openai/{GPT}", prompt="Hi", **base)
    await settled(guard)
    assert fake.requests[-1].body["max_tokens"] == 16
    assert used(guard, "alice", GPT) == 21 + 16

    guard, _ = handler(1000)
    await litellm.aresponses(model=f"openai/{GPT}", input="Hi", max_output_tokens=5000, **base)
    await settled(guard)
    sent = fake.requests[-1].body["max_output_tokens"]
    assert 0 < sent < 1000 and used(guard, "alice", GPT) == 21 + sent
    guard, _ = handler(1000)
    litellm.responses(model=f"openai/{GPT}", input="Hi", max_output_tokens=5000, **base)
    await settled(guard)
    sent = fake.requests[-1].body["max_output_tokens"]
    assert 0 < sent < 1000 and used(guard, "alice", GPT) == 21 + sent

    embed = "openai/text-embedding-3-small"
    await litellm.aembedding(model=embed, input=["a", "b"], **base)
    litellm.embedding(model=embed, input=["a"], **base)
    await settled_on(guard, "text-embedding-3-small")
    assert used(guard, "alice", "text-embedding-3-small") == 2 * 21
    assert handler_._tickets == {}


async def test_every_metered_call_type_is_refused_past_the_limit(
    fake: FakeProvider, handler: Any
) -> None:
    guard, _ = handler(50)
    for model in (GPT, "text-embedding-3-small"):
        guard.admit("alice", model, prompt_tokens=50, max_tokens=0).bill(50, 0)
    base = {"api_base": f"{fake.url}/v1", "api_key": "k", "user": "alice"}
    calls = [
        lambda: litellm.atext_completion(model=f"openai/{GPT}", prompt="Hi", **base),
        lambda: litellm.aresponses(model=f"openai/{GPT}", input="Hi", **base),
        lambda: litellm.aembedding(model="openai/text-embedding-3-small", input="a", **base),
        lambda: asyncio.to_thread(
            litellm.text_completion, model=f"openai/{GPT}", prompt="Hi", **base
        ),
        lambda: asyncio.to_thread(
            litellm.embedding, model="openai/text-embedding-3-small", input="a", **base
        ),
    ]
    for call_ in calls:
        with pytest.raises(Exception) as raised:
            await call_()
        assert isinstance(raised.value, ug.UsageLimitError), repr(raised.value)
    assert fake.requests == []


async def test_unmetered_call_types_and_background_are_refused(
    fake: FakeProvider, handler: Any
) -> None:
    handler(1_000_000)
    base = {"api_base": f"{fake.url}/v1", "api_key": "k", "user": "alice"}
    with pytest.raises(Exception) as raised:
        await litellm.aimage_generation(model="openai/dall-e-3", prompt="A cat.", **base)
    assert "'aimage_generation' calls are not metered" in str(raised.value)
    with pytest.raises(Exception) as raised:
        await litellm.aresponses(model=f"openai/{GPT}", input="Hi", background=True, **base)
    assert "background: True is not accepted" in str(raised.value)
    assert fake.requests == []


async def test_extra_body_cannot_lift_the_fitted_maximum(fake: FakeProvider, handler: Any) -> None:
    guard, _ = handler(400)
    fake.output_tokens = 10_000
    await call(fake, user="alice", extra_body={"max_completion_tokens": 100_000})
    sent = fake.requests[0].body["max_completion_tokens"]
    assert 0 < sent < 400
    await settled(guard)
    assert used(guard, "alice", GPT) == 21 + sent


async def test_concurrent_callers_never_bill_past_the_budget(
    fake: FakeProvider, handler: Any
) -> None:
    guard, _ = handler(300)
    # The fake reports the prompt as the guard counts it (its default 21 is made up).
    fake.input_tokens = prompt_tokens({"model": GPT, "messages": MESSAGES}, "openai", GPT)
    fake.output_tokens, fake.delay = 40, 0.05
    results = await asyncio.gather(
        *(call(fake, user="alice", max_tokens=40) for _ in range(20)), return_exceptions=True
    )
    served = [r for r in results if not isinstance(r, BaseException)]
    await settled(guard)
    assert 0 < len(served) < 20
    assert used(guard, "alice", GPT) <= 300
    assert len(fake.requests) == len(served)


def test_the_docs_snippet_runs_as_written(fake: FakeProvider) -> None:
    (block,) = run_by("docs/providers.md", "providers/test_litellm.py")
    # In a process of its own, as written: LiteLLM keeps the first callbacks it saw.
    env = {**os.environ, "OPENAI_BASE_URL": f"{fake.url}/v1", "OPENAI_API_KEY": "test-key"}
    done = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == WORD * 12 + "\n"
    assert fake.requests[0].body["max_completion_tokens"] < 2000
