"""One vocabulary at the Python boundary (docs/policy.md, "Units"): every figure names its
unit — `cost_micros` where a key holds one metric, `unit` beside a row of any metric — and
running calls' holds are `reserved` everywhere; `guard.usage(user)` with no model is the
person's view across models."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
import usage_guard as ug
from usage_guard import types

UNIT = {
    "tokens": "tokens",
    "input_tokens": "tokens",
    "output_tokens": "tokens",
    "cost": "micro_usd",
    "requests": "requests",
    "compute_ms": "ms",
    "concurrency": "calls",
}
PRICES = {"input": 1.25, "cached_input": 0.125, "output": 10.0}
TOKEN = "units-admin-token"


def rule(metric: str, amount: float, window: str = "day") -> dict[str, Any]:
    return {"metric": metric, "amount": amount, "window": window}


POLICY: dict[str, Any] = {
    "models": {
        "gpt-5": {"provider": "openai", "prices": PRICES},
        "gpt-5-mini": {"provider": "openai", "prices": PRICES},
        "gpt-4o": {"provider": "openai", "prices": PRICES},
        "gpt-4o-mini": {"provider": "openai", "prices": PRICES},
    },
    "teams": {"research": {"members": ["alice"]}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [
                    rule(m, 5.0 if m == "cost" else 1_000_000) for m in UNIT if m != "concurrency"
                ]
                + [{"metric": "concurrency", "amount": 4}],
            }
        ],
        "team": [
            {
                "team": "research",
                "model": "gpt-5-mini",
                "shared": [rule("tokens", 500_000)],
            }
        ],
        "model_total": [{"model": "gpt-4o", "rules": [rule("requests", 1_000)]}],
        "user_total": [{"user": "alice", "rules": [rule("cost", 20.0, "week")]}],
        "platform": {"rules": [rule("requests", 600, "hour")]},
    },
    "rules": [
        {
            "name": "cost per agent",
            "count_by": ["agent"],
            "amount": "cost",
            "budget": 1.0,
            "window": "month",
            "warn_at": [0.001],
        }
    ],
    "gateway": {"admin_token_env": "UG_UNITS_TEST_TOKEN"},
}


@pytest.fixture
def guard(clock: ug.ManualClock) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(POLICY), clock=clock)


def test_every_rule_and_restriction_says_its_unit(guard: ug.Guard) -> None:
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_000, max_tokens=100)
    view = guard.usage("alice", "gpt-5")
    rows = view["rules"] + view["ceilings"]
    assert {r["metric"] for r in rows} == set(UNIT)
    for row in rows:
        assert row["unit"] == UNIT[row["metric"]], row
        assert row["unit"] in get_args(types.Unit)
    cost = next(r for r in view["rules"] if r["metric"] == "cost")
    # $5 in integer micro-dollars; the open call's $0.00225 reserved, none used yet.
    assert (cost["amount"], cost["used"], cost["reserved"]) == (5_000_000, 0, 2_250)
    restriction = view["restriction"]
    assert restriction is not None
    assert restriction["unit"] == UNIT[restriction["metric"]]
    ticket.release()


def test_a_tickets_reservation_names_cost_in_micros(guard: ug.Guard) -> None:
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_000, max_tokens=100)
    assert ticket.reserved["cost_micros"] == 2_250 and "cost" not in ticket.reserved
    billed = ticket.bill(input_tokens=1_000, output_tokens=100)
    assert billed is not None and billed["cost_micros"] == 2_250


def test_warnings_events_and_the_audit_log_give_integers_in_their_unit(
    clock: ug.ManualClock,
) -> None:
    ledger = ug.SqliteLedger()
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    heard: list[types.Event] = []
    guard.on_event(heard.append)
    ticket = guard.admit(
        "alice", "gpt-4o", prompt_tokens=1_000, max_tokens=1_000, attributes={"agent": "a"}
    )
    (warning,) = ticket.warnings
    # 1,000 tokens in at $1.25/M and 1,000 out at $10/M: $0.01125 of the rule's $1.
    expected = {"amount": "cost", "unit": "micro_usd", "used": 11_250, "budget": 1_000_000}
    assert {k: warning[k] for k in expected} == expected
    assert {k: heard[0][k] for k in expected} == expected
    ticket.release()
    guard.close()
    (row,) = ledger.audit()
    assert {k: row["detail"][k] for k in expected} == expected


def test_the_person_across_models(guard: ug.Guard) -> None:
    guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=50).bill(100, 50)
    guard.admit("alice", "gpt-5-mini", prompt_tokens=200, max_tokens=50).bill(200, 20)
    guard.admit("alice", "gpt-4o-mini", prompt_tokens=10, max_tokens=5).bill(10, 5)
    across = guard.usage("alice")
    assert set(across) == set(types.PersonUsage.__annotations__)
    assert across["user"] == "alice"
    # The rules that count alice on every model: her User's Total and the Platform limit,
    # counting all three calls.
    spans = {(r["limit_type"], r["metric"]): r for r in across["rules"]}
    assert set(spans) == {("user_total", "cost"), ("platform", "requests")}
    assert spans[("platform", "requests")]["used"] == 3
    # 100 in, 50 out: 125 + 500; 200 in, 20 out: 250 + 200; 10 in, 5 out: 12.5 + 50, up to 63.
    assert spans[("user_total", "cost")]["used"] == 625 + 450 + 63
    # Each model with a rule of its own (a direct limit, her team's, a Model Total), as
    # `usage(user, model)` reads it; gpt-4o-mini has only the all-models rules: left out.
    assert list(across["models"]) == ["gpt-5", "gpt-5-mini", "gpt-4o"]
    for model, view in across["models"].items():
        assert view == guard.usage("alice", model)
    assert across["models"]["gpt-5-mini"]["source"] == {"type": "team", "id": "research"}


async def test_the_person_across_models_async(guard: ug.Guard) -> None:
    guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=50).bill(100, 50)
    assert await guard.usage_async("alice") == guard.usage("alice")
    # Nothing limits a call with no user (settings.anonymous is "unlimited").
    assert await guard.usage_async(None) == {"user": None, "rules": [], "models": {}}


def test_the_ledgers_rows_match_their_typed_dict(clock: ug.ManualClock) -> None:
    ledger = ug.SqliteLedger()
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=50).bill(100, 50)
    guard.close()
    (row,) = ledger.query()
    every = types.LedgerGroup.__required_keys__ | types.LedgerGroup.__optional_keys__
    assert types.LedgerGroup.__required_keys__ <= set(row) <= every
    assert row["cost_micros"] == 625


def test_the_admin_api_says_reserved_and_unit(
    guard: ug.Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UG_UNITS_TEST_TOKEN", TOKEN)
    open_call = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=50)
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        got = httpx.get(
            f"{gateway.url}/admin/control/effective?principal=alice&model=gpt-5",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ).json()
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
    view = guard.usage("alice", "gpt-5")
    keys = ("metric", "unit", "amount", "used", "reserved", "left")
    assert [{k: r[k] for k in keys} for r in got["rules"]] == [
        {k: r[k] for k in keys} for r in view["rules"]
    ]
    assert "held" not in got["rules"][0]
    assert got["restriction"]["unit"] == view["restriction"]["unit"]  # type: ignore[index]
    open_call.release()


def test_the_quota_service_answers_in_its_unit(tmp_path: Path, clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock)
    q = ug.QuotaService(guard, poll=False)
    q.create_policy("spend", {"ai.cost": {"limit": 5.0, "window": "day"}})  # dollars, written
    q.assign("spend", "team:research")
    q.record("team:research", "ai.cost", 1_250_000, request_id="c1")  # $1.25
    assert q.usage("team:research", "ai.cost") == {
        "used": 1_250_000,
        "limit": 5_000_000,
        "remaining": 3_750_000,
        "reset_at": "2026-12-01T00:00:00Z",
        "unit": "micro_usd",
    }
    assert q.effective_limit("team:research", "ai.cost") == {
        "limit": 5_000_000,
        "window": "day",
        "subject": "team:research",
        "unit": "micro_usd",
    }
    d = q.check("team:research", "ai.cost", 4_000_000)
    assert (d.allowed, d.remaining, d.unit) == (False, 3_750_000, "micro_usd")
    assert d.reason == (
        "quota_exceeded: team:research has $3.75 of $5.00 ai.cost left this day; $4.00 asked"
    )
    with pytest.raises(ValueError, match=r"0\.5 is not whole; accepted: whole micro-dollars"):
        q.record("team:research", "ai.cost", 0.5, request_id="c2")
