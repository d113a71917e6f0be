"""Stored quota policies: the tables in a PostgreSQL ledger's database, transactions, and a
change made in one process seen by a guard in another (Redis store, SQLite ledger file)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any, Callable

import pytest
import usage_guard as ug
from postgres_harness import pg_url  # noqa: F401 - the fixture
from redis_harness import RedisServer
from test_quota import POLICY, TEAM, USER


def test_postgres_tables_crud_and_counting(
    pg_url: Callable[[], str],  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    url = pg_url()
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.PostgresLedger(url))
    q = ug.QuotaService(guard, clock=clock, poll=False)
    assert ug._core.QuotaDatabase(guard.ledger).dialect == "postgres"  # type: ignore[arg-type]
    q.create_policy("research", TEAM, created_by="ops")
    q.create_policy("alice", USER)
    q.assign("research", "team:research")
    q.assign("alice", ("user", "alice"), effective_from="2026-11-01T00:00:00Z")
    with pytest.raises(ug.PolicyInUse):
        q.delete_policy("research")
    with pytest.raises(ValueError, match="a policy 'alice' exists already"):
        q.create_policy("alice", USER)
    assert q.record("user:alice", "ai.tokens.total", 300, request_id="p1", team="research")
    assert not q.record("user:alice", "ai.tokens.total", 300, request_id="p1", team="research")
    assert not q.check("user:alice", "ai.tokens.total", 1, team="research").allowed
    assert q.check("team:research", "ai.tokens.total", 700).allowed
    # A second service on the same database reads the same rows (and migrations run once).
    other = ug.QuotaService(
        ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.PostgresLedger(url)),
        poll=False,
    )
    assert [(a["subject"], a["policy"]) for a in other.assignments()] == [
        ("team:research", "research"),
        ("user:alice", "alice"),
    ]
    assert other.policies()[1]["created_by"] == "ops"
    rows = guard.ledger.query(user="alice")  # type: ignore[union-attr]
    assert rows[0]["requests"] == 1 and rows[0]["input_tokens"] == 300


def test_a_failed_change_writes_nothing(tmp_path: Any) -> None:
    ledger = ug.SqliteLedger(str(tmp_path / "l.db"))
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict(POLICY), ledger=ledger), poll=False)
    q.create_policy("p", USER)
    store = q.store
    with pytest.raises(RuntimeError, match="boom"):
        with store.tx() as tx:
            tx.run("UPDATE quota_policies SET description = ? WHERE name = ?", "half", "p")
            raise RuntimeError("boom")
    assert q.policies()[0]["description"] == ""


def test_a_limit_the_guard_would_refuse_is_never_stored(tmp_path: Any) -> None:
    """A limit past 2^53, a cost that rounds to $0 and a blank subject id are refused when
    given, naming the field, as the guard's own checker would refuse them at install."""
    ledger = ug.SqliteLedger(str(tmp_path / "l.db"))
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict(POLICY), ledger=ledger), poll=False)
    with pytest.raises(ug.QuotaPolicyError, match=r"limits\['ai.tokens.total'\].limit: must"):
        q.create_policy("huge", {"ai.tokens.total": {"limit": 1e17, "window": "day"}})
    with pytest.raises(ug.QuotaPolicyError, match=r"limits\['ai.cost'\].limit: rounds to \$0"):
        q.create_policy("tiny", {"ai.cost": {"limit": 1e-9, "window": "day"}})
    q.create_policy("p", USER)
    with pytest.raises(ug.QuotaPolicyError, match="limit: must"):
        q.update_policy("p", limits={"ai.tokens.total": {"limit": 2**64, "window": "day"}})
    with pytest.raises(ValueError, match="subject: the id of 'team: ' must be a non-blank"):
        q.assign("p", "team: ")
    assert [p["name"] for p in q.policies()] == ["p"] and q.assignments() == []


