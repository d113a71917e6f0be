"""Keys through the admin API: listed without the key, added (checked like the policy's own
`[gateway.keys.*]`, every error at once), used at once, replaced, and removed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from test_gateway import ALICE, MESSAGES, gateway_policy, oai

TOKEN = "adm-keys"
CAROL = "sk-carol-new-key"


@pytest.fixture
def gateway(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> Iterator[ug.Gateway]:
    monkeypatch.setenv("UG_TEST_KEYS_ADMIN", TOKEN)
    document = gateway_policy(fake, users=("alice", "bob", "carol"))
    document["gateway"]["admin_token_env"] = "UG_TEST_KEYS_ADMIN"
    gw = ug.Gateway(ug.Guard(ug.Policy.from_dict(document)), "127.0.0.1:0")
    yield gw
    gw.shutdown()
    assert gw.wait(10)


def admin(gateway: ug.Gateway, method: str, path: str, token: str = TOKEN, **kw: Any) -> Any:
    headers = {"authorization": f"Bearer {token}"}
    return httpx.request(method, f"{gateway.url}/admin/{path}", headers=headers, **kw)


def test_keys_are_listed_without_the_key(gateway: ug.Gateway) -> None:
    listed = admin(gateway, "GET", "keys")
    assert listed.status_code == 200
    labels = [k["label"] for k in listed.json()["keys"]]
    assert "alice-laptop" in labels and len(labels) == 2
    assert ALICE not in listed.text
    assert admin(gateway, "GET", "keys", token="wrong").status_code == 401


def test_a_key_added_by_the_admin_api_works_at_once_and_can_be_removed(
    gateway: ug.Gateway,
) -> None:
    with pytest.raises(openai.AuthenticationError):
        oai(gateway, key=CAROL).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    entry = {"key": CAROL, "principal": "carol", "credential": "ci", "models": ["gpt-4o"]}
    added = admin(gateway, "PUT", "keys/carol-ci", json=entry)
    assert added.status_code == 200
    assert added.json()["principal"] == "carol" and CAROL not in added.text
    reply = oai(gateway, key=CAROL).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].message.content
    models = httpx.get(f"{gateway.url}/v1/models", headers={"authorization": f"Bearer {CAROL}"})
    assert [m["id"] for m in models.json()["data"]] == ["gpt-4o"]
    # replaced under the same label: the old key stops working
    admin(gateway, "PUT", "keys/carol-ci", json={**entry, "key": "sk-carol-rotated"})
    with pytest.raises(openai.AuthenticationError):
        oai(gateway, key=CAROL).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    oai(gateway, key="sk-carol-rotated").chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert admin(gateway, "DELETE", "keys/carol-ci").status_code == 200
    assert admin(gateway, "DELETE", "keys/carol-ci").status_code == 404
    with pytest.raises(openai.AuthenticationError):
        oai(gateway, key="sk-carol-rotated").chat.completions.create(
            model="gpt-4o", messages=MESSAGES
        )


def test_a_bad_key_entry_is_refused_with_every_error(gateway: ug.Gateway) -> None:
    bad = admin(gateway, "PUT", "keys/broken", json={"models": ["no-such-model"], "colour": 1})
    assert bad.status_code == 400
    paths = {e["path"] for e in bad.json()["errors"]}
    assert {"gateway.keys.broken.colour", "gateway.keys.broken.principal"} <= paths
    assert any(p.startswith("gateway.keys.broken.models") for p in paths)
    # the same key as another entry
    dup = admin(gateway, "PUT", "keys/again", json={"key": ALICE, "principal": "bob"})
    assert dup.status_code == 400
    assert "same key" in dup.json()["errors"][0]["message"]
    assert admin(gateway, "PUT", "keys/x", content=b"{").status_code == 400
    assert len(admin(gateway, "GET", "keys").json()["keys"]) == 2
