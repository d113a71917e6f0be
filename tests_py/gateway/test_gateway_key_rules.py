"""A key's teams, credential and attributes reach admission: the generic rules that match
them refuse the key's calls through the gateway (and spare another key's), and a key's
attributes are checked against the rules' vocabulary when the policy is read."""

from __future__ import annotations

from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from test_gateway import ALICE, MESSAGES, gateway_policy, oai

CI = "sk-ci-research"


def serve(fake: FakeProvider, rules: list[dict[str, Any]], **key: Any) -> ug.Gateway:
    """The gateway with the test's rules and one more key of alice's: `CI`, with `key`."""
    document = gateway_policy(fake, users=("alice", "bob"))
    document["teams"] = {"research": {"members": ["bob"]}, "support": {"members": ["bob"]}}
    document["rules"] = rules
    document["gateway"]["keys"]["ci"] = {"key": CI, "principal": "alice", **key}
    return ug.Gateway(ug.Guard(ug.Policy.from_dict(document)), "127.0.0.1:0")


def call(gateway: ug.Gateway, key: str) -> Any:
    return oai(gateway, key).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=20
    )


def test_a_team_budget_refuses_the_calls_of_a_key_of_that_team(fake: FakeProvider) -> None:
    budget = {
        "name": "research budget",
        "applies_when": {"team": "research"},
        "amount": "tokens",
        "budget": 40,
        "window": "day",
    }
    gateway = serve(fake, [budget], teams=["support", "research"])
    try:
        sent = len(fake.requests)
        call(gateway, CI)  # 21 + 12 billed: what is left is less than the prompt
        with pytest.raises(openai.RateLimitError) as e:
            call(gateway, CI)
        assert "research budget" in e.value.response.json()["error"]["message"]
        assert len(fake.requests) == sent + 1
        call(gateway, ALICE)  # the same principal through a key of no team is not counted
        assert len(fake.requests) == sent + 2
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_rules_on_a_keys_attributes_credential_and_endpoint_apply(fake: FakeProvider) -> None:
    once = {"amount": "requests", "budget": 1, "window": "day"}
    rules = [
        {"name": "one ci call", "applies_when": {"environment": "ci"}, **once},
        {"name": "one per credential", "count_by": ["credential"], **once},
        {"name": "no embeddings", "applies_when": {"endpoint": "/v1/embeddings"}, **once},
    ]
    gateway = serve(fake, [rules[0], rules[2]], attributes={"environment": "ci"})
    try:
        call(gateway, CI)
        with pytest.raises(openai.RateLimitError, match="one ci call"):
            call(gateway, CI)
        call(gateway, ALICE)
        call(gateway, ALICE)
        client = oai(gateway, ALICE).embeddings
        client.create(model="text-embedding-3-small", input="hi")
        with pytest.raises(openai.RateLimitError, match="no embeddings"):
            client.create(model="text-embedding-3-small", input="hi")
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    gateway = serve(fake, [rules[1]], credential="ci-runner")
    try:
        call(gateway, CI)
        call(gateway, ALICE)  # its own credential ("laptop"): its own counter
        with pytest.raises(openai.RateLimitError, match="one per credential"):
            call(gateway, CI)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_a_keys_attributes_must_be_attributes_a_key_sets(fake: FakeProvider) -> None:
    document = gateway_policy(fake)
    document["gateway"]["keys"]["ci"] = {
        "key": CI,
        "principal": "alice",
        "attributes": {"colour": "red", "team": "research", "environment": "ci"},
    }
    with pytest.raises(ValueError) as e:
        ug.Policy.from_dict(document)
    message = str(e.value)
    assert "gateway.keys.ci.attributes.colour" in message
    assert "gateway.keys.ci.attributes.team" in message
    assert "attributes.environment" not in message
    assert "accepted: scope, session, agent, task, environment" in message
