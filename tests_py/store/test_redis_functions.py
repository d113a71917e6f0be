"""The Redis store's scripts as a function library (docs/redis.md, "Scripts and functions"),
from Python: loaded on first use and called with FCALL; `functions=False`, a server that lost
the library, and a user whose ACL denies functions all still count every call, by SHA where
they must. Real redis-server."""

from __future__ import annotations

import asyncio
import re

import pytest
import usage_guard as ug
from redis_harness import RedisCluster, RedisServer

POLICY = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [{"metric": "tokens", "amount": 1000, "window": "day"}],
            }
        ]
    },
}


def _calls(server: RedisServer) -> dict[str, int]:
    """Calls that ran without an error, by command, since the last CONFIG RESETSTAT."""
    stats = server.cli("INFO", "commandstats")
    found = re.findall(r"cmdstat_(\w+):calls=(\d+),.*failed_calls=(\d+)", stats)
    return {name: int(calls) - int(failed) for name, calls, failed in found}


def _bill_three(store: ug.RedisStore) -> ug.Guard:
    guard = ug.Guard(ug.Policy.from_dict(POLICY), store=store)
    for _ in range(3):
        guard.admit("alice", "m", prompt_tokens=10, max_tokens=10).bill(
            input_tokens=10, output_tokens=5, wait=True
        )
    return guard


def _used(guard: ug.Guard) -> int:
    return guard.usage("alice", "m")["rules"][0]["used"]


def test_by_default_the_scripts_run_as_one_library(redis_server: RedisServer) -> None:
    store = ug.RedisStore(redis_server.url, "fn-default")
    redis_server.cli("CONFIG", "RESETSTAT")
    guard = _bill_three(store)
    assert store.functions is True
    assert "usage_guard_" in redis_server.cli("FUNCTION", "LIST")
    calls = _calls(redis_server)
    assert calls.get("fcall", 0) >= 6 and calls.get("evalsha", 0) == 0, calls
    assert _used(guard) == 3 * 15
    assert "functions" not in repr(store)


def test_functions_false_calls_by_sha_and_loads_nothing(redis_server: RedisServer) -> None:
    store = ug.RedisStore(redis_server.url, "fn-off", functions=False)
    assert store.functions is False
    assert repr(store).endswith("functions=False)")
    redis_server.cli("CONFIG", "RESETSTAT")
    guard = _bill_three(store)
    calls = _calls(redis_server)
    assert calls.get("fcall", 0) == 0 and calls.get("evalsha", 0) >= 6, calls
    assert "usage_guard_" not in redis_server.cli("FUNCTION", "LIST")
    assert _used(guard) == 3 * 15


def test_a_flushed_library_costs_no_call(redis_server: RedisServer) -> None:
    store = ug.RedisStore(redis_server.url, "fn-flush")
    guard = _bill_three(store)
    for _ in range(2):
        assert redis_server.cli("FUNCTION", "FLUSH") == "OK"
        guard.admit("alice", "m", prompt_tokens=10, max_tokens=10).bill(
            input_tokens=10, output_tokens=5, wait=True
        )
    assert store.functions is True
    assert _used(guard) == 5 * 15


def test_a_user_denied_functions_falls_back_to_sha(redis_server: RedisServer) -> None:
    redis_server.cli(
        "ACL", "SETUSER", "plain", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function"
    )
    url = redis_server.url.replace("redis://", "redis://plain:pw@")
    store = ug.RedisStore(url, "fn-acl")
    guard = _bill_three(store)
    assert store.functions is False
    assert _used(guard) == 3 * 15


def test_on_a_cluster_every_master_runs_the_library() -> None:
    """Slot groups spread people over the masters: each master gets the library at its
    first call (FUNCTION LOAD goes to every master) and runs their calls as functions."""
    cluster = RedisCluster()
    try:
        store = ug.RedisStore.cluster(cluster.urls, "fn-cluster", slot_groups=True)
        people = [f"p{i}" for i in range(24)]
        rule = POLICY["limits"]["direct"][0]  # type: ignore[index]
        policy = {**POLICY, "limits": {"direct": [{**rule, "user": p} for p in people]}}
        guard = ug.Guard(ug.Policy.from_dict(policy), store=store)
        for person in people:
            guard.admit(person, "m", prompt_tokens=10, max_tokens=10).bill(
                input_tokens=10, output_tokens=5, wait=True
            )
        assert store.functions is True
        for master in cluster.masters():
            assert "usage_guard_" in master.cli("FUNCTION", "LIST")
            assert _calls(master).get("fcall", 0) > 0, master.port
        assert all(guard.usage(p, "m")["rules"][0]["used"] == 15 for p in people)
        guard.close()
    finally:
        cluster.stop()


@pytest.mark.parametrize("command", ["FCALL", "FUNCTION"])
def test_a_server_without_the_commands_gets_the_scripts_by_sha(command: str) -> None:
    """A server with `FCALL` renamed away answers as Redis 6 does ("unknown command"); one
    with `FUNCTION` renamed away cannot load the library. Either way every call counts."""
    server = RedisServer(extra=("--rename-command", command, ""))
    try:
        store = ug.RedisStore(server.url, "fn-renamed")
        guard = _bill_three(store)
        assert store.functions is False
        assert _used(guard) == 3 * 15
        guard.close()
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_functions_must_be_a_bool(redis_server: RedisServer, bad: object) -> None:
    with pytest.raises(TypeError, match="functions"):
        ug.RedisStore(redis_server.url, "fn-bad", functions=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="functions"):
        ug.RedisStore.cluster([redis_server.url], "fn-bad", functions=bad)  # type: ignore[arg-type]


def test_calls_sent_together_before_the_fallback_all_land() -> None:
    """16 asyncio tasks call a fresh store at once on a server without FCALL: the first
    answer turns the library off, and every call already sent as a function is sent again by
    SHA instead of failing."""
    server = RedisServer(extra=("--rename-command", "FCALL", ""))
    try:
        store = ug.RedisStore(server.url, "fn-together")
        guard = ug.Guard(ug.Policy.from_dict(POLICY), store=store)

        async def call() -> None:
            ticket = await guard.admit_async("alice", "m", prompt_tokens=10, max_tokens=10)
            await ticket.bill_async(input_tokens=10, output_tokens=5, wait=True)

        async def together() -> None:
            await asyncio.gather(*(call() for _ in range(16)))

        asyncio.run(together())
        assert store.functions is False
        assert _used(guard) == 16 * 15
        guard.close()
    finally:
        server.stop()
