"""One admission per wrapped call: the guard counts the prompt once, with the policy's model
entry (its own `context_window`, `encoding`, `counting`), fits the request, and the wrapper
sends `ticket.fitted`; nothing is counted again, not even when a stream is cut off."""

from __future__ import annotations

from typing import Any

import anthropic
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy, prompt_tokens, reserved, used
from usage_guard.anthropic import GuardedAnthropic
from usage_guard.ollama import GuardedOllama
from usage_guard.openai import GuardedOpenAI

ACME = "acme-chat"
WINDOW = 300
TEXT = "Summarise the quarterly report for the board, with the figures and the risks. " * 2


def acme_policy() -> dict[str, Any]:
    document = policy()
    document["models"][ACME] = {
        "display_name": "Acme Chat",
        "provider": "openai",
        "context_window": WINDOW,
        "encoding": "cl100k_base",
        "counting": "exact",
    }
    document["limits"]["public"] = [
        {"model": ACME, "shared": [{"metric": "tokens", "amount": 1_000_000, "window": "day"}]}
    ]
    return document


class Recorder:
    """The real guard, keeping the tickets it hands out so a test can read them."""

    def __init__(self, guard: ug.Guard) -> None:
        self.guard = guard
        self.tickets: list[ug.Ticket] = []

    def admit(self, *args: Any, **kwargs: Any) -> ug.Ticket:
        ticket = self.guard.admit(*args, **kwargs)
        self.tickets.append(ticket)
        return ticket

    def __getattr__(self, name: str) -> Any:
        return getattr(self.guard, name)


def openai_sdk(fake: FakeProvider) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)


def test_fit_uses_the_policy_models_window_and_encoding(fake, make_guard):
    document = acme_policy()
    guard = Recorder(make_guard(document))
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")
    request = {"model": ACME, "messages": [{"role": "user", "content": TEXT}]}
    expected = ug._core.count_prompt(request, policy=ug.Policy.from_dict(document))
    assert expected["encoding"] == "cl100k_base" and expected["exact"] is True
    # Without the policy the model is unknown: another count (an estimate) and no window.
    assert ug._core.count_prompt(request) != expected

    client.chat.completions.create(**request)
    (ticket,) = guard.tickets
    assert ticket.prompt == expected
    sent = fake.bodies("/v1/chat/completions")[0]
    # The policy's window bounds the output: what it leaves after the exact prompt.
    assert sent["max_completion_tokens"] == WINDOW - expected["tokens"]
    assert ticket.fitted == {"max_completion_tokens": WINDOW - expected["tokens"]}


def test_prompt_over_the_policy_window_is_refused_before_the_provider(fake, make_guard):
    guard = make_guard(acme_policy())
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")
    long = [{"role": "user", "content": TEXT * 10}]
    with pytest.raises(ug.ContextWindowExceeded) as e:
        client.chat.completions.create(model=ACME, messages=long)
    assert e.value.reason == "CONTEXT_WINDOW_EXCEEDED"
    assert "Acme Chat" in str(e.value)
    assert fake.requests == []
    assert used(guard, "alice", ACME) == 0


def counted(run: Any) -> int:
    """How many prompts the core counted while `run()` ran."""
    before = ug._core._prompt_counts()
    run()
    return int(ug._core._prompt_counts() - before)


MESSAGES = [{"role": "user", "content": "Say hello a few times."}]


def test_openai_calls_count_their_prompt_once(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")
    chat = client.chat.completions

    def plain() -> None:
        chat.create(model="gpt-4o", messages=MESSAGES)

    def streamed() -> None:
        for _ in chat.create(model="gpt-4o", messages=MESSAGES, stream=True):
            pass

    def cut_off() -> None:
        stream = chat.create(model="gpt-4o", messages=MESSAGES, stream=True)
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()

    def responses() -> None:
        for _ in client.responses.create(model="gpt-4o", input="Hi", stream=True):
            pass

    fake.output_tokens = 50
    for run in (plain, streamed, cut_off, responses):
        assert counted(run) == 1, run.__name__
    # The cut-off stream was billed from its text, counted in the prompt's encoding.
    assert used(guard, "alice", "gpt-4o") > 0


def test_broken_stream_counts_its_prompt_once(fake, make_guard):
    guard = make_guard(policy())
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")
    fake.output_tokens, fake.break_after = 50, 4

    def broken() -> None:
        with pytest.raises(Exception) as e:
            for _ in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
                pass
        assert not isinstance(e.value, ug.UsageLimitError)

    assert counted(broken) == 1
    assert used(guard, "alice", "gpt-4o") > 0


def test_anthropic_and_ollama_count_once(fake, make_guard):
    guard = make_guard(policy())
    claude = GuardedAnthropic(
        anthropic.Anthropic(base_url=fake.url, api_key="sk-ant-test", max_retries=0),
        guard,
        user="alice",
    )
    llama = GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    fake.output_tokens = 50

    def claude_cut_off() -> None:
        with claude.messages.stream(
            model="claude-haiku-4-5", max_tokens=1000, messages=MESSAGES
        ) as stream:
            for i, _ in enumerate(stream.text_stream):
                if i == 2:
                    break

    def llama_cut_off() -> None:
        stream = llama.chat("llama3.2", messages=MESSAGES, stream=True)
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()

    def llama_plain() -> None:
        llama.chat("llama3.2", messages=MESSAGES)

    for run in (claude_cut_off, llama_cut_off, llama_plain):
        assert counted(run) == 1, run.__name__
    assert used(guard, "alice", "claude-haiku-4-5") > 0
    assert used(guard, "alice", "llama3.2") > 0


def test_parallel_calls_never_overspend(fake, make_guard):
    """Eight calls at once on 1,000 tokens: each is fitted into its own reservation, so what
    the model writes (it would write on and on) stays within the limit."""
    from concurrent.futures import ThreadPoolExecutor

    guard = make_guard(policy(tokens_a_day=1000))
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 300}
    fake.output_tokens = 10_000
    fake.input_tokens = prompt_tokens(request, "openai", "gpt-4o")  # the count is exact
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")

    def call(_: int) -> str:
        try:
            client.chat.completions.create(**request)
            return "ok"
        except ug.UsageLimitError:
            return "refused"

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(call, range(8)))
    assert "refused" in outcomes and outcomes.count("ok") >= 3
    assert outcomes.count("ok") == len(fake.requests)
    assert used(guard, "alice", "gpt-4o") <= 1000
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_refused_stream_never_reaches_the_server(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=100))
    guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=0).bill(100, 0)
    client = GuardedOpenAI(openai_sdk(fake), guard, user="alice")
    with pytest.raises(ug.UsageLimitError):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    with pytest.raises(ug.UsageLimitError):
        client.responses.create(model="gpt-4o", input="hi", stream=True)
    assert fake.requests == []
