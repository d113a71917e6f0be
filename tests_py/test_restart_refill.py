"""A restart keeps the day for every metric the ledger can answer (issue 31 item 2): with a
ledger, every counter the ledger refills (calendar windows, sliding windows of an hour or
more) is fenced like cost, so a Redis restarted empty under a running guard is refilled from
the ledger instead of starting over. Without a ledger, unfenced metrics start over, as
`usage-guard check` says. Real redis-server restarted empty, real SQLite ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer
from test_epoch_fence import HOLD_AGAIN_SECONDS

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
    store = ug.RedisStore(redis_server.url, "tok")
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
        tokens_policy(), store=ug.RedisStore(redis_server.url, "new"), clock=clock, ledger=ledger
    )
    big_call(first)
    first.close()
    ledger.flush()
    redis_server.restart()
    later = ug.Guard(
        tokens_policy(), store=ug.RedisStore(redis_server.url, "new"), clock=clock, ledger=ledger
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
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "bare"), clock=clock)
    big_call(guard)
    redis_server.restart()
    admit_after_the_restart(guard, clock, prompt_tokens=450, max_tokens=450).release()


def test_short_sliding_windows_are_not_fenced_with_a_ledger(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """A sliding window under an hour is not refilled, so not fenced: it starts over."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    store = ug.RedisStore(redis_server.url, "short")
    guard = ug.Guard(tokens_policy("10m"), store=store, clock=clock, ledger=ledger)
    big_call(guard)
    redis_server.restart()
    admit_after_the_restart(guard, clock, prompt_tokens=450, max_tokens=450).release()
    assert guard.stats()["recovering"] == 0
    assert "10 minutes" in tokens_policy("10m").restart_cost
