"""A reservation whose round trip timed out while Redis was paused (it lands after), with the
spend failure mode `allow` answering the call from the ledger: the call's bill uses the
ticket's id, the same id the failed reservation is given back by. The bill's use must reach
the Redis counter (it is what the next admissions read), not be skipped as "already
settled" by the give-back's mark. Real redis-server (CLIENT PAUSE), SQLite ledger."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer

MODEL: dict[str, Any] = {"provider": "openai", "prices": {"input": 1000.0, "output": 1000.0}}


@pytest.mark.parametrize("slot_groups", [False, True])
def test_a_bill_after_a_timed_out_reservation_reaches_the_counter(
    redis_server: RedisServer, tmp_path: Path, clock: ug.ManualClock, slot_groups: bool
) -> None:
    rule = {"metric": "cost", "amount": 1.0, "window": "day"}
    policy = ug.Policy.from_dict(
        {
            "models": {"m": MODEL},
            "settings": {"spend_failure_mode": "allow"},
            "limits": {"direct": [{"user": "alice", "model": "m", "rules": [rule]}]},
        }
    )
    ledger = ug.SqliteLedger(str(tmp_path / "u.db"))
    prefix = f"paused-{int(slot_groups)}"
    store = ug.RedisStore(redis_server.url, prefix, timeout=0.2, slot_groups=slot_groups)
    guard = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
    guard.admit("alice", "m", prompt_tokens=50, max_tokens=50).bill(50, 50, wait=True)
    redis_server.cli("CLIENT", "PAUSE", "1000", "ALL")
    ticket = guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert guard.stats()["ledger_answered"] == 1, guard.stats()
    time.sleep(1.5)  # the pause is over: the reservation sent during it lands, then its give-back
    ticket.bill(50, 50, wait=True)
    guard.close()
    ledger.flush()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == 200_000
    used = guard.usage("alice", "m")["rules"][0]
    # two calls of $0.10 each (micro-dollars): both in the ledger, so both in the counter
    assert used["used"] == 200_000, used
