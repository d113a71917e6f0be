"""A durable ledger under asyncio: many concurrent `bill_async` calls each return once their
row is committed, and every acknowledged row is in the database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import usage_guard as ug

POLICY = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [{"metric": "tokens", "amount": 10_000_000, "window": "day"}],
            }
        ]
    },
}
TASKS = 64


async def test_durable_bills_from_many_tasks_all_land(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.db")
    ledger = ug.SqliteLedger(path, durable=True)
    guard = ug.Guard(ug.Policy.from_dict(POLICY), ledger=ledger)

    async def one(n: int) -> str:
        ticket = await guard.admit_async("alice", "m", prompt_tokens=n + 1, max_tokens=1)
        billed = await ticket.bill_async(n + 1, 0)
        assert billed is not None and billed["recorded"]
        return ticket.id

    ids = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(TASKS))), 60)
    assert len(set(ids)) == TASKS
    # Durable: committed before each bill_async returned; a second ledger on the file sees all.
    rows = ug.SqliteLedger(path).query(user="alice")
    assert sum(r["requests"] for r in rows) == TASKS
    assert sum(r["input_tokens"] for r in rows) == sum(n + 1 for n in range(TASKS))
