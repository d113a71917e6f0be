"""The PostgreSQL ledger from Python, against a server `postgres_harness.pg_url` starts
(initdb + pg_ctl in a temp directory, as the `postgres` user when run as root) or the
machine's server on 127.0.0.1:5432 (trust auth, database `test`)."""

from __future__ import annotations

from typing import Any

import pytest
import usage_guard as ug
from postgres_harness import _free_port, pg_url  # noqa: F401  (pg_url: a fixture)
from test_ledger import POLICY, spend


def test_postgres_ledger_records_and_queries(
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    url = pg_url()
    ledger = ug.PostgresLedger(url)
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    spend(guard, "alice", 3, 1000, 200)
    spend(guard, "bob", 1, 100, 10, metadata={"k": [1, 2]})
    guard.close()
    by_user = ledger.query(group_by=["user", "team"])
    assert [(g["user"], g["team"], g["requests"]) for g in by_user] == [
        ("alice", None, 3),
        ("bob", "research", 1),
    ]
    # A second guard on an empty store sees alice's day from the ledger.
    fresh = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.PostgresLedger(url))
    assert fresh.usage("alice", "gpt-5")["rules"][0]["used"] == 3600
    ledger.close()
    with pytest.raises(ug.LedgerError, match="closed"):
        ledger.query()


def test_postgres_unreachable_is_a_ledger_error() -> None:
    with pytest.raises(ug.LedgerError, match="cannot connect"):
        ug.PostgresLedger(f"postgres://nobody@127.0.0.1:{_free_port()}/x")
