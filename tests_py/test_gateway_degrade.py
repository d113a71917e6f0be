"""A `degrade` rule through the gateway: the substitute model is what the provider gets, and
the answer says so (`X-Degraded: <asked for> -> <sent>`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import used
from test_gateway import MESSAGES, gateway_policy, oai


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as f:
        f.output_tokens, f.input_tokens = 12, 21
        yield f


def test_a_degraded_call_sends_the_substitute_and_says_so(fake: FakeProvider) -> None:
    document = gateway_policy(fake)
    document["models"]["gpt-4o-mini"] = {"provider": "openai", "prices": {"input": 0.15}}
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
