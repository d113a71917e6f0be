"""The Gemini wrapper's other ways to reach the model (tests_py/fake_gemini.py): chats send
through the guarded `models`; automatic function calling is admitted and billed turn by
turn; `embed_content` is counted and billed; batch jobs and the Interactions and Live APIs
are refused; a config's camelCase aliases (and `extraBody`) are read as their fields."""

from __future__ import annotations

from typing import Any

import pytest

genai = pytest.importorskip("google.genai")  # Python 3.11 and later

import usage_guard as ug  # noqa: E402
from fake_provider import WORD, FakeProvider  # noqa: E402
from provider_support import prompt_tokens, reserved, used  # noqa: E402
from test_providers_genai import FLASH, bodies, client, gemini_policy  # noqa: E402
from usage_guard.genai import GuardedGenAI  # noqa: E402

types = genai.types
EMBEDDING = "gemini-embedding-001"

# A model turn asking for the weather, as Gemini reports it: 1,000 tokens.
CALL = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
            },
            "finishReason": "STOP",
            "index": 0,
        }
    ],
    "usageMetadata": {"promptTokenCount": 900, "candidatesTokenCount": 100},
}
ASKS_TOOL = (200, {}, CALL)


def exhausted(make_guard: Any) -> ug.Guard:
    """A guard whose alice has used all of her 50 tokens on Flash."""
    guard: ug.Guard = make_guard(gemini_policy(tokens_a_day=50))
    guard.admit("alice", FLASH, prompt_tokens=50, max_tokens=0).bill(50, 0)
    return guard


# -- chats --------------------------------------------------------------------------------


def test_chats_send_through_the_guarded_models(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=400))
    chat = client(fake, guard).chats.create(model=FLASH)
    reply = chat.send_message("Hello")
    assert bodies(fake)[0]["generationConfig"]["maxOutputTokens"] < 400  # fitted
    assert reply.usage_billed is not None and used(guard, "alice", FLASH) == 21 + 12
    stream = chat.send_message_stream("More")
    assert "".join(chunk.text or "" for chunk in stream) == WORD * 12
    assert used(guard, "alice", FLASH) == 2 * (21 + 12)
    assert [c.role for c in chat.get_history()].count("user") == 2  # the chat kept both turns


def test_a_chat_is_refused_with_nothing_left(fake: FakeProvider, make_guard: Any) -> None:
    guarded = client(fake, exhausted(make_guard))
    with pytest.raises(ug.UsageLimitError):
        guarded.chats.create(model=FLASH).send_message("Hello")
    with pytest.raises(ug.UsageLimitError):
        list(guarded.chats.create(model=FLASH).send_message_stream("Hello"))
    assert fake.requests == []


