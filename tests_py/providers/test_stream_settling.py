"""A guarded stream that did not run to its end is billed, for each count, the larger of what
its chunks already reported and what was counted (Gemini reports its usage, thoughts and the
prompt's real size included, on every chunk; OpenAI's usage chunk comes before the end), never
less than what it delivered. And a stream is read only through its iterator: the generator
protocol is refused, and a lazy stream whose generator ran unseen is billed its prompt rather
than released."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import policy, prompt_tokens, reserved, used
from usage_guard.openai import GuardedOpenAI

genai = pytest.importorskip("google.genai")  # Python 3.11 and later

from usage_guard.genai import GuardedGenAI  # noqa: E402

GPT, FLASH = "gpt-4o", "gemini-2.5-flash"
MESSAGES = [{"role": "user", "content": "Hi"}]


def with_gemini() -> dict[str, Any]:
    """`policy()`, with Gemini 2.5 Flash for alice."""
    doc = policy()
    doc["models"][FLASH] = {"provider": "gemini", "prices": {"input": 0.3, "output": 2.5}}
    rules = [{"metric": "tokens", "amount": 1_000_000, "window": "day"}]
    doc["limits"]["direct"].append({"user": "alice", "model": FLASH, "rules": rules})
    return doc


def gemini(fake: FakeProvider, guard: ug.Guard) -> GuardedGenAI:
    http = genai.types.HttpOptions(base_url=fake.url)
    return GuardedGenAI(genai.Client(api_key="k", http_options=http), guard, user="alice")


def chat(fake: FakeProvider, guard: ug.Guard) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice")


def billed(stream: Any) -> tuple[int, int, int]:
    b = stream.usage_billed
    return b["input_tokens"], b["output_tokens"], b["reasoning_tokens"]


# -- an abandoned stream and the usage its chunks reported ---------------------------------


def test_abandoned_gemini_stream_bills_the_usage_its_chunks_reported(
    fake: FakeProvider, make_guard: Any
) -> None:
    """Each chunk reports the prompt's real size (a file or cached content admission could not
    count) and the thoughts so far: an abandoned stream is billed them, not only its text."""
    guard = make_guard(with_gemini())
    fake.input_tokens, fake.output_tokens, fake.reasoning_tokens = 5000, 520, 500
    config = {"thinking_config": {"thinking_budget": 8000}}
    guarded = gemini(fake, guard)  # the SDK closes its HTTP client with the genai.Client
    stream = guarded.models.generate_content_stream(
        model=FLASH, contents="Think hard.", config=config
    )
    for i, chunk in enumerate(stream, 1):
        reported = chunk.usage_metadata
        if i == 10:
            break
    stream.close()
    assert (reported.prompt_token_count, reported.thoughts_token_count) == (5000, 500)
    assert reported.candidates_token_count == 10
    assert billed(stream) == (5000, 10 + 500, 500)
    assert used(guard, "alice", FLASH) == 5000 + 510 and reserved(guard, "alice", FLASH) == 0


async def test_abandoned_async_gemini_stream_bills_the_usage_its_chunks_reported(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(with_gemini())
    fake.input_tokens, fake.output_tokens = 300_000, 40
    guarded = gemini(fake, guard)
    stream = await guarded.aio.models.generate_content_stream(
        model=FLASH, contents="Summarize the video."
    )
    async for chunk in stream:
        if chunk.usage_metadata.candidates_token_count == 3:
            break
    await stream.aclose()
    assert billed(stream) == (300_000, 3, 0)
    assert used(guard, "alice", FLASH) == 300_003


@pytest.mark.parametrize(
    "reported, expected",
    [
        # Reported more than counted: the reported counts (input, output, reasoning).
        ((21, 40, 28), (21, 40, 28)),
        # Reported less than counted: never less than the prompt admission counted and the
        # text delivered (12 words).
        ((1, 1, 0), (None, 12, 0)),
    ],
    ids=["reported_more", "reported_less"],
)
def test_openai_stream_left_after_its_usage_chunk(
    fake: FakeProvider, make_guard: Any, reported: tuple[int, int, int], expected: Any
) -> None:
    """The caller asked for usage and stopped reading on the usage chunk, before the stream's
    end: billed the larger of what was reported and what was counted."""
    inp, out, reasoning = reported
    fake.chat_usage = {
        "prompt_tokens": inp,
        "completion_tokens": out,
        "total_tokens": inp + out,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    guard = make_guard(policy())
    stream = chat(fake, guard).chat.completions.create(
        model=GPT, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.usage is not None:
            break
    stream.close()
    counted = prompt_tokens({"model": GPT, "messages": MESSAGES}, "openai", GPT)
    assert 1 < counted < 21
    want = (counted if expected[0] is None else expected[0],) + expected[1:]
    assert billed(stream) == want
    assert used(guard, "alice", GPT) == want[0] + want[1]


# -- read only through the iterator ------------------------------------------------------------


def test_the_generator_protocol_is_refused(fake: FakeProvider, make_guard: Any) -> None:
    """`send` / `throw` and the frame would read the SDK's generator unseen (its chunks never
    billed, the stream released as never started)."""
    guard = make_guard(with_gemini())
    client = gemini(fake, guard)
    stream = client.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    for name in ("send", "throw", "gi_frame", "gi_running", "gi_code"):
        with pytest.raises(AttributeError, match="generator protocol"):
            getattr(stream, name)
    assert "".join(chunk.text for chunk in stream) == WORD * 12
    assert used(guard, "alice", FLASH) == 21 + 12
    openai_stream = chat(fake, guard).chat.completions.create(
        model=GPT, messages=MESSAGES, stream=True
    )
    with pytest.raises(AttributeError, match="generator protocol"):
        openai_stream.send  # noqa: B018
    openai_stream.close()


async def test_the_async_generator_protocol_is_refused(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(with_gemini())
    guarded = gemini(fake, guard)
    stream = await guarded.aio.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    for name in ("asend", "athrow", "ag_frame", "ag_running"):
        with pytest.raises(AttributeError, match="generator protocol"):
            getattr(stream, name)
    assert [chunk.text async for chunk in stream] == [WORD] * 12
    assert used(guard, "alice", FLASH) == 21 + 12


def test_a_lazy_stream_run_unseen_is_billed_its_prompt(fake: FakeProvider, make_guard: Any) -> None:
    """Gemini's stream is a generator, sent at its first chunk: closed unstarted it is
    released; run past the guard (its private inner generator), it is billed the prompt."""
    guard = make_guard(with_gemini())
    client = gemini(fake, guard)
    unstarted = client.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    unstarted.close()
    assert used(guard, "alice", FLASH) == 0 and reserved(guard, "alice", FLASH) == 0
    assert fake.requests == []
    stream = client.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    assert "".join(chunk.text for chunk in stream._inner) == WORD * 12
    stream.close()
    counted = prompt_tokens({"contents": "Write a lot.", "config": {}}, "gemini", FLASH)
    assert counted > 0 and billed(stream) == (counted, 0, 0)
    assert used(guard, "alice", FLASH) == counted and reserved(guard, "alice", FLASH) == 0


async def test_an_async_lazy_stream_run_unseen_is_billed_its_prompt(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(with_gemini())
    aio = gemini(fake, guard).aio
    stream = await aio.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    await stream._inner.__anext__()
    await stream.aclose()
    assert billed(stream)[0] > 0 and reserved(guard, "alice", FLASH) == 0
    unstarted = await aio.models.generate_content_stream(model=FLASH, contents="Write a lot.")
    await unstarted.aclose()
    assert unstarted.usage_billed is None and reserved(guard, "alice", FLASH) == 0
