"""The spend failure mode `allow` (issue 31 item 9, limits.md "When Redis is down"): while
Redis does not answer, cost caps keyed by a person or a team are answered from bounded reads
of the ledger, caps the ledger cannot answer are skipped and counted, at most
`ledger_fallback_max_concurrent` reads run at once (one more: 503) and each admission's
reads are bounded to one second. `deny` stays the default. Real redis-server (stopped),
real PostgreSQL ledger; the shared layout and slot groups."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import usage_guard as ug
from postgres_harness import _tool, pg_url  # noqa: F401  (pg_url: a fixture)
from redis_harness import RedisServer

# 1 token = $0.001 in and out: a call of 50 + 50 tokens costs $0.10; alice's day is $1.00.
MODEL: dict[str, Any] = {"provider": "openai", "prices": {"input": 1000.0, "output": 1000.0}}
CALL_COST = 100_000


def policy(model_total: float | None = None, **settings: Any) -> ug.Policy:
    limits: dict[str, Any] = {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [{"metric": "cost", "amount": 1.0, "window": "day"}],
            }
        ]
    }
    if model_total is not None:
        rule = {"metric": "cost", "amount": model_total, "window": "day"}
        limits["model_total"] = [{"model": "m", "rules": [rule]}]
    return ug.Policy.from_dict({"models": {"m": MODEL}, "settings": settings, "limits": limits})


SLOT_GROUPS = False


@pytest.fixture(autouse=True, params=["shared", "slot_groups"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs each test in both layouts (`guard_on` follows it)."""
    monkeypatch.setattr(sys.modules[__name__], "SLOT_GROUPS", request.param == "slot_groups")


def guard_on(
    server: RedisServer, url: str, clock: ug.ManualClock, pol: ug.Policy
) -> tuple[ug.Guard, ug.PostgresLedger]:
    ledger = ug.PostgresLedger(url)
    store = ug.RedisStore(server.url, "spend", timeout=0.2, slot_groups=SLOT_GROUPS)
    return ug.Guard(pol, store=store, clock=clock, ledger=ledger), ledger


def admit(guard: ug.Guard) -> ug.Ticket:
    return guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)


def bill(ticket: ug.Ticket) -> None:
    assert ticket.bill(input_tokens=50, output_tokens=50) is not None


