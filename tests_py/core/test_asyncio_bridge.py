"""The asyncio bridge: work that needs no waiting (the in-memory store) comes back as an
already-resolved future, with no thread hop; work that waits (Redis, a ledger) resolves on the
caller's loop; refusals arrive as exceptions either way; a cancelled call's work is dropped and
the loop keeps going."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer

POLICY: dict[str, Any] = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [
                    {"metric": "requests", "amount": 300, "window": "day"},
                    {"metric": "tokens", "amount": 1_000_000, "window": "day"},
                ],
            }
        ]
    },
}


def guard(**kwargs: Any) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(POLICY), **kwargs)


async def test_memory_store_answers_without_a_round_trip_through_the_loop() -> None:
    g = guard()
    pending = g.admit_async("alice", "m", prompt_tokens=10, max_tokens=5)
    assert isinstance(pending, asyncio.Future) and pending.done()
    ticket = await pending
    billing = ticket.bill_async(10, 5)
    assert billing.done()
    billed = await billing
    assert billed is not None and billed["output_tokens"] == 5 and billed["recorded"]
    usage = g.usage_async("alice", "m")
    assert usage.done() and (await usage)["rules"][0]["used"] == 1


async def test_a_refusal_is_raised_by_await_on_either_path(redis_server: RedisServer) -> None:
    for g in (guard(), guard(store=ug.RedisStore(redis_server.url, prefix="bridge"))):
        with pytest.raises(ug.UsageLimitError):
            await g.admit_async("alice", "m", prompt_tokens=2_000_000, max_tokens=5)
        with pytest.raises(ValueError, match="model"):
            await g.admit_async("alice", "", prompt_tokens=1, max_tokens=1)


async def test_many_tasks_count_exactly_on_both_paths(redis_server: RedisServer) -> None:
    for g in (guard(), guard(store=ug.RedisStore(redis_server.url, prefix="exact"))):

        async def one(g: ug.Guard = g) -> bool:
            try:
                ticket = await g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)
            except ug.UsageLimitError:
                return False
            await ticket.bill_async(1, 1)
            return True

        admitted = await asyncio.gather(*(one() for _ in range(400)))
        assert sum(admitted) == 300  # exactly the requests/day amount, never more
        view = await g.usage_async("alice", "m")
        assert [r["used"] for r in view["rules"]] == [300, 600]


async def test_waiting_work_resolves_on_the_loop(redis_server: RedisServer, tmp_path: Path) -> None:
    waiting = [
        (guard(store=ug.RedisStore(redis_server.url, prefix="wait")), False),
        # A ledger is never polled inline: its admission always resolves on the loop.
        (guard(ledger=ug.SqliteLedger(str(tmp_path / "l.db"))), True),
    ]
    for g, never_inline in waiting:
        pending = g.admit_async("alice", "m", prompt_tokens=3, max_tokens=2)
        # A Redis answer may already be back when the first poll looks (a fast local
        # server): then the future is resolved at once, which is the point of polling inline.
        if never_inline:
            assert not pending.done()
        ticket = await asyncio.wait_for(pending, 10)
        billed = await asyncio.wait_for(ticket.bill_async(3, 2, wait=True), 10)
        assert billed is not None and billed["input_tokens"] == 3 and billed["recorded"]


async def test_a_cancelled_call_leaves_the_loop_working(redis_server: RedisServer) -> None:
    g = guard(store=ug.RedisStore(redis_server.url, prefix="cancel"))
    cancelled = 0
    for _ in range(50):
        pending = g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)
        if pending.cancel():
            cancelled += 1
            with pytest.raises(asyncio.CancelledError):
                await pending
        else:
            # The first poll runs inline: an answer already in wins over cancel().
            assert await (await pending).release_async()
    assert cancelled > 0, "no call was still waiting on the store when cancelled"
    await asyncio.sleep(0.2)  # late results must not be set on the cancelled futures
    ticket = await g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)
    assert await ticket.release_async()
    for _ in range(100):  # the cancelled calls' holds are given back by ticket id
        rules = {r["metric"]: r for r in (await g.usage_async("alice", "m"))["rules"]}
        if rules["tokens"]["reserved"] == 0:
            break
        await asyncio.sleep(0.05)
    assert rules["tokens"]["reserved"] == 0, "a cancelled call left its hold"


def test_results_that_come_back_after_their_loop_closed_give_their_holds_back(
    redis_server: RedisServer,
) -> None:
    """Results reach their loop in batches (src/py/asyncio_batch.rs): one call_soon_threadsafe
    carries every result finished meanwhile. A loop that closes first never runs that drain
    (or refuses it): the results in it are dropped, and each ticket gives its hold back."""
    g = guard(store=ug.RedisStore(redis_server.url, prefix="closed"))

    async def leave_calls_behind() -> None:
        for _ in range(60):  # started and never awaited: the loop closes before most answers
            g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)

    asyncio.run(leave_calls_behind())

    async def reserved() -> int:
        rules = (await g.usage_async("alice", "m"))["rules"]
        return int(next(r for r in rules if r["metric"] == "tokens")["reserved"])

    async def settled() -> int:
        for _ in range(100):
            left = await reserved()
            if left == 0:
                break
            await asyncio.sleep(0.05)
        return left

    assert asyncio.run(settled()) == 0, "a result dropped with its loop kept its hold"

    # and a new loop on the same thread gets its own results
    async def one_call() -> ug.Ticket:
        pending = g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)
        return await asyncio.wait_for(pending, 10)

    ticket = asyncio.run(one_call())
    assert ticket.release()


def test_loops_in_two_threads_each_get_their_own_results(redis_server: RedisServer) -> None:
    """Each loop's results are queued for that loop's thread: two loops running at once, in
    two threads, on one guard, each resolve exactly their own calls."""
    g = guard(store=ug.RedisStore(redis_server.url, prefix="threads"))
    counts: dict[str, int] = {}

    async def calls(name: str) -> None:
        async def one() -> None:
            ticket = await g.admit_async("alice", "m", prompt_tokens=1, max_tokens=1)
            await ticket.bill_async(1, 1)

        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(100))), 20)
        counts[name] = 100

    threads = [threading.Thread(target=asyncio.run, args=(calls(n),)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert counts == {"a": 100, "b": 100}
    view = g.usage("alice", "m")
    assert [r["used"] for r in view["rules"]] == [200, 400]
