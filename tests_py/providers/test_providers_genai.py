"""The official `google-genai` client, wrapped by GuardedGenAI, talking Gemini's REST shape to
the fake provider (tests_py/fake_gemini.py): the prompt counted as sent, the output maximum
and thinking budget fitted into what is left, usage billed from `usage_metadata` (thoughts
as output), streams billed once, an abandoned stream billed for what it delivered."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

genai = pytest.importorskip("google.genai")  # Python 3.11 and later

import usage_guard as ug  # noqa: E402
from doc_blocks import run_by  # noqa: E402
from fake_provider import WORD, FakeProvider  # noqa: E402
from provider_support import prompt_tokens, reserved, used  # noqa: E402
from usage_guard import http  # noqa: E402
from usage_guard.genai import GuardedGenAI  # noqa: E402

genai_errors = genai.errors
types = genai.types

FLASH, LITE, PRO = "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro"


def gemini_policy(tokens_a_day: int = 1_000_000) -> dict[str, Any]:
    """Alice and bob get `tokens_a_day` tokens a day on each Gemini model."""
    models = {
        FLASH: {"provider": "gemini", "prices": {"input": 0.3, "output": 2.5}},
        LITE: {"provider": "gemini", "prices": {"input": 0.1, "output": 0.4}},
        PRO: {"provider": "gemini", "prices": {"input": 1.25, "output": 10.0}},
    }
    rules = [{"metric": "tokens", "amount": tokens_a_day, "window": "day"}]
    return {
        "models": {name: {"display_name": name, **spec} for name, spec in models.items()},
        "limits": {
            "direct": [
                {"user": u, "model": m, "rules": rules} for u in ("alice", "bob") for m in models
            ]
        },
    }


def client(fake: FakeProvider, guard: ug.Guard, user: str = "alice") -> GuardedGenAI:
    sdk = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url))
    return GuardedGenAI(sdk, guard, user=user)


def bodies(fake: FakeProvider, method: str = "generateContent") -> list[Any]:
    return [r.body for r in fake.requests if r.path.split("?")[0].endswith(":" + method)]


def test_generate_content_bills_usage_metadata_once(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    reply = client(fake, guard).models.generate_content(model=FLASH, contents="Say hello.")
    assert reply.text == WORD * 12
    assert used(guard, "alice", FLASH) == 21 + 12
    assert reserved(guard, "alice", FLASH) == 0
    assert reply.usage_limits["capped"] is False
    assert reply.usage_billed is not None and reply.usage_billed["output_tokens"] == 12


def test_thoughts_are_billed_as_output(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    fake.reasoning_tokens = 5
    config = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=100))
    reply = client(fake, guard).models.generate_content(
        model=FLASH, contents="Think.", config=config
    )
    assert reply.usage_metadata is not None and reply.usage_metadata.thoughts_token_count == 5
    assert reply.usage_billed is not None
    assert reply.usage_billed["output_tokens"] == 12 and reply.usage_billed["reasoning_tokens"] == 5
    assert used(guard, "alice", FLASH) == 21 + 12


def test_refused_call_never_reaches_the_server(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=50))
    guard.admit("alice", FLASH, prompt_tokens=50, max_tokens=0).bill(50, 0)
    guarded = client(fake, guard)
    with pytest.raises(ug.UsageLimitError):
        guarded.models.generate_content(model=FLASH, contents="hi")
    with pytest.raises(ug.UsageLimitError):
        next(iter(guarded.models.generate_content_stream(model=FLASH, contents="hi")))
    assert fake.requests == []


def test_output_maximum_fitted_into_the_callers_own_config(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    config = types.GenerateContentConfig(
        temperature=0.2, system_instruction="Be brief.", max_output_tokens=5000
    )
    reply = client(fake, guard).models.generate_content(
        model=FLASH, contents="Say hello.", config=config
    )
    body = bodies(fake)[0]
    sent = body["generationConfig"]["maxOutputTokens"]
    request = {"contents": "Say hello.", "config": {"system_instruction": "Be brief."}}
    limit = 400 - prompt_tokens(request, "gemini", FLASH)
    assert 300 < sent <= limit
    assert body["generationConfig"]["temperature"] == 0.2
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert config.max_output_tokens == 5000  # the caller's object is not changed
    assert reply.candidates and reply.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert reply.usage_limits["capped"] is True
    assert used(guard, "alice", FLASH) == 21 + sent


def test_no_config_still_gets_the_fitted_maximum(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=300))
    fake.output_tokens = 10_000
    client(fake, guard).models.generate_content(model=FLASH, contents="Say hello.")
    assert 0 < bodies(fake)[0]["generationConfig"]["maxOutputTokens"] < 300


def test_thinking_budget_fitted_and_turned_off(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=2_000))
    thinking = {"thinking_budget": 20_000}
    guarded = client(fake, guard)
    guarded.models.generate_content(
        model=FLASH, contents="Think.", config={"thinking_config": thinking}
    )
    assert 0 < budget(bodies(fake)[0]) < 2_000
    # Less left than Flash-Lite's smallest budget (512): it can turn thinking off, so it is.
    guard.admit("alice", LITE, prompt_tokens=1_700, max_tokens=0).bill(1_700, 0)
    fake.reset()
    guarded.models.generate_content(
        model=LITE, contents="Think.", config={"thinking_config": thinking}
    )
    assert budget(bodies(fake)[0]) == 0
    assert 0 < bodies(fake)[0]["generationConfig"]["maxOutputTokens"] < 300


def budget(body: Any) -> Any:
    """The thinking budget sent (the SDK writes this one field in either spelling)."""
    thinking = body["generationConfig"]["thinkingConfig"]
    return thinking.get("thinkingBudget", thinking.get("thinking_budget"))


def test_pro_cannot_turn_thinking_off_so_it_is_refused(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=200))
    guard.admit("alice", PRO, prompt_tokens=150, max_tokens=0).bill(150, 0)
    with pytest.raises(ug.UsageLimitError):
        client(fake, guard).models.generate_content(
            model=PRO, contents="Think.", config={"thinking_config": {"thinking_budget": 1024}}
        )
    assert fake.requests == []


def test_system_instruction_tools_and_images_are_counted() -> None:
    bare = prompt_tokens({"contents": "Hi"}, "gemini", FLASH)
    system = "You answer in French, briefly, and never use the word hello. " * 4
    with_system = prompt_tokens(
        {"contents": "Hi", "config": {"system_instruction": system}}, "gemini", FLASH
    )
    assert with_system > bare + 40
    tool = {
        "function_declarations": [{"name": "get_weather", "description": "The weather in a city"}]
    }
    with_tools = prompt_tokens({"contents": "Hi", "config": {"tools": [tool]}}, "gemini", FLASH)
    assert with_tools > bare + 5
    image = types.Part.from_bytes(data=png(100, 100), mime_type="image/png")
    request = {
        "contents": [{"role": "user", "parts": [image.model_dump(exclude_none=True, mode="json")]}]
    }
    assert prompt_tokens(request, "gemini", FLASH) >= 258
    # One Part as the contents, as the SDK allows, is counted too.
    one = prompt_tokens({"contents": {"text": system}}, "gemini", FLASH)
    assert one > 40


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"".join(b"\x00" + b"\x00" * width * 3 for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def test_stream_bills_final_usage_once(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    guarded = client(fake, guard)  # the SDK closes its HTTP client with the genai.Client
    stream = guarded.models.generate_content_stream(model=FLASH, contents="Hi")
    text = "".join(chunk.text or "" for chunk in stream)
    assert text == WORD * 12
    assert used(guard, "alice", FLASH) == 21 + 12
    stream.close()
    assert used(guard, "alice", FLASH) == 21 + 12
    assert stream.usage_billed is not None and stream.usage_billed["output_tokens"] == 12


def test_abandoned_stream_bills_what_it_delivered(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    fake.output_tokens, n = 100, 6
    guarded = client(fake, guard)  # the SDK closes its HTTP client with the genai.Client
    stream = guarded.models.generate_content_stream(model=FLASH, contents="Hi")
    for i, _ in enumerate(stream, 1):
        if i == n:
            break
    stream.close()
    # The prompt as the chunks reported it (21), above admission's count of it.
    request = {"contents": "Hi", "config": {}}
    assert prompt_tokens(request, "gemini", FLASH) < 21
    assert used(guard, "alice", FLASH) == 21 + n
    assert reserved(guard, "alice", FLASH) == 0


def test_a_stream_never_started_is_released(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    guarded = client(fake, guard)  # the SDK closes its HTTP client with the genai.Client
    stream = guarded.models.generate_content_stream(model=FLASH, contents="Hi")
    assert reserved(guard, "alice", FLASH) > 0
    stream.close()
    assert fake.requests == []
    assert reserved(guard, "alice", FLASH) == 0 and used(guard, "alice", FLASH) == 0


async def test_aio_generate_and_stream(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    guarded = client(fake, guard)
    aio = guarded.aio
    reply = await aio.models.generate_content(model=FLASH, contents="Hi", user="bob")
    sent = bodies(fake)[0]["generationConfig"]["maxOutputTokens"]
    assert reply.usage_limits["capped"] is True
    assert used(guard, "bob", FLASH) == 21 + sent
    fake.output_tokens = 12
    stream = await aio.models.generate_content_stream(model=FLASH, contents="Hi")
    parts = [chunk.text async for chunk in stream]
    assert "".join(p or "" for p in parts) == WORD * 12
    assert used(guard, "alice", FLASH) == 21 + 12


def test_the_models_resource_name_is_the_model(fake: FakeProvider, make_guard: Any) -> None:
    """`models/<id>` reaches the same endpoint as `<id>`: it is admitted and billed as the
    model the policy declares (a policy refusing unknown models would refuse it otherwise)."""
    guard = make_guard({**gemini_policy(), "settings": {"unknown_models": "refuse"}})
    guarded = client(fake, guard)
    reply = guarded.models.generate_content(model=f"models/{FLASH}", contents="Hi")
    assert reply.usage_limits["source"] == {"type": "direct", "id": "alice"}
    stream = guarded.models.generate_content_stream(model=f"models/{FLASH}", contents="Hi")
    assert "".join(chunk.text or "" for chunk in stream) == WORD * 12
    assert used(guard, "alice", FLASH) == 2 * 33
    assert {r.path.split("?")[0] for r in fake.requests} == {
        f"/v1/models/{FLASH}:generateContent",
        f"/v1/models/{FLASH}:streamGenerateContent",
    }


@pytest.mark.parametrize(
    "extra",
    [
        {"generationConfig": {"maxOutputTokens": 60_000}},
        {"generation_config": {"thinking_config": {"thinking_budget": 20_000}}},
        {"contents": [{"role": "user", "parts": [{"text": "a long prompt"}]}]},
    ],
    ids=["max_output_tokens", "thinking_budget", "contents"],
)
def test_extra_body_may_not_set_what_the_guard_fits(
    fake: FakeProvider, make_guard: Any, extra: dict[str, Any]
) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=400))
    config = types.GenerateContentConfig(http_options=types.HttpOptions(extra_body=extra))
    with pytest.raises(ValueError, match=r"config\.http_options\.extra_body\."):
        client(fake, guard).models.generate_content(model=FLASH, contents="Hi", config=config)
    # Set on the client, it would reach every call: refused when the client is wrapped.
    sdk = genai.Client(
        api_key="k", http_options=types.HttpOptions(base_url=fake.url, extra_body=extra)
    )
    with pytest.raises(ValueError, match=r"^http_options\.extra_body\."):
        GuardedGenAI(sdk, guard, user="alice")
    # Fields the guard does not read pass.
    unmetered = types.HttpOptions(extra_body={"generationConfig": {"seed": 7}})
    client(fake, guard).models.generate_content(
        model=FLASH, contents="Hi", config=types.GenerateContentConfig(http_options=unmetered)
    )
    assert [b["generationConfig"]["seed"] for b in bodies(fake)] == [7]


def test_count_tokens_passes_through_unbilled(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(gemini_policy())
    guarded = client(fake, guard)
    counted = guarded.models.count_tokens(model=FLASH, contents="Hi")
    assert counted.total_tokens == 21
    assert used(guard, "alice", FLASH) == 0


def test_the_docs_snippet_runs_as_written(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.url)
    fake.output_tokens = 300
    (block,) = run_by("docs/providers.md", "providers/test_providers_genai.py")
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/providers.md", "exec"), namespace)
    config = bodies(fake)[0]["generationConfig"]
    assert 300 < config["maxOutputTokens"] < 2000
    assert budget(bodies(fake)[0]) < config["maxOutputTokens"]
    assert namespace["reply"].usage_billed["output_tokens"] == 300
    assert len(bodies(fake, "streamGenerateContent")) == 1
    assert capsys.readouterr().out.count(WORD) == 600


def test_a_refusal_in_geminis_shape_is_what_the_sdk_raises(
    fake: FakeProvider, make_guard: Any
) -> None:
    guard = make_guard(gemini_policy(tokens_a_day=50))
    guard.admit("alice", FLASH, prompt_tokens=50, max_tokens=0).bill(50, 0)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", FLASH, prompt_tokens=10, max_tokens=10)
    status, headers, body = refused.value.to_http("gemini")
    assert (status, body["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert body["error"]["details"][0]["reason"] == "usage_limit_reached"
    assert headers["x-should-retry"] == "false"
    fake.refusal = (status, headers, body)
    sdk = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url))
    with pytest.raises(genai_errors.ClientError) as raised:
        sdk.models.generate_content(model=FLASH, contents="Hi")
    assert raised.value.code == 429 and raised.value.status == "RESOURCE_EXHAUSTED"
    assert raised.value.message == refused.value.message


def test_a_rate_limit_says_when_in_retry_info(make_guard: Any) -> None:
    doc = gemini_policy()
    doc["limits"]["direct"][0]["rules"].append(
        {"metric": "requests", "amount": 1, "window": "minute"}
    )
    guard = make_guard(doc)
    guard.admit("alice", FLASH, prompt_tokens=1, max_tokens=1).bill(1, 1)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", FLASH, prompt_tokens=1, max_tokens=1)
    status, headers, body = http.refusal(refused.value, "gemini")
    retry = [d for d in body["error"]["details"] if d["@type"].endswith("RetryInfo")]
    assert status == 429 and retry[0]["retryDelay"] == f"{headers['retry-after']}s"
    assert body["error"]["details"][0]["reason"] == "rate_limit_exceeded"