def test_a_stored_row_the_guard_refuses_is_logged_and_left_out(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A row written around the checks (by hand, or by an older version) is not enforced,
    with an error naming its subject; the other assignments load, the service starts, and
    the row can be unassigned."""
    path = str(tmp_path / "l.db")
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(path)))
    q.create_policy("p", USER)
    q.create_policy("q", USER)
    q.assign("p", "user:alice")
    q.assign("q", "user:bob")
    with q.store.tx() as tx:
        tx.run("UPDATE quota_policies SET limits = ? WHERE name = ?", HUGE, "q")
    other = ug.QuotaService(
        ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(path)), poll=False
    )
    assert "assigned to user:bob is not enforced" in caplog.text
    assert "limits['ai.tokens.total'].limit: must be a whole number" in caplog.text
    assert other.effective_limit("user:alice", "ai.tokens.total") is not None
    assert other.effective_limit("user:bob", "ai.tokens.total") is None
    assert other.unassign("user:bob")
    q.close()


def test_a_check_after_a_restart_counts_what_the_ledger_holds(tmp_path: Any) -> None:
    """`check` and `usage` fill their counters from the ledger as admission does: in a new
    process (an empty memory store) on the same ledger, they say what admission enforces
    (they read 0 used and 1,000 left, and the admission after refused)."""
    path = str(tmp_path / "l.db")
    models = {"models": {"m": {"provider": "openai", "prices": {"input": 1, "output": 1}}}}
    guard = ug.Guard(ug.Policy.from_dict(models), ledger=ug.SqliteLedger(path))
    q = ug.QuotaService(guard, poll=False)
    q.create_policy("p", {"ai.tokens.total": {"limit": 1000, "window": "day"}})
    q.assign("p", "team:research")
    research = {"team": "research"}
    guard.admit("alice", "m", prompt_tokens=100, max_tokens=800, attributes=research).bill(100, 800)
    guard.close()
    again = ug.Guard(ug.Policy.from_dict(models), ledger=ug.SqliteLedger(path))
    restarted = ug.QuotaService(again, poll=False)
    decision = restarted.check("team:research", "ai.tokens.total", 500)
    assert not decision.allowed and decision.remaining == 100
    assert restarted.usage("team:research", "ai.tokens.total")["used"] == 900
    with pytest.raises(ug.UsageLimitError):
        again.admit("bob", "m", prompt_tokens=100, max_tokens=400, attributes=research)


def test_a_record_whose_row_would_hold_a_nul_is_refused_before_it_counts(tmp_path: Any) -> None:
    ledger = ug.SqliteLedger(str(tmp_path / "l.db"))
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict(POLICY), ledger=ledger), poll=False)
    q.create_policy("p", USER)
    q.assign("p", "user:alice")
    for field, kw in (
        ("model", {"model": "g\x00"}),
        ("executor", {"executor": "e\x00"}),
        ("meta", {"meta": {"k": ["v\x00"]}}),
    ):
        with pytest.raises(ValueError, match=f"^{field}: must not contain a NUL"):
            q.record("user:alice", "ai.tokens.total", 5, request_id=f"r-{field}", **kw)
    assert q.usage("user:alice", "ai.tokens.total")["used"] == 0
    assert q.record("user:alice", "ai.tokens.total", 5, request_id="r-ok", model="g")


def test_a_stored_row_whose_rule_clashes_with_the_file_policy_is_left_out(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard refuses a stored rule named as a rule of the file policy: that assignment
    is logged and left out, the others load (the service started before, now it would not)."""
    path = str(tmp_path / "l.db")
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(path)))
    q.create_policy("p", USER)
    q.assign("p", "user:alice")
    q.assign("p", "user:bob")
    q.close()
    clash = {"name": "quota ai.tokens.total user:bob", "amount": "tokens", "budget": 5}
    clash["window"] = "day"
    guard = ug.Guard(
        ug.Policy.from_dict({**POLICY, "rules": [clash]}), ledger=ug.SqliteLedger(path)
    )
    other = ug.QuotaService(guard, poll=False)
    assert "assigned to user:bob is not enforced" in caplog.text
    assert other.effective_limit("user:alice", "ai.tokens.total") is not None


HUGE = '{"ai.tokens.total": {"limit": 1e17, "window": "day"}}'

CHILD = """
import sys, time
import usage_guard as ug
guard = ug.Guard(ug.Policy.from_dict({"models": {}}), store=ug.RedisStore(sys.argv[1], prefix="q2"),
                 ledger=ug.SqliteLedger(sys.argv[2]))
q = ug.QuotaService(guard)
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
while time.monotonic() - start < 10:
    if q.effective_limit("team:research", "ai.tokens.total"):
        print(f"seen {time.monotonic() - start:.3f}", flush=True)
        break
    time.sleep(0.01)
else:
    print("not seen", flush=True)
"""


def test_a_change_is_seen_by_another_process(redis_server: RedisServer, tmp_path: Any) -> None:
    db = str(tmp_path / "l.db")
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), redis_server.url, db],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        guard = ug.Guard(
            ug.Policy.from_dict({"models": {}}),
            store=ug.RedisStore(redis_server.url, prefix="q2"),
            ledger=ug.SqliteLedger(db),
        )
        q = ug.QuotaService(guard, poll=False)
        q.create_policy("research", TEAM)
        child.stdin.write("go\n")
        child.stdin.flush()
        q.assign("research", "team:research")
        answer = child.stdout.readline().split()
        assert answer[0] == "seen", answer
        print(f"seen by the other process after {answer[1]} s")
    finally:
        child.kill()
        child.wait()
