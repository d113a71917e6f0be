"""The quota service's remaining switches (docs/quotas.md): `settings.enabled = false` in the
policy file turns stored quotas off; a `record` crossing a soft threshold sends the same event
and audit row as admission, once per window; a user's own limit replaces their role's
default. On the memory store and a real redis-server, with a SQLite ledger."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import usage_guard as ug
from redis_harness import RedisServer

MODELS = {"gpt-5": {"provider": "openai", "prices": {"input": 1.25, "output": 10.0}}}
TOKENS = {"ai.tokens.total": {"limit": 1000, "window": "month"}}

Make = Callable[..., ug.QuotaService]


@pytest.fixture(params=["memory", "redis"])
def service(request: pytest.FixtureRequest, tmp_path: Any, clock: ug.ManualClock) -> Iterator[Make]:
    """`service(settings=None)`: a quota service on a guard with a SQLite ledger."""
    made: list[ug.QuotaService] = []
    server = RedisServer() if request.param == "redis" else None

    def make(settings: Any = None) -> ug.QuotaService:
        store = ug.RedisStore(server.url, prefix="sw") if server else ug.MemoryStore()
        ledger = ug.SqliteLedger(os.path.join(tmp_path, "ledger.db"))
        document: dict[str, Any] = {"models": MODELS}
        if settings is not None:
            document["settings"] = settings
        guard = ug.Guard(ug.Policy.from_dict(document), store=store, clock=clock, ledger=ledger)
        made.append(ug.QuotaService(guard, clock=clock, poll=False))
        return made[-1]

    try:
        yield make
    finally:
        for s in made:
            s.close()
        if server:
            server.stop()


def test_settings_enabled_false_in_the_file_turns_quotas_off(
    service: Make, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="usage_guard.quota"):
        q = service(settings={"enabled": False})
    assert "quotas disabled (settings.enabled = false in the policy file)" in caplog.text
    q.create_policy("p", TOKENS)
    q.assign("p", "team:t")
    # Stored, not installed: nothing refuses, nothing is counted.
    assert q.stats()["enabled"] is False and q.stats()["rules"] == 0
    assert q.stats()["disabled_by"] == "settings.enabled = false in the policy file"
    assert q.check("team:t", "ai.tokens.total", 5000).allowed
    assert q.effective_limit("team:t", "ai.tokens.total") is None
    q.guard.admit("u", "gpt-5", prompt_tokens=5000, max_tokens=10, attributes={"team": "t"})
    assert (
        ug.Policy.from_dict({"models": MODELS, "settings": {"enabled": False}}).quotas_enabled
        is False
    )
    assert ug.Policy.from_dict({"models": MODELS}).quotas_enabled is True
    with pytest.raises(ValueError, match="settings.enabled.*accepted: true, false"):
        ug.Policy.from_dict({"models": MODELS, "settings": {"enabled": "no"}})


def test_the_file_switch_wins_over_the_stored_one(service: Make) -> None:
    q = service(settings={"enabled": False})
    q.enable()
    assert q.stats()["enabled"] is False
    on = service()
    on.create_policy("p", TOKENS)
    on.assign("p", "team:t")
    assert on.stats()["enabled"] is True and on.stats()["disabled_by"] is None
    assert not on.check("team:t", "ai.tokens.total", 5000).allowed


def test_a_record_crossing_a_soft_threshold_sends_one_event(service: Make) -> None:
    q = service()
    heard: list[Any] = []
    q.guard.on_event(heard.append)
    q.create_policy("p", TOKENS)
    q.assign("p", "team:t")
    q.record("team:t", "ai.tokens.total", 700, request_id="r1")
    assert heard == []  # 70 %: below the 80 % threshold
    q.record("team:t", "ai.tokens.total", 150, request_id="r2")
    assert [(e["kind"], e["rule"], e["threshold"], e["used"]) for e in heard] == [
        ("soft_threshold", "quota ai.tokens.total team:t", 0.8, 850)
    ]
    # Once per window: neither another record nor an admission sends it again.
    q.record("team:t", "ai.tokens.total", 10, request_id="r3")
    q.guard.admit("u", "gpt-5", prompt_tokens=5, max_tokens=5, attributes={"team": "t"}).release()
    assert len(heard) == 1
    q.guard.close()
    rows = q.guard.ledger.audit()
    # On Redis the guard also audits adopting the empty store's epoch (its token counters are
    # fenced: the ledger can refill them); the threshold is audited once.
    assert [r["kind"] for r in rows if r["kind"] != "soft_threshold"] in ([], ["store_epoch"])
    assert [(r["kind"], r["rule"], r["id"]) for r in rows if r["kind"] != "store_epoch"] == [
        ("soft_threshold", "quota ai.tokens.total team:t", heard[0]["id"])
    ]


def test_a_users_own_limit_replaces_the_role_default(service: Make) -> None:
    q = service()
    q.create_policy("member", {"ai.tokens.total": {"limit": 100, "window": "month"}})
    q.create_policy("alice", {"ai.tokens.total": {"limit": 500, "window": "month"}})
    q.assign("member", "role:member")
    q.assign("alice", "user:alice")
    assert q.effective_limit("user:alice", "ai.tokens.total", role="member") == {
        "limit": 500,
        "window": "month",
        "subject": "user:alice",
        "unit": "tokens",
    }
    assert q.effective_limit("user:bob", "ai.tokens.total", role="member") == {
        "limit": 100,
        "window": "month",
        "subject": "role:member",
        "unit": "tokens",
    }
    # alice may use 300 > the role's 100; bob, a member without his own limit, may not.
    assert q.check("user:alice", "ai.tokens.total", 300, role="member").allowed
    assert not q.check("user:bob", "ai.tokens.total", 300, role="member").allowed
    q.record("user:alice", "ai.tokens.total", 300, request_id="a1", role="member")
    assert q.usage("user:alice", "ai.tokens.total")["used"] == 300
    q.guard.admit(
        "alice", "gpt-5", prompt_tokens=50, max_tokens=50, attributes={"role": "member"}
    ).release()
    with pytest.raises(ug.UsageLimitError, match="quota ai.tokens.total user:alice"):
        q.guard.admit(
            "alice", "gpt-5", prompt_tokens=250, max_tokens=10, attributes={"role": "member"}
        )


def test_applies_unless_in_a_policy_file() -> None:
    rule = {"name": "r", "amount": "requests", "budget": 1, "window": "day"}
    doc = {"models": MODELS, "rules": [{**rule, "applies_unless": {"principal": ["vip"]}}]}
    guard = ug.Guard(ug.Policy.from_dict(doc))
    guard.admit("u", "gpt-5", prompt_tokens=1, max_tokens=1).release()
    guard.admit("u", "gpt-5", prompt_tokens=1, max_tokens=1).bill(input_tokens=1, output_tokens=1)
    with pytest.raises(ug.UsageLimitError):
        guard.admit("u", "gpt-5", prompt_tokens=1, max_tokens=1)
    for _ in range(3):  # not matched: never counted, never refused
        guard.admit("vip", "gpt-5", prompt_tokens=1, max_tokens=1).bill(
            input_tokens=1, output_tokens=1
        )
    bad = {"models": MODELS, "rules": [{**rule, "applies_unless": {"colour": "red"}}]}
    with pytest.raises(ValueError, match=r"rules\[0\].applies_unless.colour.*is not an attribute"):
        ug.Policy.from_dict(bad)
