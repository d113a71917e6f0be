"""Leased shared counters (docs/redis.md, "Leases"): a Model Total every call touches is
checked against a slice this process leased, and the store hears of its use in batches. The
amount is never exceeded (leases are holds), every bill counts once, leases are given back at
`close()`, a lease serves many calls, and a killed guard's lease comes back at its expiry."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import (
    GROUP_MODEL_BUDGET,
    GROUP_PERSON_BUDGET,
    GROUP_USERS,
    GROUPS_POLICY,
    RedisCluster,
    RedisServer,
    groups_worker,
)
from test_slot_groups import scan

START = "2026-11-30T08:00:00Z"


def model_total(guard: ug.Guard, user: str = "g0") -> Any:
    """The Model Total of gpt-5 as `guard` reads it."""
    return guard.usage(user, "gpt-5")["ceilings"][0]


def big_policy(model_amount: int) -> dict[str, Any]:
    """`GROUPS_POLICY` with people's budgets that never bind and a Model Total of
    `model_amount` tokens a day."""
    return {
        "models": GROUPS_POLICY["models"],
        "limits": {
            "public": [
                {
                    "model": "gpt-5",
                    "each_person": [{"metric": "tokens", "amount": 10**9, "window": "day"}],
                }
            ],
            "model_total": [
                {
                    "model": "gpt-5",
                    "rules": [{"metric": "tokens", "amount": model_amount, "window": "day"}],
                }
            ],
        },
    }


def lease_keys(port: int, prefix: str) -> list[str]:
    """The records of the leases (and of their flushes) in the model's group."""
    return scan(port, "{" + prefix + ":2:m:gpt-5}:t:lease-*")


def test_processes_leasing_a_model_total_never_bill_past_it() -> None:
    """4 processes x 16 asyncio tasks, each leasing the small Model Total from its first call,
    on a 3-master cluster: every bill counted once in the model's group, no hold (lease or
    call) left once every guard closed, the amount never exceeded."""
    cluster = RedisCluster()
    try:
        prefix = "lease"
        ctx = multiprocessing.get_context("spawn")
        with ctx.Manager() as manager, ctx.Pool(4) as pool:
            start = manager.Barrier(4)
            args = [(cluster.urls, prefix, 16, 12, seed, start, 0.0) for seed in range(4)]
            results = pool.starmap(groups_worker, args)
        assert all(r["bill_none"] == 0 for r in results)
        assert sum(r["refused"] for r in results) > 0, "a budget ran out during the run"
        store = ug.RedisStore.cluster(cluster.urls, prefix, slot_groups=True)
        watcher = ug.Guard(ug.Policy.from_dict(GROUPS_POLICY), store=store)
        total = 0
        for user in GROUP_USERS:
            reported = sum(r["reported"][user] for r in results)
            person = watcher.usage(user, "gpt-5")["rules"][0]
            assert (person["used"], person["reserved"]) == (reported, 0), user
            assert reported <= GROUP_PERSON_BUDGET, user
            total += reported
        model = model_total(watcher)
        assert (model["used"], model["reserved"]) == (total, 0)
        assert total <= GROUP_MODEL_BUDGET
        leases = sum(len(lease_keys(node.port, prefix)) for node in cluster.nodes)
        assert leases > 0, "no guard leased the Model Total"
    finally:
        cluster.stop()


def test_a_lease_serves_many_calls_and_is_given_back_at_close() -> None:
    """One guard calling back to back on a big Model Total: its leases and their flushes are
    a small share of its calls; after `close()` the counter holds every bill and no hold."""
    server = RedisServer()
    try:
        policy = ug.Policy.from_dict(big_policy(10_000_000))
        store = ug.RedisStore(server.url, "many", slot_groups=True, lease_above=0)
        guard = ug.Guard(policy, store=store)
        calls, reported = 400, 0
        for i in range(calls):
            ticket = guard.admit(f"u{i % 50}", "gpt-5", prompt_tokens=20, max_tokens=100)
            ticket.bill(20, 30)
            reported += 50
        state = store.lease_state()
        assert state["leases"] == 1
        assert 0 < state["unused"] <= 10_000_000 // 10
        guard.close()
        assert store.lease_state() == {"leases": 0, "unused": 0}
        # Scripts on the model's group: three per lease (read, reserve, the old one's settle)
        # and one per flush (each leaves a record `<lease>/f<n>`).
        records = lease_keys(server.port, "many")
        flushes = sum("%2Ff" in key for key in records)
        leases = len(records) - flushes
        assert leases > 0 and flushes > 0
        assert 3 * leases + flushes <= calls // 20, (leases, flushes)
        watcher = ug.Guard(policy, store=ug.RedisStore(server.url, "many", slot_groups=True))
        model = model_total(watcher, "u0")
        assert (model["used"], model["reserved"]) == (reported, 0)
    finally:
        server.stop()