async def test_aio_chats_are_guarded(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    chat = client(fake, guard).aio.chats.create(model=FLASH)
    reply = await chat.send_message("Hello")
    assert reply.usage_billed is not None and used(guard, "alice", FLASH) == 33
    stream = await chat.send_message_stream("More")
    assert "".join([chunk.text or "" async for chunk in stream]) == WORD * 12
    assert used(guard, "alice", FLASH) == 2 * 33
    with pytest.raises(ug.UsageLimitError):
        await client(fake, exhausted(make_guard)).aio.chats.create(model=FLASH).send_message("Hi")
    assert len(fake.requests) == 2


# -- automatic function calling ---------------------------------------------------------


def weather_tool(calls: list[str]) -> Any:
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    return get_weather


def test_each_afc_turn_is_admitted_fitted_and_billed(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    calls: list[str] = []
    fake.script = [ASKS_TOOL, ASKS_TOOL]
    config = types.GenerateContentConfig(tools=[weather_tool(calls)], max_output_tokens=5000)
    reply = client(fake, guard).models.generate_content(
        model=FLASH, contents="Weather?", config=config
    )
    assert reply.text == WORD * 12 and calls == ["Paris", "Paris"]
    assert used(guard, "alice", FLASH) == 1000 + 1000 + 33  # every turn, not the last only
    assert reserved(guard, "alice", FLASH) == 0
    assert [b["generationConfig"]["maxOutputTokens"] for b in bodies(fake)] == [5000] * 3
    history = reply.automatic_function_calling_history
    assert history is not None and len(history) == 5  # the question, two calls, two answers
    assert len(bodies(fake)[2]["contents"]) == 5


def test_afc_stops_at_the_turn_the_guard_refuses(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=2050))
    fake.script = [ASKS_TOOL] * 3
    config = {"tools": [weather_tool([])], "max_output_tokens": 100}
    with pytest.raises(ug.UsageLimitError):
        client(fake, guard).models.generate_content(model=FLASH, contents="Hi", config=config)
    assert len(fake.requests) == 2 and used(guard, "alice", FLASH) == 2000


def test_an_afc_turn_that_fails_leaves_the_turns_before_billed(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(gemini_policy())
    failure = {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}
    fake.script = [ASKS_TOOL, (400, {}, failure)]
    with pytest.raises(genai.errors.ClientError):
        client(fake, guard).models.generate_content(
            model=FLASH, contents="Hi", config={"tools": [weather_tool([])]}
        )
    assert used(guard, "alice", FLASH) == 1000 and reserved(guard, "alice", FLASH) == 0


def test_afc_honours_maximum_remote_calls(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    calls: list[str] = []
    fake.script = [ASKS_TOOL] * 5
    afc = types.AutomaticFunctionCallingConfig(maximum_remote_calls=2)
    config = types.GenerateContentConfig(
        tools=[weather_tool(calls)], automatic_function_calling=afc
    )
    reply = client(fake, guard).models.generate_content(model=FLASH, contents="Hi", config=config)
    assert reply.function_calls and len(fake.requests) == 2 and calls == ["Paris"]
    assert used(guard, "alice", FLASH) == 2000


async def test_aio_afc_turns_are_billed(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    calls: list[str] = []
    fake.script = [ASKS_TOOL]
    reply = await client(fake, guard).aio.models.generate_content(
        model=FLASH, contents="Hi", config={"tools": [weather_tool(calls)]}
    )
    assert reply.text == WORD * 12 and calls == ["Paris"]
    assert used(guard, "alice", FLASH) == 1000 + 33


async def test_a_stream_with_afc_on_is_refused(fake: FakeProvider, make_guard: Any) -> None:
    guarded = client(fake, make_guard(gemini_policy()))
    config = {"tools": [weather_tool([])]}
    with pytest.raises(TypeError, match="send_message_stream"):
        guarded.models.generate_content_stream(model=FLASH, contents="Hi", config=config)
    with pytest.raises(TypeError, match="automatic function calling"):
        await guarded.aio.models.generate_content_stream(model=FLASH, contents="Hi", config=config)
    # Turned off, the caller runs the functions: one request, metered.
    config["automatic_function_calling"] = {"disable": True}
    fake.script = [ASKS_TOOL]
    chunks = list(guarded.models.generate_content_stream(model=FLASH, contents="Hi", config=config))
    assert chunks[-1].function_calls and len(fake.requests) == 1
    assert used(guarded.guard, "alice", FLASH) == 1000


# -- embeddings and the generating resources the guard cannot meter ----------------------


def embedding_policy(tokens_a_day: int) -> dict[str, Any]:
    doc = gemini_policy(tokens_a_day)
    doc["models"][EMBEDDING] = {"provider": "gemini", "prices": {"input": 0.15, "output": 0.0}}
    rules = [{"metric": "tokens", "amount": tokens_a_day, "window": "day"}]
    doc["limits"]["direct"].append({"user": "alice", "model": EMBEDDING, "rules": rules})
    return doc


def test_embed_content_is_counted_and_billed(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(embedding_policy(1_000))
    texts = ["The quick brown fox.", "Jumps over the lazy dog."]
    reply = client(fake, guard).models.embed_content(model=EMBEDDING, contents=texts)
    assert reply.embeddings is not None and len(reply.embeddings) == 2
    counted = prompt_tokens({"input": texts}, "openai.embeddings", EMBEDDING)
    assert counted > 0 and used(guard, "alice", EMBEDDING) == counted
    assert reply.usage_billed is not None and reply.usage_billed["input_tokens"] == counted


def test_embed_content_is_refused_past_the_limit(fake: FakeProvider, make_guard: Any) -> None:
    guarded = client(fake, make_guard(embedding_policy(3)))
    with pytest.raises(ug.UsageLimitError):
        guarded.models.embed_content(model=EMBEDDING, contents="A text longer than three tokens.")
    image = types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png")
    with pytest.raises(TypeError, match="text only"):
        guarded.models.embed_content(model=EMBEDDING, contents=[types.Content(parts=[image])])
    extra = {"http_options": {"extraBody": {"requests": []}}}
    with pytest.raises(ValueError, match="extra_body"):
        guarded.models.embed_content(model=EMBEDDING, contents="Hi", config=extra)
    # The client's own extra_body is merged into every request: its texts were never counted.
    options = types.HttpOptions(base_url=fake.url, extra_body={"requests": [{"x": 1}]})
    sdk = genai.Client(api_key="k", http_options=options)
    with pytest.raises(ValueError, match="http_options.extra_body"):
        GuardedGenAI(sdk, make_guard(embedding_policy(100)), user="alice").models.embed_content(
            model=EMBEDDING, contents="Hi"
        )
    assert fake.requests == []


async def test_unmetered_generation_is_refused(fake: FakeProvider, make_guard: Any) -> None:
    guarded = client(fake, make_guard(gemini_policy()))
    inlined = [{"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}]
    with pytest.raises(TypeError, match="batches.create"):
        guarded.batches.create(model=FLASH, src=inlined)
    with pytest.raises(TypeError, match="create_embeddings"):
        guarded.aio.batches.create_embeddings(model=EMBEDDING, src={"inlined_requests": {}})
    for interactions in (guarded.interactions, guarded.aio.interactions):
        for create in (
            interactions.create,
            interactions.with_raw_response.create,
            interactions.with_streaming_response.create,
            interactions.do_request,
        ):
            with pytest.raises(TypeError, match="Interactions API"):
                create(model=FLASH, input="Hi")
    with pytest.raises(TypeError, match="Live API"):
        guarded.aio.live.connect(model=FLASH)
    assert fake.requests == []


# -- camelCase aliases ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"httpOptions": {"extra_body": {"generationConfig": {"maxOutputTokens": 60_000}}}},
        {"http_options": {"extraBody": {"generationConfig": {"maxOutputTokens": 60_000}}}},
        {"httpOptions": {"extraBody": {"generation_config": {"candidate_count": 4}}}},
    ],
    ids=["httpOptions", "extraBody", "both"],
)
def test_extra_body_aliases_are_refused(
    fake: FakeProvider, make_guard: Any, config: dict[str, Any]
) -> None:
    guarded = client(fake, make_guard(gemini_policy()))
    with pytest.raises(ValueError, match=r"config\.http_options\.extra_body\."):
        guarded.models.generate_content(model=FLASH, contents="Hi", config=config)
    assert fake.requests == []


def test_camel_case_config_keys_are_read(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=2_000))
    fake.output_tokens = 100_000
    models = client(fake, guard).models
    reply = models.generate_content(
        model=FLASH, contents="Hi", config={"maxOutputTokens": 60_000, "temperature": 0.5}
    )
    sent = bodies(fake)[0]["generationConfig"]
    assert sent["maxOutputTokens"] < 2_000 and sent["temperature"] == 0.5
    assert reply.usage_limits["capped"] is True
    fake.reset()
    models = client(fake, make_guard(gemini_policy(tokens_a_day=2_000))).models
    thinking = {"thinkingConfig": {"thinkingBudget": 20_000}, "systemInstruction": "Be brief."}
    models.generate_content(model=FLASH, contents="Hi", config=thinking)
    body = bodies(fake)[0]
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    thought = body["generationConfig"]["thinkingConfig"]
    assert thought.get("thinkingBudget", thought.get("thinking_budget")) < 2_000
    with pytest.raises(ValueError, match="given twice"):
        models.generate_content(
            model=FLASH, contents="Hi", config={"max_output_tokens": 9, "maxOutputTokens": 9}
        )


def test_a_camel_case_answer_count_is_reserved(make_guard: Any, fake: FakeProvider) -> None:
    """`candidateCount` answers are reserved (and fitted) like `candidate_count`."""
    guard = make_guard(gemini_policy(tokens_a_day=2_000))
    models = client(fake, guard).models
    models.generate_content(model=FLASH, contents="Hi", config={"candidate_count": 4})
    snake = bodies(fake)[0]["generationConfig"]["maxOutputTokens"]
    fake.reset()
    models.generate_content(model=FLASH, contents="Hi", config={"candidateCount": 4})
    assert bodies(fake)[0]["generationConfig"]["maxOutputTokens"] == snake < 500
