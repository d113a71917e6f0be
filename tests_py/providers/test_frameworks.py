"""The agent frameworks, each handed the guarded client it already accepts, against the fake
provider: a refusal reaches the framework's caller as `UsageLimitError`, the fitted output
maximum reaches the server, and the call is billed once. Pydantic AI (OpenAI and Anthropic
providers), the OpenAI Agents SDK (chat completions and Responses models), LangChain's
ChatOpenAI."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
import usage_guard as ug
from doc_blocks import run_by
from fake_provider import WORD, FakeProvider
from provider_support import policy, reserved, used
from usage_guard.anthropic import GuardedAsyncAnthropic
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI

GPT, CLAUDE = "gpt-4o", "claude-haiku-4-5"


def async_openai(fake: FakeProvider, guard: ug.Guard) -> GuardedAsyncOpenAI:
    sdk = openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    return GuardedAsyncOpenAI(sdk, guard, user="alice")


def spent(guard: ug.Guard, model: str = GPT) -> None:
    """Uses up what alice has left of her tokens a day on `model`."""
    (left,) = [r["left"] for r in guard.usage("alice", model)["rules"] if r["metric"] == "tokens"]
    if left:
        guard.admit("alice", model, prompt_tokens=left, max_tokens=0).bill(left, 0)


def sent_max(fake: FakeProvider, key: str) -> int:
    (body,) = [r.body for r in fake.requests]
    return int(body[key])


# -- Pydantic AI -------------------------------------------------------------------------------


def test_pydantic_ai_openai_provider(fake: FakeProvider, make_guard: Any) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    guard = make_guard(policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    provider = OpenAIProvider(openai_client=async_openai(fake, guard))
    agent = Agent(OpenAIChatModel(GPT, provider=provider))
    result = agent.run_sync("Say hello.")
    sent = sent_max(fake, "max_completion_tokens")
    assert 0 < sent < 400 and result.output == WORD * sent
    assert used(guard, "alice", GPT) == 21 + sent and reserved(guard, "alice", GPT) == 0
    fake.reset()
    with pytest.raises(ug.UsageLimitError):
        agent.run_sync("Again.")
    assert fake.requests == []


def test_pydantic_ai_anthropic_provider(fake: FakeProvider, make_guard: Any) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    guard = make_guard(policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="k", max_retries=0)
    client = GuardedAsyncAnthropic(sdk, guard, user="alice")
    agent = Agent(AnthropicModel(CLAUDE, provider=AnthropicProvider(anthropic_client=client)))
    agent.run_sync("Say hello.")
    sent = sent_max(fake, "max_tokens")
    assert 0 < sent < 400
    assert used(guard, "alice", CLAUDE) == 21 + sent
    fake.reset()
    spent(guard, CLAUDE)
    with pytest.raises(ug.UsageLimitError):
        agent.run_sync("Again.")
    assert fake.requests == []


# -- OpenAI Agents SDK -------------------------------------------------------------------------


@pytest.mark.parametrize("responses", [False, True], ids=["chat_completions", "responses"])
def test_openai_agents_sdk(fake: FakeProvider, make_guard: Any, responses: bool) -> None:
    pytest.importorskip("agents")
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    guard = make_guard(policy(tokens_a_day=400))
    client = async_openai(fake, guard)
    kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    agent = Agent(
        name="greeter", instructions="Be brief.", model=kind(model=GPT, openai_client=client)
    )
    result = Runner.run_sync(agent, "Say hello.")
    assert result.final_output == WORD * 12
    key = "max_output_tokens" if responses else "max_completion_tokens"
    sent = sent_max(fake, key)
    assert 12 < sent < 400
    assert used(guard, "alice", GPT) == 21 + 12 and reserved(guard, "alice", GPT) == 0
    fake.reset()
    spent(guard)
    with pytest.raises(ug.UsageLimitError):
        Runner.run_sync(agent, "Again.")
    assert fake.requests == []


# -- LangChain ---------------------------------------------------------------------------------


def test_langchain_chat_openai(fake: FakeProvider, make_guard: Any) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    guard = make_guard(policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    client = GuardedOpenAI(sdk, guard, user="alice")
    llm = ChatOpenAI(model=GPT, api_key="k", root_client=client, client=client.chat.completions)
    fake.output_tokens = 5
    streamed = "".join(str(chunk.content) for chunk in llm.stream("Hi"))
    assert streamed == WORD * 5
    assert used(guard, "alice", GPT) == 21 + 5
    fake.reset()
    fake.output_tokens = 10_000
    answer = llm.invoke("Say hello.")  # LangChain sends it through with_raw_response.create
    sent = sent_max(fake, "max_completion_tokens")
    assert 0 < sent < 400 - 26 and answer.content == WORD * sent
    assert used(guard, "alice", GPT) == 26 + 21 + sent
    fake.reset()
    spent(guard)
    with pytest.raises(ug.UsageLimitError):
        llm.invoke("Again.")
    assert fake.requests == []


def test_a_raw_stream_is_refused_not_sent_unmetered(fake: FakeProvider, make_guard: Any) -> None:
    guard = make_guard(policy())
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    client = GuardedOpenAI(sdk, guard, user="alice")
    raw = client.chat.completions.with_raw_response
    with pytest.raises(TypeError, match="stream: with_raw_response"):
        raw.create(model=GPT, messages=[{"role": "user", "content": "Hi"}], stream=True)
    assert fake.requests == []
    plain = raw.create(model=GPT, messages=[{"role": "user", "content": "Hi"}])
    assert plain.parse().usage_billed["output_tokens"] == 12
    assert used(guard, "alice", GPT) == 33


def test_the_docs_snippet_runs_as_written(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pydantic_ai")  # the snippet's framework: Python 3.11 and later
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    (block,) = run_by("docs/providers.md", "providers/test_frameworks.py")
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/providers.md", "exec"), namespace)
    assert capsys.readouterr().out == WORD * 12 + "\n"
    assert used(namespace["guard"], "alice", GPT) == 33
    fake.output_tokens = 10_000
    exec(compile(block, "docs/providers.md", "exec"), namespace)  # a new guard: fitted
    assert 0 < fake.requests[-1].body["max_completion_tokens"] < 2000


async def test_langchain_chat_openai_async(fake: FakeProvider, make_guard: Any) -> None:
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI

    guard = make_guard(policy(tokens_a_day=400))
    fake.output_tokens = 10_000
    client = async_openai(fake, guard)
    llm = ChatOpenAI(
        model=GPT, api_key="k", root_async_client=client, async_client=client.chat.completions
    )
    await llm.ainvoke("Say hello.")
    sent = sent_max(fake, "max_completion_tokens")
    assert 0 < sent < 400 and used(guard, "alice", GPT) == 21 + sent


@pytest.mark.parametrize("responses", [False, True], ids=["chat_completions", "responses"])
async def test_openai_agents_sdk_run_streamed_is_metered(
    fake: FakeProvider, make_guard: Any, responses: bool
) -> None:
    """`Runner.run_streamed` with the Responses model streams through
    `responses.with_streaming_response.create`: admitted, fitted and billed like `create`."""
    pytest.importorskip("agents")
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    guard = make_guard(policy(tokens_a_day=400))
    kind = OpenAIResponsesModel if responses else OpenAIChatCompletionsModel
    model = kind(model=GPT, openai_client=async_openai(fake, guard))
    agent = Agent(name="greeter", instructions="Be brief.", model=model)
    result = Runner.run_streamed(agent, "Say hello.")
    async for _ in result.stream_events():
        pass
    assert result.final_output == WORD * 12
    sent = sent_max(fake, "max_output_tokens" if responses else "max_completion_tokens")
    assert 12 < sent < 400  # fitted into what is left
    assert used(guard, "alice", GPT) == 21 + 12 and reserved(guard, "alice", GPT) == 0
    fake.reset()
    spent(guard)
    with pytest.raises(ug.UsageLimitError):
        async for _ in Runner.run_streamed(agent, "Again.").stream_events():
            pass
    assert fake.requests == []


def test_langchain_structured_output_stream_is_metered(fake: FakeProvider, make_guard: Any) -> None:
    """Structured output streamed (`with_structured_output(...).stream`, or `stream` with a
    `response_format`) goes through `beta.chat.completions.stream`: guarded too."""
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Greeting(BaseModel):
        text: str

    guard = make_guard(policy(tokens_a_day=400))
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    client = GuardedOpenAI(sdk, guard, user="alice")
    llm = ChatOpenAI(model=GPT, api_key="k", root_client=client, client=client.chat.completions)
    fake.output_tokens = 5
    (greeting,) = list(llm.with_structured_output(Greeting).stream("Hi"))
    assert greeting == Greeting(text=WORD * 5)
    # The fake reports the 5 words; the JSON it streamed (braces and key too) counts more, and
    # a stream is billed the larger of the two (as the gateway bills it).
    assert 21 + 5 < used(guard, "alice", GPT) <= 21 + 20 and reserved(guard, "alice", GPT) == 0
    assert 0 < sent_max(fake, "max_completion_tokens") < 400 - 26
    fake.reset()
    spent(guard)
    for run in (
        lambda: list(llm.with_structured_output(Greeting).stream("Again.")),
        lambda: list(llm.stream("Again.", response_format=Greeting)),
    ):
        with pytest.raises(ug.UsageLimitError):
            run()
    assert fake.requests == []


def test_pydantic_ai_max_retries_gets_the_sdk_http_client(
    fake: FakeProvider, make_guard: Any
) -> None:
    """`model_settings={"max_retries": ...}` copies the client with its `_client` (the SDK's
    HTTP client): the guarded client's own state must not shadow it."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    guard = make_guard(policy())
    client = async_openai(fake, guard)
    assert client._client is client.client._client  # the SDK's HTTP client, passed through
    agent = Agent(OpenAIChatModel(GPT, provider=OpenAIProvider(openai_client=client)))
    result = agent.run_sync("Say hello.", model_settings={"max_retries": 2})
    assert result.output == WORD * 12
    assert used(guard, "alice", GPT) == 21 + 12 and reserved(guard, "alice", GPT) == 0
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="k", max_retries=0)
    guarded = GuardedAsyncAnthropic(sdk, guard, user="alice")
    assert guarded._client is sdk._client
