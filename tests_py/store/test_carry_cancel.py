"""Carried settles under cancellation (docs/redis-internals.md, "Settles ride with the next
reservation"): asyncio tasks bill in the background while other tasks' admissions, each of
which may carry the queued bills in its own script, are cancelled mid-flight. Every bill
counts exactly once, `close()` waits for the bills a cancelled admission took, and no hold
is left; on a real redis-server, in each store layout (with slot groups a call touches the
person's group and the Model Total's; leased, the Model Total is leased)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import LAYOUTS, RedisServer, watching, with_model_total

POLICY: dict[str, Any] = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 4_000}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 100_000_000, "window": "day"}],
            }
        ]
    },
}
MODEL_TOTAL = 10**12
POLICY_WITH_TOTAL = with_model_total(POLICY, "gpt-5", MODEL_TOTAL)
BILLERS, BILLS = 16, 25
CANCELLERS, CANCELS = 16, 40


def _guard(
    server: RedisServer,
    ledger: ug.SqliteLedger | None = None,
    layout: str = "shared",
    store_options: dict[str, Any] | None = None,
) -> ug.Guard:
    options = LAYOUTS[layout] if store_options is None else store_options
    store = ug.RedisStore(server.url, f"carry-{layout}", **options)
    policy = POLICY if layout == "shared" else POLICY_WITH_TOTAL
    return ug.Guard(ug.Policy.from_dict(policy), store=store, ledger=ledger)


def _tokens(guard: ug.Guard) -> tuple[int, int]:
    rule = guard.usage("alice", "gpt-5")["rules"][0]
    return rule["used"], rule["reserved"]


def _model_total(guard: ug.Guard) -> tuple[int, int]:
    """The Model Total's used and reserved, as `guard` reads it."""
    total = guard.usage("alice", "gpt-5")["ceilings"][0]
    assert total["amount"] == MODEL_TOTAL, total
    return total["used"], total["reserved"]


class _Run:
    """Billers and cancellers on one guard; what the tickets billed, and how they went."""

    def __init__(self, guard: ug.Guard, seed: int) -> None:
        self.guard = guard
        self.rng = random.Random(seed)
        self.billed = 0
        self.waited: list[object] = []
        self.cancelled = 0

    async def admit(self) -> ug.Ticket:
        return await self.guard.admit_async("alice", "gpt-5", prompt_tokens=10, max_tokens=40)

    async def biller(self, n: int) -> None:
        for i in range(BILLS):
            ticket = await self.admit()
            output = self.rng.randint(0, 30)
            # Most bills go to the background queue (the next reservation carries them);
            # one in five waits for the store's answer, which must then be True.
            wait = (n + i) % 5 == 0
            billed = await ticket.bill_async(input_tokens=10, output_tokens=output, wait=wait)
            assert billed is not None
            if wait:
                self.waited.append(billed["recorded"])
            self.billed += 10 + output
            await asyncio.sleep(0)

    async def canceller(self) -> None:
        for _ in range(CANCELS):
            task = asyncio.ensure_future(self.admit())
            # Cancelled at once, after one loop turn, or a little later: in flight, its
            # store step (and the bills it carries) sent or not.
            for _ in range(self.rng.randint(0, 2)):
                await asyncio.sleep(0)
            if self.rng.random() < 0.3:
                await asyncio.sleep(self.rng.random() * 0.002)
            task.cancel()
            try:
                ticket = await task
            except asyncio.CancelledError:
                self.cancelled += 1
                continue
            # Admitted before the cancel landed: it bills like any other call.
            billed = await ticket.bill_async(input_tokens=10, output_tokens=1)
            assert billed is not None
            self.billed += 11

    async def main(self) -> None:
        await asyncio.gather(
            *(self.biller(n) for n in range(BILLERS)),
            *(self.canceller() for _ in range(CANCELLERS)),
        )


def _settled(read: Any, expected: int) -> tuple[int, int]:
    """What `read()` answers (used, reserved) once no hold is left (10 s at most: the holds
    of cancelled admissions are given back in the background)."""
    deadline = time.monotonic() + 10
    while True:
        used, reserved = read()
        if (used, reserved) == (expected, 0) or time.monotonic() > deadline:
            return used, reserved
        time.sleep(0.05)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("with_ledger", [False, True])
def test_cancelled_carrying_admissions_count_every_bill_once(
    redis_server: RedisServer, tmp_path: Path, with_ledger: bool, layout: str
) -> None:
    # With a ledger, admissions run on the runtime from their first poll (not inline on the
    # event loop): the cancels land at other points of the store step.
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db")) if with_ledger else None
    guard = _guard(redis_server, ledger, layout)
    watcher = _guard(redis_server, layout=layout, store_options=watching(layout))
    # Whether a cancel lands while a store step is in flight is up to timing: a few more
    # rounds (other seeds) when the first had none.
    runs: list[_Run] = []
    for seed in (7, 8, 9, 10):
        runs.append(_Run(guard, seed=seed))
        asyncio.run(runs[-1].main())
        if guard.stats()["given_up"] > 0:
            break
    guard.close()
    billed = sum(run.billed for run in runs)
    waited = [w for run in runs for w in run.waited]
    # Right after close(): every bill is in Redis, as a guard that queued none of them reads
    # it (a bill a cancelled admission carried was not left to a retry that has not run).
    used_at_close = _tokens(watcher)[0]
    stats = guard.stats()
    assert stats["settles_carried"] > 0, stats  # bills rode with reservations
    assert stats["given_up"] > 0, stats  # some admissions were cancelled mid-flight
    assert sum(r.cancelled for r in runs) > 0
    assert waited and all(r is True for r in waited), waited
    assert used_at_close == billed, (used_at_close, billed, stats)
    assert _settled(lambda: _tokens(watcher), billed) == (billed, 0), stats
    if layout != "shared":  # the Model Total (in its own group; leased, given back at close)
        assert _settled(lambda: _model_total(watcher), billed) == (billed, 0), stats
    time.sleep(0.3)  # late retries find each bill settled: never counted twice
    assert _tokens(watcher) == (billed, 0)
    if layout != "shared":
        assert _model_total(watcher) == (billed, 0)
    cancelled = sum(run.cancelled for run in runs)
    assert stats["billed"] == len(runs) * (BILLERS * BILLS + CANCELLERS * CANCELS) - cancelled
    if ledger is not None:  # the ledger's rows agree with the counters
        assert ledger.query(group_by=[])[0]["tokens"] == billed
    # Redis answered every step: no bill was left to the background retry.
    assert stats["settle_failures"] == 0 and stats["settles_retried"] == 0, stats
