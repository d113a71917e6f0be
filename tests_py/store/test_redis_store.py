"""The Redis store from Python: sync and async, many guard processes on one budget, a
cluster, and what happens while Redis is down."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator

import pytest
import usage_guard as ug
from redis_harness import (
    BUDGET,
    BUDGET_POLICY,
    LAYOUTS,
    RedisCluster,
    RedisServer,
    budget_worker,
    with_model_total,
)


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisCluster]:
    """One 3-master cluster for this module (tests use prefixes of their own)."""
    cluster = RedisCluster()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_store_is_passed_to_guard_and_shared(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    store = ug.RedisStore(redis_server.url, prefix="py")
    assert store.prefix == "py"
    assert "RedisStore" in repr(store)
    policy = ug.Policy.from_dict(BUDGET_POLICY)
    a = ug.Guard(policy, store=store, clock=clock)
    b = ug.Guard(policy, store=ug.RedisStore(redis_server.url, prefix="py"), clock=clock)
    ticket = a.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=400)
    assert ticket.ceiling["tokens"] == 500
    view = b.usage("alice", "gpt-5")
    assert view["rules"][0]["reserved"] == 500
    ticket.bill(input_tokens=100, output_tokens=50, wait=True)
    assert b.usage("alice", "gpt-5")["rules"][0]["used"] == 150
    # Another prefix is another set of counters.
    other = ug.Guard(policy, store=ug.RedisStore(redis_server.url, prefix="other"), clock=clock)
    assert other.usage("alice", "gpt-5")["rules"][0]["used"] == 0


async def test_async_admit_and_bill(redis_server: RedisServer, clock: ug.ManualClock) -> None:
    guard = ug.Guard(
        ug.Policy.from_dict(BUDGET_POLICY), store=ug.RedisStore(redis_server.url), clock=clock
    )
    ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=10, max_tokens=100)
    billed = await ticket.bill_async(input_tokens=10, output_tokens=20)
    assert billed is not None and billed["input_tokens"] == 10
    assert (await guard.usage_async("alice", "gpt-5"))["rules"][0]["used"] == 30


def test_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError):
        ug.RedisStore("not a url")
    with pytest.raises(TypeError, match="list"):
        ug.RedisStore.cluster("redis://127.0.0.1:1/")
    with pytest.raises(ValueError):
        ug.RedisStore.cluster([])


def test_cluster_store(redis_cluster: RedisCluster, clock: ug.ManualClock) -> None:
    store = ug.RedisStore.cluster(redis_cluster.urls, prefix="py-cluster")
    guard = ug.Guard(ug.Policy.from_dict(BUDGET_POLICY), store=store, clock=clock)
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=400)
    ticket.bill(input_tokens=100, output_tokens=300)
    assert guard.usage("alice", "gpt-5")["rules"][0]["used"] == 400


def test_many_guard_processes_share_one_budget(redis_server: RedisServer) -> None:
    """4 guard instances in separate OS processes x 16 asyncio tasks on one small budget:
    billed total == sum of reports, and held + used never exceeds the amount."""
    prefix = "many"
    watcher = ug.Guard(
        ug.Policy.from_dict(BUDGET_POLICY), store=ug.RedisStore(redis_server.url, prefix)
    )
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rule = watcher.usage("alice", "gpt-5")["rules"][0]
            samples.append(rule["used"] + rule["reserved"])
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    ctx = multiprocessing.get_context("spawn")
    try:
        # One task per pool process: a process waiting at the barrier takes no other task.
        with ctx.Manager() as manager, ctx.Pool(4) as pool:
            start = manager.Barrier(4)
            args = [(redis_server.url, prefix, 16, 12, seed, start) for seed in range(4)]
            results = pool.starmap(budget_worker, args)
    finally:
        done.set()
        sampler.join()
    reported = sum(r["reported"] for r in results)
    assert all(r["bill_none"] == 0 for r in results)
    assert all(r["admitted"] > 0 for r in results), f"every process took part: {results}"
    assert sum(r["admitted"] for r in results) > 40
    assert sum(r["refused"] for r in results) > 0, "the budget ran out during the run"
    rule = watcher.usage("alice", "gpt-5")["rules"][0]
    assert rule["used"] == reported
    assert rule["reserved"] == 0
    assert len(samples) > 20
    assert max(samples) <= BUDGET


# With slot groups, a Model Total puts each call in two groups (the person's and the model's).
@pytest.mark.parametrize("layout", ["shared", "slot_groups"])
def test_redis_killed_mid_run_then_restarted(redis_server: RedisServer, layout: str) -> None:
    policy = (
        BUDGET_POLICY if layout == "shared" else with_model_total(BUDGET_POLICY, "gpt-5", 10**9)
    )
    store = ug.RedisStore(redis_server.url, "f", **LAYOUTS[layout])
    guard = ug.Guard(ug.Policy.from_dict(policy), store=store)
    tickets = [guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50) for _ in range(3)]
    # Kept open: a ticket dropped unsettled is released at once, which would race the kill.
    running = guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
    assert running is not None
    redis_server.kill()
    started = time.monotonic()
    with pytest.raises(ug.UsageLimitsUnavailable) as refused:
        guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
    assert time.monotonic() - started < 4
    err = refused.value
    assert err.unavailable and err.reason == "USAGE_LIMITS_UNAVAILABLE"
    assert str(err) == "Usage limits cannot be checked right now"
    status, _headers, body = err.to_http("openai")
    assert status == 503
    assert body["error"]["code"] == "usage_limits_unavailable"
    # Bills while Redis is down do not raise; they are counted as settle failures, say they
    # are not known yet, and are retried in the background until Redis answers. (One waits
    # for its retry, the 2 s `wait=True` allows; the others answer at once.)
    for n, ticket in enumerate(tickets):
        billed = ticket.bill(input_tokens=10, output_tokens=5, wait=n == 0)
        assert billed is not None and billed["recorded"] is None
    deadline = time.monotonic() + 2  # the two queued bills fail in the background
    while (stats := guard.stats())["settle_failures"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stats["settle_failures"] == 3 and stats["unavailable"] >= 1
    redis_server.start()  # same port, same guard
    deadline = time.monotonic() + 5
    while True:
        try:
            ticket = guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
            break
        except ug.UsageLimitsUnavailable:
            assert time.monotonic() < deadline, "no recovery within 5 s"
            time.sleep(0.1)
    assert ticket.bill(input_tokens=10, output_tokens=5) is not None
    # The restarted Redis lost everything before; the three bills made while it was down land
    # once each (beside the new one) within 2 s.
    deadline = time.monotonic() + 2
    while guard.usage("alice", "gpt-5")["rules"][0]["used"] != 60:
        assert time.monotonic() < deadline, guard.usage("alice", "gpt-5")
        time.sleep(0.05)
    time.sleep(0.3)
    usage = guard.usage("alice", "gpt-5")
    assert usage["rules"][0]["used"] == 60
    if layout != "shared":  # the model's group counted each bill once too
        assert (usage["ceilings"][0]["used"], usage["ceilings"][0]["reserved"]) == (60, 0), usage


async def test_async_callers_see_unavailable_while_down(redis_server: RedisServer) -> None:
    import asyncio

    guard = ug.Guard(ug.Policy.from_dict(BUDGET_POLICY), store=ug.RedisStore(redis_server.url, "a"))
    errors: list[BaseException] = []
    admitted = 0

    async def caller() -> None:
        nonlocal admitted
        for _ in range(20):
            try:
                ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=1, max_tokens=5)
            except ug.UsageLimitError as e:
                errors.append(e)
                await asyncio.sleep(0.02)
                continue
            admitted += 1
            await ticket.bill_async(input_tokens=1, output_tokens=1)
            await asyncio.sleep(0.01)

    async def killer() -> None:
        await asyncio.sleep(0.05)
        await asyncio.to_thread(redis_server.kill)

    await asyncio.gather(killer(), *(caller() for _ in range(8)))
    assert admitted > 0 and errors
    assert all(isinstance(e, ug.UsageLimitsUnavailable) for e in errors)