def test_allow_answers_cost_caps_from_the_ledger_while_redis_is_down(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    guard, ledger = guard_on(redis_server, pg_url(), clock, policy(spend_failure_mode="allow"))
    for _ in range(8):
        bill(admit(guard))
    guard.close()  # every bill in Redis and in the ledger
    redis_server.kill()
    ticket = admit(guard)  # $0.80 billed: the ledger says one more fits
    assert not ticket.uncounted
    bill(ticket)  # its settle waits for Redis; its ledger row is written now
    ticket = admit(guard)  # $0.90
    bill(ticket)
    with pytest.raises(ug.UsageLimitError) as refused:
        admit(guard)  # $1.00 in the ledger: nothing left
    assert refused.value.reason == "USAGE_LIMIT_REACHED"
    stats = guard.stats()
    assert stats["ledger_answered"] == 3 and stats["budget_unanswerable"] == 0
    ledger.flush()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == 10 * CALL_COST
    # Redis back (empty): the recovery refills the day from the ledger, nothing more fits.
    redis_server.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            admit(guard)
        except ug.UsageLimitError:
            break
        except ug.UsageLimitsUnavailable:
            clock.advance(5)  # the recovery's hold-again wait
        assert time.monotonic() < deadline


async def test_asyncio_admissions_read_the_ledger_and_can_overspend_together(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    """What the docs say `allow` costs: reads reserve nothing, so 4 calls admitted at once
    with $0.10 left each see $0.90 billed and all run; the next one, after their bills,
    sees $1.30 and is refused."""
    guard, ledger = guard_on(redis_server, pg_url(), clock, policy(spend_failure_mode="allow"))
    for _ in range(9):
        bill(admit(guard))
    guard.close()
    redis_server.kill()
    calls = [guard.admit_async("alice", "m", prompt_tokens=50, max_tokens=50) for _ in range(4)]
    tickets = await asyncio.gather(*calls, return_exceptions=True)
    admitted = [t for t in tickets if isinstance(t, ug.Ticket)]
    assert len(admitted) >= 1, tickets  # at most 4 read at once: all may pass together
    for ticket in admitted:
        bill(ticket)
    with pytest.raises(ug.UsageLimitError) as refused:
        await guard.admit_async("alice", "m", prompt_tokens=50, max_tokens=50)
    assert refused.value.reason == "USAGE_LIMIT_REACHED"
    ledger.flush()
    billed = sum(g["cost_micros"] for g in ledger.query(group_by=["user"]))
    assert billed == (9 + len(admitted)) * CALL_COST


def test_deny_is_the_default(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    guard, _ = guard_on(redis_server, pg_url(), clock, policy())
    bill(admit(guard))
    redis_server.kill()
    with pytest.raises(ug.UsageLimitsUnavailable) as refused:
        admit(guard)
    assert refused.value.reason == "USAGE_LIMITS_UNAVAILABLE"
    assert guard.stats()["ledger_answered"] == 0


def test_unanswerable_caps_are_skipped_and_counted(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    """A model's total cap ($0.15) cannot be answered from the ledger: skipped (counted in
    usage_guard_budget_unanswerable_total), alice's own cap still answers."""
    pol = policy(model_total=0.15, spend_failure_mode="allow")
    guard, _ = guard_on(redis_server, pg_url(), clock, pol)
    bill(admit(guard))
    guard.close()
    redis_server.kill()
    bill(admit(guard))  # $0.20 on a $0.15 model cap: it was skipped
    assert guard.stats()["budget_unanswerable"] == 1
    assert "usage_guard_budget_unanswerable_total 1" in guard.metrics_text()


@pytest.mark.parametrize(
    ("rule", "counted", "other"),
    [
        ({"count_by": ["credential"]}, {"credential": "k1"}, {"credential": "k2"}),
        ({"applies_when": {"scope": "acme"}}, {"scope": "eng"}, {"scope": "other"}),
    ],
)
def test_allow_answers_generic_cost_rules_from_the_ledger(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
    rule: dict[str, Any],
    counted: dict[str, str],
    other: dict[str, str],
) -> None:
    """A $1.00 a day generic rule keyed by credential (or acme's scope subtree) is answered
    from the rows' recorded attributes while Redis is down (before: skipped as unanswerable,
    every call admitted); a credential (scope) it does not count is not refused by it."""
    generic = {"name": "key day", "amount": "cost", "budget": 1.0, "window": "day", **rule}
    scopes = {"acme": {}, "eng": {"parent": "acme"}, "other": {}}
    pol = ug.Policy.from_dict(
        {
            "models": {"m": MODEL},
            "scopes": scopes,
            "settings": {"spend_failure_mode": "allow"},
            "rules": [generic],
        }
    )
    guard, ledger = guard_on(redis_server, pg_url(), clock, pol)

    def call(attributes: dict[str, str]) -> ug.Ticket:
        return guard.admit("alice", "m", prompt_tokens=50, max_tokens=50, attributes=attributes)

    for _ in range(8):
        bill(call(counted))
    guard.close()
    redis_server.kill()
    bill(call(counted))  # $0.80 billed in the ledger: one more fits
    bill(call(counted))
    with pytest.raises(ug.UsageLimitError) as refused:
        call(counted)  # $1.00 in the ledger: nothing left
    assert refused.value.reason == "USAGE_LIMIT_REACHED"
    stats = guard.stats()
    assert stats["ledger_answered"] == 3 and stats["budget_unanswerable"] == 0
    bill(call(other))
    ledger.flush()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == 11 * CALL_COST


def lock_the_ledger(url: str, seconds: float) -> subprocess.Popen[bytes]:
    """Holds an exclusive lock on the ledger's table for `seconds` from another session, so
    every read of it waits."""
    sql = f"BEGIN; LOCK TABLE usage_ledger IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({seconds});"
    psql = _tool("psql")
    assert psql is not None
    proc = subprocess.Popen([psql, url, "-c", sql], stdout=subprocess.DEVNULL)
    time.sleep(0.5)  # the lock is taken
    return proc


def test_reads_are_bounded_to_a_second_and_in_number(
    redis_server: RedisServer,
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    url = pg_url()
    pol = policy(spend_failure_mode="allow", ledger_fallback_max_concurrent=1)
    guard, _ = guard_on(redis_server, url, clock, pol)
    bill(admit(guard))
    guard.close()
    redis_server.kill()
    locker = lock_the_ledger(url, 4)
    outcome: dict[str, Any] = {}

    def slow() -> None:
        started = time.monotonic()
        try:
            admit(guard)
        except ug.UsageLimitsUnavailable as e:
            outcome["reason"] = e.reason
        outcome["seconds"] = time.monotonic() - started

    first = threading.Thread(target=slow)
    first.start()
    time.sleep(0.3)  # the first admission's read waits on the lock, holding the one permit
    with pytest.raises(ug.UsageLimitsUnavailable) as over:
        admit(guard)
    assert over.value.to_http("openai")[0] == 503
    first.join()
    assert outcome["reason"] == "USAGE_LIMITS_UNAVAILABLE"
    assert 0.9 <= outcome["seconds"] < 2.5, outcome
    locker.wait()
    deadline = time.monotonic() + 5
    while True:  # the lock gone, the read waiting on it ends and gives its place back
        try:
            bill(admit(guard))
            break
        except ug.UsageLimitsUnavailable:
            assert time.monotonic() < deadline, "the place was never given back"
            time.sleep(0.05)


def test_policy_settings_are_checked() -> None:
    with pytest.raises(ug.PolicyError, match="spend_failure_mode"):
        policy(spend_failure_mode="sometimes")
    with pytest.raises(ug.PolicyError, match="ledger_fallback_max_concurrent"):
        policy(ledger_fallback_max_concurrent=0)
