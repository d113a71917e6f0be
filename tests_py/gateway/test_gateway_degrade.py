"""A `degrade` rule through the gateway: the substitute model is what the provider gets, and
the answer says so (`X-Degraded: <asked for> -> <sent>`). A substitute of another provider
goes to that provider's upstream when it serves the endpoint's API as it is; one that speaks
another API is given back and the refusal of the model asked for stands."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import reserved, used
from test_gateway import MESSAGES, gateway_policy, oai


def test_a_degraded_call_sends_the_substitute_and_says_so(fake: FakeProvider) -> None:
    document = gateway_policy(fake)
    document["models"]["gpt-4o-mini"] = {
        "provider": "openai",
        "prices": {"input": 0.15, "output": 0.6},
    }
    tokens = [{"metric": "tokens", "amount": 100_000, "window": "day"}]
    document["limits"]["direct"].append({"user": "alice", "model": "gpt-4o-mini", "rules": tokens})
    document["rules"] = [
        {
            "name": "one gpt-4o a day",
            "applies_when": {"model": "gpt-4o"},
            "amount": "requests",
            "budget": 1,
            "window": "day",
            "action": "degrade",
            "degrade_to": "gpt-4o-mini",
        }
    ]
    guard = ug.Guard(ug.Policy.from_dict(document))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        client = oai(gateway).chat.completions
        first = client.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        second = client.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    assert "x-degraded" not in first.headers
    assert second.headers["x-degraded"] == "gpt-4o -> gpt-4o-mini"
    assert [b["model"] for b in fake.bodies("/v1/chat/completions")] == ["gpt-4o", "gpt-4o-mini"]
    # billed on the model that ran
    assert used(guard, "alice", "gpt-4o-mini") == 21 + 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12


def degrading_to(fake: FakeProvider, to: str) -> dict[str, Any]:
    document = gateway_policy(fake)
    document["rules"] = [
        {
            "name": "one gpt-4o a day",
            "applies_when": {"model": "gpt-4o"},
            "amount": "requests",
            "budget": 1,
            "window": "day",
            "action": "degrade",
            "degrade_to": to,
        }
    ]
    return document


def test_a_substitute_of_another_provider_goes_to_its_upstream(fake: FakeProvider) -> None:
    with FakeProvider() as local:
        local.output_tokens, local.input_tokens = 5, 9
        document = degrading_to(fake, "local-mini")
        document["models"]["local-mini"] = {"provider": "other"}
        document["providers"]["other"] = {"base_url": local.url}
        tokens = [{"metric": "tokens", "amount": 100_000, "window": "day"}]
        direct = {"user": "alice", "model": "local-mini", "rules": tokens}
        document["limits"]["direct"].append(direct)
        guard = ug.Guard(ug.Policy.from_dict(document))
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        try:
            before = len(fake.bodies("/v1/chat/completions"))
            client = oai(gateway).chat.completions
            client.create(model="gpt-4o", messages=MESSAGES)
            second = client.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        finally:
            gateway.shutdown()
            assert gateway.wait(10)
        assert second.headers["x-degraded"] == "gpt-4o -> local-mini"
        assert second.headers["x-served-provider"] == "other"
        assert [b["model"] for b in local.bodies("/v1/chat/completions")] == ["local-mini"]
        assert len(fake.bodies("/v1/chat/completions")) == before + 1
        assert used(guard, "alice", "local-mini") == 9 + 5


def test_a_substitute_in_another_api_is_skipped_and_the_refusal_stands(
    fake: FakeProvider,
) -> None:
    # llama3.2 is an Ollama model: its upstream speaks /api/chat, not /v1/chat/completions
    guard = ug.Guard(ug.Policy.from_dict(degrading_to(fake, "llama3.2")))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        before = len(fake.requests)
        client = oai(gateway).chat.completions
        client.create(model="gpt-4o", messages=MESSAGES)
        with pytest.raises(openai.RateLimitError) as e:
            client.create(model="gpt-4o", messages=MESSAGES)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    assert "one gpt-4o a day" in e.value.response.json()["error"]["message"]
    assert "x-degraded" not in e.value.response.headers
    assert len(fake.requests) == before + 1
    assert reserved(guard, "alice", "llama3.2") == 0
    assert used(guard, "alice", "llama3.2") == 0