def test_leasing_stops_near_the_amount_and_no_headroom_is_lost() -> None:
    """Calls until the Model Total refuses: never more billed than the amount, and the last
    refusal leaves less than one call's hold (the lease's unused part was this guard's own
    room, not lost)."""
    server = RedisServer()
    try:
        amount = 5_000
        policy = ug.Policy.from_dict(big_policy(amount))
        store = ug.RedisStore(server.url, "near", slot_groups=True, lease_above=0)
        guard = ug.Guard(policy, store=store)
        reported, hold = 0, 20 + 100
        with pytest.raises(ug.UsageLimitError):
            for i in range(amount):
                ticket = guard.admit(f"u{i % 7}", "gpt-5", prompt_tokens=20, max_tokens=100)
                assert ticket.ceiling["tokens"] == hold
                ticket.bill(20, 60, wait=True)
                reported += 80
        model = model_total(guard, "u0")
        assert model["used"] + model["reserved"] <= amount
        assert reported <= amount
        assert amount - reported < hold, (amount, reported)
        guard.close()
        watcher = ug.Guard(policy, store=ug.RedisStore(server.url, "near", slot_groups=True))
        model = model_total(watcher, "u0")
        assert (model["used"], model["reserved"]) == (reported, 0)
    finally:
        server.stop()


CHILD = textwrap.dedent(
    """
    import sys, time
    import usage_guard as ug
    policy = ug.Policy.from_dict({policy!r})
    store = ug.RedisStore({url!r}, "killed", slot_groups=True, lease_above=0)
    guard = ug.Guard(policy, store=store, clock=ug.ManualClock({start!r}))
    for i in range(30):
        guard.admit(f"u{{i}}", "gpt-5", prompt_tokens=20, max_tokens=100).bill(20, 30, wait=True)
    time.sleep(0.6)  # two flushes: every bill is in the store
    print(store.lease_state()["unused"], flush=True)
    time.sleep(60)
    """
)


def test_a_killed_guard_s_lease_comes_back_at_its_expiry() -> None:
    """A guard killed with SIGKILL while it holds a lease: its bills were told to the store,
    and its slice holds headroom only until the lease expires (at most 3 minutes)."""
    server = RedisServer()
    try:
        policy = big_policy(1_000_000)
        code = CHILD.format(policy=policy, url=server.url, start=START)
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        unused = int(child.stdout.readline())
        assert unused > 0
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        clock = ug.ManualClock(START)
        store = ug.RedisStore(server.url, "killed", slot_groups=True)
        watcher = ug.Guard(ug.Policy.from_dict(policy), store=store, clock=clock)
        model = model_total(watcher)
        assert model["used"] == 30 * 50
        assert model["reserved"] >= unused
        clock.advance(minutes=3)
        model = model_total(watcher)
        assert (model["used"], model["reserved"]) == (30 * 50, 0)
    finally:
        server.stop()


def test_a_forked_child_leases_on_its_own() -> None:
    """A guard forked after it leased: the child never takes from its parent's slice (it
    leases its own), and once both closed the counter holds both processes' bills once."""
    server = RedisServer()
    try:
        policy = ug.Policy.from_dict(big_policy(1_000_000))
        store = ug.RedisStore(server.url, "fork", slot_groups=True, lease_above=0)
        guard = ug.Guard(policy, store=store)
        guard.admit("p", "gpt-5", prompt_tokens=20, max_tokens=100).bill(20, 30, wait=True)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 1
            try:
                assert store.lease_state()["leases"] == 0
                for _ in range(10):
                    guard.admit("c", "gpt-5", prompt_tokens=20, max_tokens=100).bill(20, 30)
                assert store.lease_state()["leases"] == 1
                guard.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        for _ in range(10):
            guard.admit("p", "gpt-5", prompt_tokens=20, max_tokens=100).bill(20, 30)
        guard.close()
        watcher = ug.Guard(policy, store=ug.RedisStore(server.url, "fork", slot_groups=True))
        model = model_total(watcher, "p")
        assert (model["used"], model["reserved"]) == (21 * 50, 0)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (float("nan"), ValueError), (True, TypeError), ("20", TypeError)],
)
def test_a_bad_lease_rate_is_refused_by_name(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="lease_above"):
        ug.RedisStore("redis://127.0.0.1:1", "x", lease_above=value)


