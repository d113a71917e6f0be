"""usage_guard.litellm in the real LiteLLM proxy (`litellm --config`, `litellm[proxy]` 1.106.12
in a venv of its own: tests_py/litellm_proxy.py), its `config.yaml` the one docs/providers.md
shows, its model the fake provider, called with the real `openai` SDK. The handler's guard
keeps its counters in a Redis the test reads with a guard of its own (same policy): N
concurrent callers on a small budget are billed exactly what the provider reported and never
past the budget, a refusal is HTTP 429 in OpenAI's error shape, the fitted maximum reaches the
provider, and a stream is billed once."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch
pytest.importorskip("litellm")  # the LiteLLM tests run on Python 3.10 and later
import openai  # noqa: E402
import usage_guard as ug  # noqa: E402
from doc_blocks import run_by  # noqa: E402
from fake_provider import WORD, FakeProvider  # noqa: E402
from litellm_proxy import Proxy, proxy_venv  # noqa: E402
from provider_support import policy, prompt_tokens, reserved, used  # noqa: E402
from redis_harness import RedisServer  # noqa: E402

GPT = "gpt-4o"
MESSAGES = [{"role": "user", "content": "Say hello."}]
# Each test its own user, so the proxy's counters need no reset between tests.
BUDGETS = {"alice": 300, "carol": 400, "dave": 50, "bob": 100_000}
# The proxy refuses to start without a master key (LiteLLM 1.106): the callers use it.
MASTER_KEY = f"sk-{secrets.token_hex(16)}"


def budgets() -> dict[str, Any]:
    document = policy(BUDGETS["alice"], users=("alice",))
    for user, tokens in BUDGETS.items():
        if user != "alice":
            document["limits"]["direct"] += policy(tokens, users=(user,))["limits"]["direct"]
    return document


def proxy_env(server: FakeProvider) -> dict[str, str]:
    """The environment `config.yaml` reads: the fake provider, the master key."""
    return {
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "OPENAI_API_KEY": "test-key",
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no network fetch
        "LITELLM_TELEMETRY": "False",
    }


@pytest.fixture(scope="module")
def venv() -> Path:
    """The proxy's venv (made once; the module skips when the package index is unreachable)."""
    return proxy_venv()


@pytest.fixture(scope="module")
def proxy(
    venv: Path, server: FakeProvider, redis: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Proxy]:
    work = tmp_path_factory.mktemp("litellm-proxy")
    (config,) = run_by("docs/providers.md", "providers/test_litellm_proxy.py", lang="yaml")
    (work / "config.yaml").write_text(config)
    (work / "policy.json").write_text(json.dumps(budgets()))
    env = {
        **proxy_env(server),
        "USAGE_GUARD_POLICY": str(work / "policy.json"),
        "USAGE_GUARD_REDIS": redis.url,
    }
    running = Proxy(venv, work / "config.yaml", env, work)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def guard(redis: RedisServer, proxy: Proxy) -> ug.Guard:
    """A guard on the proxy's counters (the same policy and Redis)."""
    return ug.Guard(ug.Policy.from_dict(budgets()), store=ug.RedisStore(redis.url))


