"""A restart keeps the day for every metric the ledger can answer (issue 31 item 2): with a
ledger, every counter the ledger refills (calendar windows, sliding windows of an hour or
more) is fenced like cost, so a Redis restarted empty under a running guard is refilled from
the ledger instead of starting over. Without a ledger, unfenced metrics start over, as
`usage-guard check` says. Real redis-server restarted empty, real SQLite ledger."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer
from test_epoch_fence import HOLD_AGAIN_SECONDS

SLOT_GROUPS = False


@pytest.fixture(autouse=True, params=["shared", "slot_groups"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs each test in both store layouts (`make_store` follows it)."""
    monkeypatch.setattr(sys.modules[__name__], "SLOT_GROUPS", request.param == "slot_groups")


def make_store(url: str, prefix: str) -> ug.RedisStore:
    return ug.RedisStore(url, prefix, slot_groups=SLOT_GROUPS)


MODEL: dict[str, Any] = {"provider": "openai", "prices": {"input": 1.0, "output": 1.0}}


def tokens_policy(window: str = "day", **settings: Any) -> ug.Policy:
    """Alice may use 1,000 tokens a `window` of model m; only tokens are limited."""
    rule = {"metric": "tokens", "amount": 1000, "window": window}
    return ug.Policy.from_dict(
        {
            "models": {"m": MODEL},
            "settings": settings,
            "limits": {"direct": [{"user": "alice", "model": "m", "rules": [rule]}]},
        }
    )


def big_call(guard: ug.Guard) -> None:
    """900 tokens billed (450 in, 450 out)."""
    ticket = guard.admit("alice", "m", prompt_tokens=450, max_tokens=450)
    billed = ticket.bill(input_tokens=450, output_tokens=450, wait=True)
    assert billed is not None and billed["recorded"] is True


def admit_after_the_restart(guard: ug.Guard, clock: ug.ManualClock, **call: int) -> ug.Ticket:
    """Admits once the store answers again and the recovery's hold-again wait is over
    (`budget_recovering` meanwhile); a limit refusal is raised."""
    for _ in range(200):
        try:
            return guard.admit("alice", "m", **call)
        except ug.UsageLimitsUnavailable as e:
            if e.reason == "USAGE_LIMITS_RECOVERING":
                clock.advance(HOLD_AGAIN_SECONDS + 1)
    raise AssertionError("never answered after the restart")


def refused_after_the_restart(guard: ug.Guard, clock: ug.ManualClock) -> str:
    with pytest.raises(ug.UsageLimitError) as refused:
        admit_after_the_restart(guard, clock, prompt_tokens=450, max_tokens=450)
    return refused.value.reason


def billed_tokens(ledger: ug.SqliteLedger) -> int:
    ledger.flush()
    return sum(g["input_tokens"] + g["output_tokens"] for g in ledger.query(group_by=["user"]))


