"""`GuardedOpenAI(..., fallbacks=[...])`: the wrapper's fallback ladder on the guard's provider
health, the same book the gateway keeps. The real `openai` SDK against the fake provider
scripted to fail; time is the guard's manual clock."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from usage_guard.openai import GuardedOpenAI

ASK = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 100}
FAIL_500 = (500, {}, {"error": {"message": "boom", "type": "server_error"}})
CHEAP = {"input": 0.15, "output": 0.6}


def wrapper_policy(fake: FakeProvider) -> dict[str, Any]:
    """gpt-4o falls back to pricey (its prompt alone costs more than $1 a month), gpt-4o-mini
    (both openai) and backup-mini (provider `other`: its own breaker)."""
    models = {
        "gpt-4o": {"provider": "openai", "prices": CHEAP},
        "gpt-4o-mini": {"provider": "openai", "prices": CHEAP},
        "pricey": {"provider": "openai", "prices": {"input": 500000.0, "output": 500000.0}},
        "backup-mini": {"provider": "other", "prices": CHEAP},
    }
    rules = [{"metric": "cost", "amount": 1.0, "window": "month"}]
    return {
        "models": models,
        "limits": {"direct": [{"user": "alice", "model": m, "rules": rules} for m in models]},
        "providers": {"openai": {"base_url": fake.url}},
        "gateway": {
            "keys": {
                "alice": {"key": "sk-alice", "principal": "alice"},
                "alice-ci": {"key": "sk-alice-ci", "principal": "alice"},
            }
        },
    }


@pytest.fixture
def guard(fake: FakeProvider, clock: ug.ManualClock) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(wrapper_policy(fake)), clock=clock)


def client(fake: FakeProvider, guard: ug.Guard, fallbacks: list[str]) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-provider", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice", fallbacks=fallbacks)


def models_sent(fake: FakeProvider) -> list[str]:
    return [b["model"] for b in fake.bodies("/v1/chat/completions")]


def test_a_failed_attempt_falls_back_past_an_overspending_model(fake, guard):
    fake.script = [FAIL_500]
    c = client(fake, guard, ["pricey", "gpt-4o-mini"])
    reply = c.chat.completions.create(model="gpt-4o", **ASK)
    assert reply.usage_resolution == "fallback(gpt-4o -> gpt-4o-mini, post-attempt, unavailable)"
    assert models_sent(fake) == ["gpt-4o", "gpt-4o-mini"]  # pricey was never sent
    assert guard.usage("alice", "gpt-4o-mini")["rules"][0]["used"] > 0
    assert guard.usage("alice", "gpt-4o")["rules"][0]["reserved"] == 0
    healthy = c.chat.completions.create(model="gpt-4o", **ASK)
    assert healthy.usage_resolution is None


def test_a_breaker_the_gateway_opened_is_the_wrappers_too(fake, guard):
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        fake.script = [FAIL_500] * 5
        # Two keys fail: one key's failures alone never open a breaker.
        for i in range(5):
            key = ["sk-alice", "sk-alice-ci"][i % 2]
            gw = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
            with pytest.raises(openai.InternalServerError):
                gw.chat.completions.create(model="gpt-4o", **ASK)
        assert ug._core.provider_health(guard)["breakers"]["openai"] == "open"
        c = client(fake, guard, ["gpt-4o-mini", "backup-mini"])
        reply = c.chat.completions.create(model="gpt-4o", **ASK)
        served = "fallback(gpt-4o -> backup-mini, pre-attempt, unavailable)"
        assert reply.usage_resolution == served
        assert models_sent(fake)[5:] == ["backup-mini"]
        with pytest.raises(ug.ProviderUnavailable) as e:
            client(fake, guard, ["gpt-4o-mini"]).chat.completions.create(model="gpt-4o", **ASK)
        assert e.value.until == "2026-11-30T08:00:10Z"
        assert {u["reason"] for u in e.value.unavailable} == {"breaker_open"}
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_a_429_cools_the_credential_for_the_wrappers(fake, guard, clock):
    fake.script = [(429, {"retry-after": "30"}, {"error": {"code": "rate_limit_exceeded"}})]
    c = client(fake, guard, [])
    with pytest.raises(openai.RateLimitError):
        c.chat.completions.create(model="gpt-4o", **ASK)
    with pytest.raises(ug.ProviderUnavailable) as e:
        c.chat.completions.create(model="gpt-4o", **ASK)
    assert e.value.unavailable[0]["reason"] == "rate_limited"
    assert e.value.until == "2026-11-30T08:00:30Z"
    clock.advance(30)
    assert c.chat.completions.create(model="gpt-4o", **ASK).usage_resolution is None


def test_no_affordable_fallback_raises_the_refusal(fake, guard):
    fake.script = [FAIL_500]
    c = client(fake, guard, ["pricey"])
    with pytest.raises(ug.UsageLimitError):
        c.chat.completions.create(model="gpt-4o", **ASK)
    assert models_sent(fake) == ["gpt-4o"]


def test_without_fallbacks_the_wrapper_keeps_no_health(fake, guard):
    fake.script = [FAIL_500] * 6
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-provider", max_retries=0)
    plain = GuardedOpenAI(sdk, guard, user="alice")
    for _ in range(6):
        with pytest.raises(openai.InternalServerError):
            plain.chat.completions.create(model="gpt-4o", **ASK)
    assert ug._core.provider_health(guard)["breakers"] == {}