@pytest.fixture
def client(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{proxy.url}/v1", api_key=MASTER_KEY, max_retries=0)


async def settled(guard: ug.Guard, user: str) -> None:
    """Waits for the proxy's success callbacks (LiteLLM runs them after the answer)."""
    for _ in range(500):
        if reserved(guard, user, GPT) == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{user}'s holds were never settled: {guard.usage(user, GPT)}")


def sent_maximum(body: dict[str, Any]) -> int:
    return int(body.get("max_completion_tokens") or body["max_tokens"])


async def test_concurrent_callers_are_billed_what_was_reported_never_past_the_budget(
    fake: FakeProvider, guard: ug.Guard, client: openai.AsyncOpenAI
) -> None:
    # The fake reports the prompt as the guard counts it (its default 21 is made up).
    fake.input_tokens = prompt_tokens({"model": GPT, "messages": MESSAGES}, "openai", GPT)
    fake.output_tokens, fake.delay = 40, 0.05
    calls = [
        client.chat.completions.create(model=GPT, messages=MESSAGES, max_tokens=40, user="alice")
        for _ in range(20)
    ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    served = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    await settled(guard, "alice")
    assert 0 < len(served) < 20
    assert all(isinstance(r, openai.RateLimitError) for r in refused), refused
    assert len(fake.requests) == len(served)
    reported = sum(fake.input_tokens + sent_maximum(r.body) for r in fake.requests)
    assert reported == sum(r.usage.total_tokens for r in served if r.usage)
    assert used(guard, "alice", GPT) == reported <= BUDGETS["alice"]


async def test_a_refusal_is_http_429_in_openais_shape(
    fake: FakeProvider, guard: ug.Guard, client: openai.AsyncOpenAI
) -> None:
    # Spent by another process on the same counters: the proxy's guard sees it.
    guard.admit("dave", GPT, prompt_tokens=50, max_tokens=0).bill(50, 0)
    with pytest.raises(openai.RateLimitError) as raised:
        await client.chat.completions.create(model=GPT, messages=MESSAGES, user="dave")
    assert raised.value.status_code == 429
    error = raised.value.body
    assert isinstance(error, dict), error
    # The proxy writes its own OpenAI-shaped body around the refusal's message.
    assert error["type"] == "rate_limit_error" and error["code"] == "429", error
    assert error["message"].startswith("You have used your 50 tokens a day on gpt-4o."), error
    assert fake.requests == []
    assert used(guard, "dave", GPT) == 50


async def test_the_fitted_maximum_reaches_the_provider(
    fake: FakeProvider, guard: ug.Guard, client: openai.AsyncOpenAI
) -> None:
    fake.output_tokens = 10_000
    reply = await client.chat.completions.create(model=GPT, messages=MESSAGES, user="carol")
    (request,) = fake.requests
    sent = sent_maximum(request.body)
    assert 0 < sent < BUDGETS["carol"]
    assert reply.choices[0].message.content == WORD * sent
    await settled(guard, "carol")
    assert used(guard, "carol", GPT) == fake.input_tokens + sent


async def test_a_stream_is_billed_once(
    fake: FakeProvider, guard: ug.Guard, client: openai.AsyncOpenAI
) -> None:
    stream = await client.chat.completions.create(
        model=GPT,
        messages=MESSAGES,
        user="bob",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == WORD * 12
    (usage,) = [c.usage for c in chunks if c.usage is not None]
    await settled(guard, "bob")
    assert len(fake.requests) == 1
    # The stream's usage as the proxy reported it to the caller, billed once.
    assert used(guard, "bob", GPT) == usage.total_tokens
    assert usage.completion_tokens == 12


# LiteLLM's own budget, alone, for comparison: a deployment budget (`max_budget` and
# `budget_duration` in the model's `litellm_params`), a router budget whose spend is kept in
# the proxy's cache, so a proxy without a database enforces it; key and user budgets need
# LiteLLM's database, and LiteLLM 1.106 logs that a proxy-wide `max_budget` is not enforced
# without one. Prices are LiteLLM's own for gpt-4o, as in the policy: $2.5 / $10 a million.
LITELLM_BUDGET_CONFIG = """\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/OPENAI_BASE_URL
      api_key: os.environ/OPENAI_API_KEY
      max_budget: {budget}
      budget_duration: 1d
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


def dollars(input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * 2.5 + output_tokens * 10.0) / 1e6


async def test_litellms_own_budget_lets_concurrent_callers_past_it(
    venv: Path, fake: FakeProvider, tmp_path: Path, server: FakeProvider
) -> None:
    """The same 20 callers on LiteLLM's own budget (the cost of 6 of their calls): it is
    checked before each call and counted after, so calls in flight together all pass it.
    The provider holds each request until all 20 have arrived (or 20 s), so none is billed
    before the last is checked: what the budget's check alone lets through."""
    fake.input_tokens = prompt_tokens({"model": GPT, "messages": MESSAGES}, "openai", GPT)
    fake.output_tokens = 40
    budget = 6 * dollars(fake.input_tokens, 40)
    arrived = threading.Condition()
    together: list[bool] = []

    def hold(_request: Any) -> None:
        with arrived:
            arrived.notify_all()
            together.append(arrived.wait_for(lambda: len(fake.requests) >= 20, timeout=20))

    config = tmp_path / "config.yaml"
    config.write_text(LITELLM_BUDGET_CONFIG.format(budget=budget))
    litellm_only = Proxy(venv, config, proxy_env(server), tmp_path)
    try:
        client = openai.AsyncOpenAI(
            base_url=f"{litellm_only.url}/v1", api_key=MASTER_KEY, max_retries=0
        )
        fake.on_request = hold
        calls = [
            client.chat.completions.create(model=GPT, messages=MESSAGES, max_tokens=40)
            for _ in range(20)
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        fake.on_request = None
        served = [r for r in results if not isinstance(r, BaseException)]
        spent = sum(
            dollars(r.usage.prompt_tokens, r.usage.completion_tokens) for r in served if r.usage
        )
        assert len(served) == 20, [r for r in results if isinstance(r, BaseException)]
        assert together == [True] * 20  # all 20 were in flight at once
        assert spent > 3 * budget
        # The budget counts: once the spend is in, the next call is refused.
        with pytest.raises(openai.APIStatusError) as refused:
            for _ in range(50):
                await client.chat.completions.create(model=GPT, messages=MESSAGES, max_tokens=40)
                await asyncio.sleep(0.05)
        assert len(fake.requests) < 20 + 50
        assert refused.value.status_code == 429
        assert "Exceeded budget for deployment" in str(refused.value), refused.value
    finally:
        litellm_only.stop()
