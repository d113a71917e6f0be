"""Wherever an instant is asked, a date is one (midnight UTC), as the CLI's `--since` reads
it: the ledger's `query` and `audit`, `ManualClock`, the quota service's `effective_from`.
A string that is neither is refused naming the argument and what is accepted."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import usage_guard as ug
from test_ledger import POLICY, spend

MIDNIGHT = "2026-11-02T00:00:00Z"


def ledger_across_midnight() -> ug.SqliteLedger:
    """One call on 2026-11-01 at 23:00 UTC and two on 2026-11-02 at 01:00 UTC."""
    clock = ug.ManualClock("2026-11-01T23:00:00Z")
    ledger = ug.SqliteLedger()
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    spend(guard, "alice", 1, 100, 10)
    clock.advance(hours=2)
    spend(guard, "alice", 2, 100, 10)
    ledger.flush()
    return ledger


@pytest.mark.parametrize(
    "day", ["2026-11-02", dt.date(2026, 11, 2), "2026-11-02T00:00", "2026-11-02 00:00:00"]
)
def test_a_date_is_midnight_utc_in_ledger_queries(day: Any) -> None:
    ledger = ledger_across_midnight()
    [after] = ledger.query(user="alice", since=day)
    [before] = ledger.query(user="alice", until=day)
    assert after == ledger.query(user="alice", since=MIDNIGHT)[0]
    assert (after["requests"], before["requests"]) == (2, 1)


def test_a_date_starts_a_manual_clock_at_midnight_utc() -> None:
    assert ug.ManualClock("2026-11-02").now() == ug.ManualClock(MIDNIGHT).now()
    assert ug.ManualClock(dt.date(2026, 11, 2)).now() == ug.ManualClock(MIDNIGHT).now()


def test_a_quota_assignment_takes_a_date(tmp_path: Any) -> None:
    clock = ug.ManualClock("2026-11-01T12:00:00Z")
    guard = ug.Guard(
        ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.SqliteLedger(str(tmp_path / "q.db"))
    )
    quotas = ug.QuotaService(guard, clock=clock)
    quotas.create_policy("cap", {"ai.tokens.total": {"limit": 300, "window": "month"}})
    quotas.assign("cap", "user:alice", effective_from=dt.date(2026, 11, 2))
    assert quotas.effective_limit("user:alice", "ai.tokens.total") is None
    clock.set(MIDNIGHT)
    quotas.refresh()
    assert quotas.effective_limit("user:alice", "ai.tokens.total") is not None
    guard.close()


@pytest.mark.parametrize("text", ["yesterday", "2026-11-31", "11/02/2026"])
def test_what_is_neither_a_date_nor_an_instant_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"since: is not a date or an ISO 8601 instant; accepted"):
        ug.SqliteLedger().query(since=text)