def test_a_store_reports_its_lease_rate() -> None:
    store = ug.RedisStore("redis://127.0.0.1:1", "x", slot_groups=True, lease_above=20)
    assert store.lease_above == 20.0
    assert "lease_above=20" in repr(store)
    assert ug.RedisStore("redis://127.0.0.1:1", "x").lease_above is None
    assert store.lease_state() == {"leases": 0, "unused": 0}


def test_a_store_restarted_empty_under_a_lease_is_refilled_and_never_overspent(
    tmp_path: Any,
) -> None:
    """A redis-server restarted empty while this guard holds a lease on the Model Total: the
    lease is lost with it. The next call meets the fence, the leases are renewed under it
    only after the recovery refilled the day from the ledger, and the day ends within the
    amount."""
    from test_epoch_fence import HOLD_AGAIN_SECONDS

    server = RedisServer()
    try:
        amount = 5_000
        clock = ug.ManualClock(START)
        ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
        store = ug.RedisStore(server.url, "restart", slot_groups=True, lease_above=0)
        policy = ug.Policy.from_dict(big_policy(amount))
        guard = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
        for i in range(30):
            guard.admit(f"u{i % 5}", "gpt-5", prompt_tokens=20, max_tokens=100).bill(
                20, 60, wait=True
            )
        assert store.lease_state()["leases"] == 1
        ledger.flush()
        server.restart()  # empty, on the same port
        billed, refused = 30 * 80, None
        for i in range(400):
            try:
                ticket = guard.admit(f"u{i % 5}", "gpt-5", prompt_tokens=20, max_tokens=100)
            except ug.UsageLimitsUnavailable as e:
                if e.reason == "USAGE_LIMITS_RECOVERING":
                    clock.advance(HOLD_AGAIN_SECONDS + 1)
                continue
            except ug.UsageLimitError as e:
                refused = e.reason
                break
            ticket.bill(20, 60, wait=True)
            billed += 80
        assert refused is not None, "the amount never refused"
        ledger.flush()
        in_ledger = sum(
            g["input_tokens"] + g["output_tokens"] for g in ledger.query(group_by=["user"])
        )
        assert in_ledger == billed
        # Within the amount; the use billed against the lost lease and not yet told to the
        # store (it was in the ledger the recovery refilled from) may count twice: high,
        # never low, a few calls at most.
        assert amount - 4 * 120 < billed <= amount, billed
    finally:
        server.stop()


def test_cancelled_admissions_and_dropped_tickets_leave_no_hold_on_a_lease() -> None:
    """16 asyncio tasks on a leased Model Total, some admissions cancelled mid-flight, some
    tickets dropped without a bill, some released, the rest billed: after `close()` the
    counter holds every bill once and no hold (a cancelled or dropped call gave its hold
    back, to its lease or to the store)."""
    import asyncio
    import gc
    import random

    server = RedisServer()
    try:
        policy = ug.Policy.from_dict(big_policy(40_000))
        store = ug.RedisStore(server.url, "cancel", slot_groups=True, lease_above=0)
        guard = ug.Guard(policy, store=store)
        reported = 0

        async def worker(seed: int) -> None:
            nonlocal reported
            rng = random.Random(seed)
            for i in range(25):
                admit = guard.admit_async(
                    f"u{seed}-{i % 5}", "gpt-5", prompt_tokens=20, max_tokens=100
                )
                task = asyncio.ensure_future(admit)
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.002]))
                    task.cancel()
                try:
                    ticket = await task
                except asyncio.CancelledError:
                    continue
                except ug.UsageLimitError:
                    continue
                choice = rng.random()
                if choice < 0.2:
                    del ticket
                    gc.collect()
                elif choice < 0.35:
                    await ticket.release_async()
                else:
                    out = rng.randrange(0, 100)
                    await ticket.bill_async(20, out, wait=True)
                    reported += 20 + out

        async def main() -> None:
            await asyncio.gather(*(worker(seed) for seed in range(16)))

        asyncio.run(main())
        guard.close()
        assert store.lease_state() == {"leases": 0, "unused": 0}
        watcher = ug.Guard(policy, store=ug.RedisStore(server.url, "cancel", slot_groups=True))
        model = model_total(watcher, "u0")
        assert (model["used"], model["reserved"]) == (reported, 0)
    finally:
        server.stop()