@pytest.mark.parametrize("window", ["day", "2h"])
def test_the_same_guard_keeps_the_day_after_a_restart(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path, window: str
) -> None:
    """900 of 1,000 tokens billed; Redis restarts empty; another 900-token call is refused
    (before: admitted, 1,800 billed), and the 100 left still fit."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    store = make_store(redis_server.url, "tok")
    guard = ug.Guard(tokens_policy(window), store=store, clock=clock, ledger=ledger)
    big_call(guard)
    ledger.flush()
    redis_server.restart()  # empty, on the same port
    assert refused_after_the_restart(guard, clock) == "USAGE_LIMIT_DOES_NOT_FIT"
    ticket = admit_after_the_restart(guard, clock, prompt_tokens=50, max_tokens=50)
    ticket.bill(input_tokens=50, output_tokens=50, wait=True)
    assert billed_tokens(ledger) == 1000
    assert guard.usage("alice", "m")["rules"][0]["used"] == 1000
    assert guard.stats()["epochs_written"] == 2  # the first start, and the recovery


def test_a_new_guard_keeps_the_day_after_a_restart(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    first = ug.Guard(
        tokens_policy(), store=make_store(redis_server.url, "new"), clock=clock, ledger=ledger
    )
    big_call(first)
    first.close()
    ledger.flush()
    redis_server.restart()
    later = ug.Guard(
        tokens_policy(), store=make_store(redis_server.url, "new"), clock=clock, ledger=ledger
    )
    assert refused_after_the_restart(later, clock) == "USAGE_LIMIT_DOES_NOT_FIT"
    # The first guard, still alive, keeps it too.
    assert refused_after_the_restart(first, clock) == "USAGE_LIMIT_DOES_NOT_FIT"
    assert billed_tokens(ledger) == 900


def test_without_a_ledger_tokens_start_over_as_check_says(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    """The default without a ledger: only cost is fenced; a tokens day starts over."""
    policy = tokens_policy()
    assert "tokens per day" in policy.restart_cost
    assert "start over" in policy.restart_cost
    guard = ug.Guard(policy, store=make_store(redis_server.url, "bare"), clock=clock)
    big_call(guard)
    redis_server.restart()
    admit_after_the_restart(guard, clock, prompt_tokens=450, max_tokens=450).release()


def test_short_sliding_windows_are_not_fenced_with_a_ledger(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """A sliding window under an hour is not refilled, so not fenced: it starts over."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    store = make_store(redis_server.url, "short")
    guard = ug.Guard(tokens_policy("10m"), store=store, clock=clock, ledger=ledger)
    big_call(guard)
    redis_server.restart()
    admit_after_the_restart(guard, clock, prompt_tokens=450, max_tokens=450).release()
    assert guard.stats()["recovering"] == 0
    assert "10 minutes" in tokens_policy("10m").restart_cost


def rule_policy(rule: dict[str, Any]) -> ug.Policy:
    """One generic rule on model m: 1,000 tokens a day, as `rule` counts them."""
    base = {"name": "per key", "amount": "tokens", "budget": 1000, "window": "day"}
    return ug.Policy.from_dict(
        {"models": {"m": MODEL}, "scopes": SCOPES, "rules": [{**base, **rule}]}
    )


SCOPES = {"acme": {}, "eng": {"parent": "acme"}, "other": {}}


def rule_call(guard: ug.Guard, attributes: dict[str, str], tokens: int = 450) -> ug.Ticket:
    return guard.admit("alice", "m", prompt_tokens=tokens, max_tokens=tokens, attributes=attributes)


def admitted_rule_call(
    guard: ug.Guard, clock: ug.ManualClock, attributes: dict[str, str]
) -> ug.Ticket:
    """A 900-token call with `attributes`, admitted once the recovery's wait is over."""
    for _ in range(200):
        try:
            return rule_call(guard, attributes)
        except ug.UsageLimitsUnavailable as e:
            assert e.reason == "USAGE_LIMITS_RECOVERING"
            clock.advance(HOLD_AGAIN_SECONDS + 1)
    raise AssertionError("never answered after the restart")


def refused_rule_call(guard: ug.Guard, clock: ug.ManualClock, attributes: dict[str, str]) -> str:
    """The reason a 900-token call with `attributes` is refused once the store answers."""
    for _ in range(200):
        try:
            rule_call(guard, attributes).release()
        except ug.UsageLimitsUnavailable as e:
            assert e.reason == "USAGE_LIMITS_RECOVERING"
            clock.advance(HOLD_AGAIN_SECONDS + 1)
            continue
        except ug.UsageLimitError as e:
            return e.reason
        raise AssertionError("admitted: the rule's day started over")
    raise AssertionError("never answered after the restart")


