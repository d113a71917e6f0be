"""The quota service (docs/quotas.md): check, record, usage, effective_limit, assign and the
policy CRUD, on the memory store and a real redis-server, with policies in SQLite ledgers;
admission counting the same counters; bad input."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any, Callable

import pytest
import usage_guard as ug
from redis_harness import RedisServer
from usage_guard.quota.model import check_limits, compile_rules

MODELS = {"gpt-5": {"provider": "openai", "prices": {"input": 1.25, "output": 10.0}}}
POLICY: dict[str, Any] = {"models": MODELS}
TEAM = {
    "ai.tokens.total": {"limit": 1000, "window": "month"},
    "ai.cost": {"limit": 5.0, "window": "day"},
    "tools.invocations": {"limit": 10, "window": "day"},
}
USER = {"ai.tokens.total": {"limit": 300, "window": "month"}}
ROLE = {
    "ai.tokens.total": {"limit": 200, "window": "day"},
    "ai.rate": {"limit": 3, "window": "60s", "on_rate": "reject"},
}

Make = Callable[..., ug.QuotaService]


@pytest.fixture(params=["memory", "redis"])
def service(request: pytest.FixtureRequest, tmp_path: Any, clock: ug.ManualClock) -> Iterator[Make]:
    """`service(policy=POLICY)`: a quota service on a guard with a SQLite ledger, on the
    memory store or a fresh redis-server (the same store for every service made)."""
    made: list[ug.QuotaService] = []
    server = RedisServer() if request.param == "redis" else None
    memory = ug.MemoryStore()

    def make(policy: dict[str, Any] = POLICY, ledger: Any = None) -> ug.QuotaService:
        store = ug.RedisStore(server.url, prefix="quota") if server else memory
        ledger = ledger or ug.SqliteLedger(os.path.join(tmp_path, "ledger.db"))
        guard = ug.Guard(ug.Policy.from_dict(policy), store=store, clock=clock, ledger=ledger)
        made.append(ug.QuotaService(guard, clock=clock))
        return made[-1]

    try:
        yield make
    finally:
        for s in made:
            s.close()
            s.guard.close()  # sends its queued bills while the server is still up
        if server:
            server.stop()


def test_check_usage_and_record_of_a_team(service: Make) -> None:
    q = service()
    nothing = ug.Decision(True, None, None, None, "tokens")
    assert q.check("team:research", "ai.tokens.total", 10) == nothing
    q.create_policy("research", TEAM)
    q.assign("research", "team:research")
    d = q.check("team:research", "ai.tokens.total", 1000)
    assert d.allowed and d.remaining == 1000 and d.reset_at == "2026-12-01T00:00:00Z"
    assert q.record("team:research", "ai.tokens.total", 900, request_id="r1") is True
    d = q.check("team:research", "ai.tokens.total", 101)
    assert not d.allowed and d.remaining == 100
    assert (
        d.reason == "quota_exceeded: team:research has 100 of 1,000 ai.tokens.total left this "
        "month; 101 asked"
    )
    assert q.usage("team:research", "ai.tokens.total") == {
        "used": 900,
        "limit": 1000,
        "remaining": 100,
        "reset_at": "2026-12-01T00:00:00Z",
        "unit": "tokens",
    }
    assert q.usage("team:research", "ai.tokens.total", "month")["used"] == 900
    # Cost in micro-dollars ($1.25 of the $5 limit); a tool count; another team untouched.
    q.record(("team", "research"), "ai.cost", 1_250_000, request_id="c1")
    cost = q.usage("team:research", "ai.cost")
    assert (cost["remaining"], cost["limit"], cost["unit"]) == (3_750_000, 5_000_000, "micro_usd")
    q.record("team:research", "tools.invocations", 10, request_id="t1")
    assert not q.check("team:research", "tools.invocations").allowed
    assert q.usage("team:other", "ai.tokens.total")["used"] is None


def test_record_with_a_repeated_request_id_counts_once(service: Make) -> None:
    q = service()
    q.create_policy("research", TEAM)
    q.assign("research", "team:research")
    assert q.record("team:research", "ai.tokens.total", 100, request_id="same") is True
    assert q.record("team:research", "ai.tokens.total", 100, request_id="same") is False
    other = service()  # another guard (and process, on Redis) on the same store
    assert other.record("team:research", "ai.tokens.total", 100, request_id="same") is False
    assert q.usage("team:research", "ai.tokens.total")["used"] == 100
    # The use is in the ledger, once.
    ledger = q.guard.ledger
    assert ledger is not None
    ledger.flush()
    rows = ledger.query(group_by=["team"])
    assert [(r["team"], r["requests"], r["input_tokens"]) for r in rows] == [(None, 1, 100)]


def test_one_request_recorded_in_two_dimensions_counts_in_both(service: Make) -> None:
    # The tokens and the cost of one request are two records with one request id: the cost
    # was dropped as a repeat when records counted once per request id alone.
    q = service()
    q.create_policy("research", TEAM)
    q.assign("research", "team:research")
    assert q.record("team:research", "ai.tokens.total", 100, request_id="r") is True
    assert q.record("team:research", "ai.cost", 2_000_000, request_id="r") is True
    assert q.record("team:research", "ai.cost", 2_000_000, request_id="r") is False
    assert q.usage("team:research", "ai.tokens.total")["used"] == 100
    assert q.usage("team:research", "ai.cost")["used"] == 2_000_000
    ledger = q.guard.ledger
    assert ledger is not None
    ledger.flush()
    rows = ledger.query(group_by=["team"])
    assert [(r["requests"], r["input_tokens"], r["cost_micros"]) for r in rows] == [
        (2, 100, 2_000_000)
    ]


def test_team_cap_user_sub_cap_and_role_default(service: Make) -> None:
    q = service()
    q.create_policy("team", TEAM)
    q.create_policy("alice", USER)
    q.create_policy("member", ROLE)
    q.assign("team", "team:research")
    q.assign("alice", "user:alice")
    q.assign("member", "role:member")
    # Dual metering: alice's use counts for her and for the team.
    q.record("user:alice", "ai.tokens.total", 250, request_id="a1", team="research")
    assert q.usage("user:alice", "ai.tokens.total")["used"] == 250
    assert q.usage("team:research", "ai.tokens.total")["used"] == 250
    # alice exhausts her sub-cap, the team is not exhausted: bob still gets through.
    d = q.check("user:alice", "ai.tokens.total", 60, team="research")
    assert not d.allowed and d.remaining == 50 and "user:alice" in (d.reason or "")
    assert q.check("user:bob", "ai.tokens.total", 600, team="research").allowed
    assert q.effective_limit("user:alice", "ai.tokens.total", team="research") == {
        "limit": 300,
        "window": "month",
        "subject": "user:alice",
        "unit": "tokens",
    }
    assert q.effective_limit("user:bob", "ai.tokens.total", team="research")["limit"] == 1000
    # The role's default binds its members (each its own counter).
    assert q.effective_limit("user:bob", "ai.tokens.total", team="research", role="member") == {
        "limit": 200,
        "window": "day",
        "subject": "role:member",
        "unit": "tokens",
    }
    q.record("user:bob", "ai.tokens.total", 150, request_id="b1", role="member")
    assert not q.check("user:bob", "ai.tokens.total", 60, role="member").allowed
    assert q.check("user:carol", "ai.tokens.total", 60, role="member").allowed
    assert q.usage("role:member", "ai.tokens.total", user="bob")["used"] == 150
    assert q.effective_limit("team:research", "ai.concurrency") is None


def test_admission_counts_the_quota_counters(service: Make) -> None:
    q = service()
    q.create_policy("member", ROLE)
    q.assign("member", "role:member")
    for _ in range(3):
        ticket = q.guard.admit(
            "bob", "gpt-5", prompt_tokens=5, max_tokens=5, attributes={"role": "member"}
        )
        ticket.bill(input_tokens=5, output_tokens=5)
    assert q.usage("role:member", "ai.tokens.total", user="bob")["used"] == 30
    assert not q.check("user:bob", "ai.rate", role="member").allowed
    with pytest.raises(ug.UsageLimitError, match="quota ai.rate role:member"):
        q.guard.admit("bob", "gpt-5", prompt_tokens=5, max_tokens=5, attributes={"role": "member"})
    # A call without the role is not under the role's quota.
    q.guard.admit("bob", "gpt-5", prompt_tokens=5, max_tokens=5).release()


def test_crud_effective_from_and_unassign(service: Make, clock: ug.ManualClock) -> None:
    q = service()
    q.create_policy("small", USER, description="starter")
    assert [p["name"] for p in q.policies()] == ["small"]
    q.assign("small", "user:alice", effective_from="2026-12-01T00:00:00Z")
    assert q.effective_limit("user:alice", "ai.tokens.total") is None
    clock.set("2026-12-01T00:00:00Z")
    q.refresh()
    assert q.effective_limit("user:alice", "ai.tokens.total")["limit"] == 300
    q.update_policy("small", limits={"ai.tokens.total": {"limit": 50, "window": "day"}})
    assert q.effective_limit("user:alice", "ai.tokens.total") == {
        "limit": 50,
        "window": "day",
        "subject": "user:alice",
        "unit": "tokens",
    }
    assert q.policies()[0]["subjects"] == ["user:alice"]
    with pytest.raises(ug.PolicyInUse, match="'small' is assigned to user:alice; unassign"):
        q.delete_policy("small")
    assert [p["name"] for p in q.policies()] == ["small"]
    assert q.unassign("user:alice") is True
    assert q.unassign("user:alice") is False
    q.delete_policy("small")
    assert q.policies() == []
    assert q.check("user:alice", "ai.tokens.total", 10**6).allowed


def test_a_later_assignment_never_lifts_the_one_in_force_early(
    service: Make, clock: ug.ManualClock
) -> None:
    """A subject has one assignment: one from a later time over one in force now would have
    replaced it at once (the cap gone until that time). Refused, naming both; over one not
    in force yet, or from now, it replaces as before."""
    q = service()
    q.create_policy("small", USER)
    q.create_policy("next", {"ai.tokens.total": {"limit": 500, "window": "month"}})
    q.assign("small", "user:alice")
    later = "2027-01-01T00:00:00Z"
    with pytest.raises(ValueError, match="user:alice has 'small' in force now"):
        q.assign("next", "user:alice", effective_from=later)
    assert q.effective_limit("user:alice", "ai.tokens.total")["limit"] == 300
    q.assign("next", "user:bob", effective_from=later)
    q.assign("small", "user:bob", effective_from="2027-02-01T00:00:00Z")  # not in force yet
    q.assign("next", "user:alice")  # from now: replaces at once, as asked
    assert q.effective_limit("user:alice", "ai.tokens.total")["limit"] == 500


def test_a_change_reaches_another_service_on_the_same_store(service: Make) -> None:
    a, b = service(), service()
    a.create_policy("research", TEAM)
    a.assign("research", "team:research")
    b._poll_once()  # what b's poller does within 0.25 s
    assert b.effective_limit("team:research", "ai.tokens.total")["limit"] == 1000


def test_disable_turns_every_quota_off_visibly(
    service: Make, caplog: pytest.LogCaptureFixture
) -> None:
    q = service()
    q.create_policy("research", TEAM)
    q.assign("research", "team:research")
    q.record("team:research", "ai.tokens.total", 1000, request_id="all")
    assert not q.check("team:research", "ai.tokens.total").allowed
    other = service()  # another guard on the same store and database
    with caplog.at_level("WARNING", logger="usage_guard.quota"):
        q.disable()
        other._poll_once()  # what its poller does within 0.25 s
    assert caplog.text.count("quotas disabled") == 2
    assert q.stats()["enabled"] is False and q.stats()["rules"] == 0
    assert other.stats()["enabled"] is False
    assert q.check("team:research", "ai.tokens.total").allowed
    q.enable()
    assert q.stats() == {
        "enabled": True,
        "disabled_by": None,
        "policies": 1,
        "assignments": 1,
        "rules": 3,
        "version": 4,
    }
    assert not q.check("team:research", "ai.tokens.total").allowed


def test_async_twins(service: Make) -> None:
    q = service()

    async def main() -> None:
        await q.create_policy_async("research", TEAM)
        await q.assign_async("research", "team:research")
        assert await q.record_async("team:research", "ai.tokens.total", 10, request_id="x")
        d = await q.check_async("team:research", "ai.tokens.total", 991)
        assert not d.allowed and d.remaining == 990
        assert (await q.usage_async("team:research", "ai.tokens.total"))["used"] == 10
        assert [p["name"] for p in await q.policies_async()] == ["research"]

    asyncio.run(main())


def test_file_rules_and_stored_quotas_compose(service: Make) -> None:
    file_rule = {
        "name": "file: 2 calls a minute per user",
        "count_by": ["principal"],
        "amount": "requests",
        "budget": 2,
        "window": "minute",
    }
    q = service({"models": MODELS, "rules": [file_rule]})
    q.create_policy("research", {"ai.rate": {"limit": 1, "window": "60s", "on_rate": "reject"}})
    q.assign("research", "team:research")
    names = [r["name"] for r in ug._core._guard_policy(q.guard).rules]
    assert names[0] == file_rule["name"] and "quota ai.rate team:research" in names
    q.guard.admit(
        "alice", "gpt-5", prompt_tokens=1, max_tokens=1, attributes={"team": "research"}
    ).bill(input_tokens=1, output_tokens=1)
    with pytest.raises(ug.UsageLimitError, match="quota ai.rate team:research"):
        q.guard.admit(
            "alice", "gpt-5", prompt_tokens=1, max_tokens=1, attributes={"team": "research"}
        )
    # the file rule's 2nd call
    q.guard.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1).bill(
        input_tokens=1, output_tokens=1
    )
    with pytest.raises(ug.UsageLimitError, match="file: 2 calls"):
        q.guard.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda q: q.check("group:x", "ai.cost"),
            "'group' is not a subject type; accepted: team, user, role",
        ),
        (lambda q: q.check("alice", "ai.cost"), "subject: 'alice' is not a subject; accepted"),
        (lambda q: q.check("team:x", "ai.tokens"), "dimension: 'ai.tokens' is not a dimension"),
        (lambda q: q.record("team:x", "ai.cost", -1, request_id="n"), "amount: -1 is negative"),
        (lambda q: q.record("team:x", "ai.rate", 1.5, request_id="n"), "amount: 1.5 is not whole"),
        (lambda q: q.record("team:x", "ai.rate", 1, request_id=""), "request_id: '' is not"),
        (
            lambda q: q.record("team:x", "ai.concurrency", 1, request_id="n"),
            "dimension: 'ai.concurrency' cannot be recorded: it counts calls while they run",
        ),
        (
            lambda q: q.check("role:admin", "ai.rate"),
            "user: 'role:admin''s limits count per member",
        ),
        (
            lambda q: q.create_policy("p", {"ai.rate": {"limit": 1, "window": "fortnight"}}),
            "limits['ai.rate'].window: 'fortnight' is not a window; accepted: day, week",
        ),
        (
            lambda q: q.create_policy("p", {"ai.concurrency": {"limit": 2, "window": "day"}}),
            "ai.concurrency takes no window",
        ),
        (lambda q: q.assign("nope", "team:x"), "policy: 'nope' is not a policy; defined: none"),
        (lambda q: q.assign("p", "team:x", effective_from="soon"), "effective_from: 'soon'"),
        (lambda q: q.unassign(("user", "")), "subject: the id of ('user', '') must be"),
        (
            lambda q: q.usage("team:x", "ai.rate", "fortnight"),
            "window: 'fortnight' is not a window",
        ),
    ],
)
def test_bad_input_is_a_clear_error(
    call: Callable[[ug.QuotaService], Any], message: str, tmp_path: Any
) -> None:
    guard = ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(str(tmp_path / "l.db")))
    q = ug.QuotaService(guard, poll=False)
    with pytest.raises((ValueError, KeyError)) as e:
        call(q)
    assert message in str(e.value)
    assert q.policies() == [] and q.assignments() == []  # nothing half-written


def test_rate_enqueues_by_default_as_the_engine_s_throttle() -> None:
    limits = check_limits({"ai.rate": {"limit": 60, "window": "60s"}})
    assert limits == {
        "ai.rate": {
            "limit": 60,
            "window": "60s",
            "on_rate": "enqueue",
            "max_wait": 10,
            "max_queue": 100,
        }
    }
    rule = compile_rules([("team", "x", limits)])[1]
    assert (rule["action"], rule["throttle_max_wait"], rule["throttle_max_queue"]) == (
        "throttle",
        10,
        100,
    )
    rejecting = check_limits({"ai.rate": {"limit": 1, "window": "1m", "on_rate": "reject"}})
    assert "action" not in compile_rules([("team", "x", rejecting)])[1]
    with pytest.raises(
        ValueError, match="on_rate: 'queue' is not a word; accepted: enqueue, reject"
    ):
        check_limits({"ai.rate": {"limit": 1, "window": "1m", "on_rate": "queue"}})
    with pytest.raises(ValueError, match="'on_rate' is not a key; accepted: limit, window"):
        check_limits({"ai.cost": {"limit": 1, "window": "day", "on_rate": "reject"}})
