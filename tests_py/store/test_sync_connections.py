"""Sync calls on a Redis store answer on the caller's thread, over a pooled blocking connection
(src/guard/store/redis/blocking.rs): connections are reused, many threads at once never
overspend, a hang fails a call within the store's timeout, and a connection a failure broke is
never reused, and a connection Redis dropped (a restart, `CLIENT KILL`) costs no call: its
request is sent once more on a new one. On a real redis-server."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import usage_guard as ug
from redis_harness import RedisServer


def _policy(rules: list[dict[str, Any]]) -> ug.Policy:
    return ug.Policy.from_dict(
        {
            "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 4_000}},
            "limits": {"direct": [{"user": "alice", "model": "gpt-5", "rules": rules}]},
        }
    )


def _connections_made(server: RedisServer) -> int:
    info = server.cli("INFO", "stats")
    return int(
        next(x for x in info.splitlines() if x.startswith("total_connections_received:")).split(
            ":"
        )[1]
    )


def _call(guard: ug.Guard) -> None:
    guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10).bill(10, 5)


def _used(server: RedisServer, prefix: str, policy: ug.Policy) -> int:
    """The first rule's use as a new guard on the same store reads it."""
    other = ug.Guard(policy, store=ug.RedisStore(server.url, prefix))
    try:
        return int(other.usage("alice", "gpt-5")["rules"][0]["used"])
    finally:
        other.close()


def test_sync_calls_reuse_their_connections(redis_server: RedisServer) -> None:
    policy = _policy([{"metric": "requests", "amount": 10**9, "window": "day"}])
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "reuse"))
    for _ in range(20):
        _call(guard)
    before = _connections_made(redis_server)
    for _ in range(300):
        _call(guard)
    guard.close()
    # 300 admissions and bills, one thread: its one pooled connection (plus at most the
    # runtime's own, for the background settles and the store checks).
    assert _connections_made(redis_server) - before <= 2
    assert _used(redis_server, "reuse", policy) == 320


def test_many_threads_at_once_never_overspend(redis_server: RedisServer) -> None:
    """More threads than the pool keeps idle, each admitting in a loop: exactly the limit."""
    limit = 150
    policy = _policy([{"metric": "requests", "amount": limit, "window": "day"}])
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "threads"))
    admitted = [0] * 24
    start = threading.Barrier(24)

    def worker(i: int) -> None:
        start.wait()
        for _ in range(12):
            try:
                ticket = guard.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1)
            except ug.UsageLimitError:
                continue
            admitted[i] += 1
            ticket.bill(1, 1)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    guard.close()
    assert sum(admitted) == limit
    assert _used(redis_server, "threads", policy) == limit


def test_a_hung_redis_fails_a_sync_call_within_its_timeout(redis_server: RedisServer) -> None:
    """A sync call on a hung Redis gives up after the store's timeout; the answer that comes
    late never reaches another call, so the counts after the hang stay exact."""
    policy = _policy([{"metric": "tokens", "amount": 10**9, "window": "day"}])
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "hang", timeout=0.2))
    for _ in range(5):
        _call(guard)
    assert redis_server.pid is not None
    os.kill(redis_server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        try:
            guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10).release()
        except ug.UsageLimitError as e:
            assert e.reason == "USAGE_LIMITS_UNAVAILABLE", e.reason
        waited = time.monotonic() - started
    finally:
        os.kill(redis_server.pid, signal.SIGCONT)
    assert waited < 1.0, f"a hung Redis held a sync call {waited:.2f} s (timeout 0.2 s)"
    # Every call after the hang gets its own answer (not the late one): the counts are exact.
    for _ in range(20):
        _call(guard)
    guard.close()
    assert _used(redis_server, "hang", policy) == 25 * 15


def test_a_restart_costs_no_call(redis_server: RedisServer) -> None:
    """The pooled connection a restart closed is found closed at the call's first request,
    which goes once more on a new connection (before, the call that met it failed)."""
    guard = ug.Guard(
        _policy([{"metric": "requests", "amount": 10**9, "window": "day"}]),
        store=ug.RedisStore(redis_server.url, "restart"),
    )
    for _ in range(5):
        _call(guard)
    redis_server.restart()
    failed = 0
    for _ in range(6):
        try:
            _call(guard)
        except ug.UsageLimitError:
            failed += 1
    assert failed == 0, f"{failed} calls failed after the restart"
    guard.close()  # the last bills are sent while the server is still up


def test_connections_redis_dropped_cost_no_call_and_no_double_count(
    redis_server: RedisServer,
) -> None:
    """`CLIENT KILL` between calls, 20 times: each call's first request meets the closed
    pooled connection and is sent again on a new one, and each call counts exactly once."""
    policy = _policy([{"metric": "requests", "amount": 10**9, "window": "day"}])
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "killed"))
    _call(guard)
    for _ in range(20):
        killed = redis_server.cli("CLIENT", "KILL", "TYPE", "normal")  # all but the cli's
        assert int(killed) >= 1, "the guard's pooled connection was killed"
        ticket = guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10)
        # Waits, so that no bill is in flight at the next kill (a request met by two drops
        # in a row fails once more and is left to the background retry).
        ticket.bill(10, 5, wait=True)
    assert guard.stats()["unavailable"] == 0 and guard.stats()["store_errors"] == 0
    guard.close()
    assert _used(redis_server, "killed", policy) == 21


def test_a_connection_redis_closed_while_idle_costs_no_call(redis_server: RedisServer) -> None:
    """Redis closes clients idle past its `timeout` setting (managed Redis often sets one): a
    pooled connection idle that long is checked before use, so no call meets the closed one."""
    guard = ug.Guard(
        _policy([{"metric": "requests", "amount": 10**9, "window": "day"}]),
        store=ug.RedisStore(redis_server.url, "idle"),
    )
    _call(guard)
    redis_server.cli("CONFIG", "SET", "timeout", "1")
    time.sleep(2.5)  # Redis checks idle clients about once a second
    failed = 0
    for _ in range(3):
        try:
            _call(guard)
        except ug.UsageLimitError:
            failed += 1
    assert failed == 0, f"{failed} calls met a connection Redis had closed"
    guard.close()  # the last bills are sent while the server is still up


async def test_asyncio_calls_after_redis_dropped_the_connections_do_not_fail(
    redis_server: RedisServer,
) -> None:
    """The runtime's multiplexed connection, dropped by `CLIENT KILL` before each call: the
    call's request is sent once more on the remade connection (before, 20 admissions of 20
    were refused as unavailable), and each call counts exactly once."""
    policy = _policy([{"metric": "requests", "amount": 10**9, "window": "day"}])
    guard = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "killed-async"))
    for _ in range(20):
        redis_server.cli("CLIENT", "KILL", "TYPE", "normal")
        ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=10, max_tokens=10)
        billed = await ticket.bill_async(10, 5, wait=True)
        assert billed is not None and billed["recorded"] is True
    assert guard.stats()["unavailable"] == 0 and guard.stats()["store_errors"] == 0
    guard.close()
    assert _used(redis_server, "killed-async", policy) == 20