@pytest.mark.parametrize(
    ("rule", "counted", "other"),
    [
        # One counter per credential: k1's day is kept, k2's own is untouched.
        ({"count_by": ["credential"]}, {"credential": "k1"}, {"credential": "k2"}),
        # One counter for acme's subtree: a call of its child scope eng counts in it.
        ({"applies_when": {"scope": "acme"}}, {"scope": "eng"}, {"scope": "other"}),
    ],
)
def test_a_generic_rule_keeps_its_day_after_a_restart(
    redis_server: RedisServer,
    clock: ug.ManualClock,
    tmp_path: Path,
    rule: dict[str, Any],
    counted: dict[str, str],
    other: dict[str, str],
) -> None:
    """900 of a generic rule's 1,000 tokens billed; Redis restarts empty; another 900 is
    refused (before: the rule's counter started over and it was admitted), while a call the
    rule does not count with those (another credential, a scope outside acme) still fits."""
    policy = rule_policy(rule)
    assert "tokens per day refilled from the guard's ledger" in policy.restart_cost
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    store = make_store(redis_server.url, "rules")
    guard = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
    rule_call(guard, counted).bill(input_tokens=450, output_tokens=450, wait=True)
    ledger.flush()
    redis_server.restart()
    assert refused_rule_call(guard, clock, counted) == "USAGE_LIMIT_DOES_NOT_FIT"
    ticket = admitted_rule_call(guard, clock, other)
    ticket.bill(input_tokens=450, output_tokens=450, wait=True)
    # The restart is also answered for a guard made after it.
    later = ug.Guard(
        policy, store=make_store(redis_server.url, "rules"), clock=clock, ledger=ledger
    )
    assert refused_rule_call(later, clock, counted) == "USAGE_LIMIT_DOES_NOT_FIT"
    assert billed_tokens(ledger) == 1800


OLD_SCHEMA = """
CREATE TABLE usage_ledger (
    ticket_id TEXT PRIMARY KEY, at_ms BIGINT NOT NULL, day TEXT NOT NULL, user_id TEXT,
    teams TEXT NOT NULL, source_type TEXT NOT NULL, source_id TEXT NOT NULL, team_id TEXT,
    model TEXT NOT NULL, input_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL, compute_ms BIGINT NOT NULL, request_id TEXT, metadata TEXT
);
"""


def test_an_old_ledger_is_migrated_and_its_rows_match_no_attribute(
    clock: ug.ManualClock, tmp_path: Path
) -> None:
    """A ledger file written before rows recorded attributes gets the column on open; its
    old row (900 tokens of alice's, no attributes) counts in no credential's counter, and
    the rows written since refill one."""
    import sqlite3

    path = str(tmp_path / "old.db")
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        day_ms = clock.now_ms()
        db.execute(
            "INSERT INTO usage_ledger VALUES "
            "('old', ?, '', 'alice', '[]', 'direct', 'alice', NULL, 'm', 450, 0, 450, 0, 0, 0,"
            " NULL, NULL)",
            (day_ms,),
        )
    ledger = ug.SqliteLedger(path)
    policy = rule_policy({"count_by": ["credential"]})
    guard = ug.Guard(policy, clock=clock, ledger=ledger)  # memory store: filled on first read
    rule_call(guard, {"credential": "k1"}).bill(input_tokens=450, output_tokens=450, wait=True)
    ledger.flush()
    with sqlite3.connect(path) as db:
        rows = dict(db.execute("SELECT ticket_id, attributes FROM usage_ledger").fetchall())
    assert rows.pop("old") is None
    assert list(rows.values()) == ['{"credential":"k1"}']
    assert billed_tokens(ledger) == 1800
    # A new guard fills k1's day from the row that recorded it: 900 used, 900 more refused.
    fresh = ug.Guard(policy, clock=clock, ledger=ledger)
    with pytest.raises(ug.UsageLimitError):
        rule_call(fresh, {"credential": "k1"})
    ledger.close()
    assert ug.SqliteLedger(path).query(group_by=["user"])[0]["requests"] == 2  # reopened
