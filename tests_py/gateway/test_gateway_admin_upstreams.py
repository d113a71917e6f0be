"""The admin token cannot reach secrets it was not given: `PUT /admin/policy` cannot move a
provider's upstream (`base_url`), change which variable holds its key (`api_key_env`), add or
remove one (403 saying a restart on a new file is needed, nothing applied), so neither the
operator's provider keys nor the admin token reach a listener of the admin's choosing; limits,
keys and models still change at once. The admin token is never sent upstream."""

from __future__ import annotations

import copy
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy

ADMIN = "adm-upstreams-secret"
ALICE, CAROL = "sk-alice-upstreams", "sk-carol-upstreams"
OPERATOR_KEY = "sk-ant-operator-secret"
MESSAGES = [{"role": "user", "content": "Say hello."}]


def upstreams_policy(fake: FakeProvider, tokens_a_day: int = 1_000_000) -> dict[str, Any]:
    doc = policy(tokens_a_day=tokens_a_day, users=("alice", "carol"))
    doc["providers"] = {
        "openai": {"base_url": fake.url},
        "anthropic": {"base_url": fake.url, "api_key_env": "UG_UP_ANTHROPIC_KEY"},
    }
    doc["gateway"] = {
        "admin_token_env": "UG_UP_ADMIN",
        "keys": {"alice": {"key": ALICE, "principal": "alice"}},
    }
    return doc


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener of the admin's choosing: nothing may ever connect to it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.3)
    yield sock
    sock.close()


@pytest.fixture
def gateway(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> Iterator[ug.Gateway]:
    monkeypatch.setenv("UG_UP_ADMIN", ADMIN)
    monkeypatch.setenv("UG_UP_ANTHROPIC_KEY", OPERATOR_KEY)
    monkeypatch.setenv("UG_UP_OTHER_KEY", "sk-other-secret")
    guard = ug.Guard(ug.Policy.from_dict(upstreams_policy(fake)))
    running = ug.Gateway(guard, "127.0.0.1:0")
    yield running
    running.shutdown()
    assert running.wait(10)


def admin(gateway: ug.Gateway, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {ADMIN}"}
    return httpx.request(method, f"{gateway.url}/admin/{path}", headers=headers, timeout=30, **kw)


def moved(fake: FakeProvider, where: str) -> list[tuple[str, dict[str, Any], set[str]]]:
    """Each way to move a credential source or an upstream: (name, policy, error paths)."""
    base = upstreams_policy(fake)
    out = []
    doc = copy.deepcopy(base)
    doc["providers"]["anthropic"]["base_url"] = where
    out.append(("base_url", doc, {"providers.anthropic.base_url"}))
    doc = copy.deepcopy(base)
    doc["providers"]["anthropic"]["api_key_env"] = "UG_UP_ADMIN"
    out.append(("api_key_env to the admin token", doc, {"providers.anthropic.api_key_env"}))
    doc = copy.deepcopy(base)
    doc["providers"]["openai"]["api_key_env"] = "UG_UP_OTHER_KEY"
    out.append(("api_key_env added", doc, {"providers.openai.api_key_env"}))
    doc = copy.deepcopy(base)
    doc["providers"]["other"] = {"base_url": where, "api_key_env": "UG_UP_ANTHROPIC_KEY"}
    out.append(("a new upstream", doc, {"providers.other"}))
    doc = copy.deepcopy(base)
    del doc["providers"]["anthropic"]
    out.append(("an upstream removed", doc, {"providers.anthropic"}))
    return out


def test_put_policy_cannot_move_an_upstream_or_a_credential_source(fake, gateway, listener):
    where = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for name, doc, paths in moved(fake, where):
        r = admin(gateway, "PUT", "policy", json=doc)
        assert r.status_code == 403, name
        assert {e["path"] for e in r.json()["errors"]} == paths, name
        assert all("restart" in e["message"] for e in r.json()["errors"]), name
        assert admin(gateway, "GET", "policy").json()["version"] == 1, name
    # The probe and a call still go where the gateway started, with the operator's key.
    assert admin(gateway, "POST", "providers/anthropic/probe").json()["status"] == 200
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    claude.messages.create(model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES)
    assert [r.headers.get("x-api-key") for r in fake.requests] == [OPERATOR_KEY] * 2
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing ever connected to the admin's listener
    # The admin token is in no header the providers saw.
    assert not any(ADMIN in v for r in fake.requests for v in r.headers.values())


def test_limits_keys_and_models_still_change_at_once(fake, gateway):
    doc = upstreams_policy(fake, tokens_a_day=10)
    doc["gateway"]["keys"]["carol"] = {"key": CAROL, "principal": "carol", "models": ["gpt-4o"]}
    r = admin(gateway, "PUT", "policy", json=doc)
    assert r.status_code == 200 and r.json()["version"] == 2
    with pytest.raises(openai.RateLimitError):
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0).with_options(
            timeout=30
        ).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=5)
    carol = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=CAROL, max_retries=0)
    assert [m.id for m in carol.models.list()] == ["gpt-4o"]


def test_a_provider_key_in_the_admin_token_s_variable_is_refused_at_start(fake, monkeypatch):
    monkeypatch.setenv("UG_UP_ADMIN", ADMIN)
    doc = upstreams_policy(fake)
    doc["providers"]["anthropic"]["api_key_env"] = "UG_UP_ADMIN"
    guard = ug.Guard(ug.Policy.from_dict(doc))
    with pytest.raises(ValueError, match="admin token would be sent"):
        ug.Gateway(guard, "127.0.0.1:0")
