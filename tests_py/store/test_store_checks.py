"""Store checks (issue 10 item 4): at first use and after a reconnect the Redis store checks
`maxmemory-policy` (must be `noeviction`) and, for a connection with an ACL user, that
`FLUSHALL` and `RESTORE` are denied (`ACL DRYRUN`; an unreadable answer is not a pass).
`settings.store_checks = "report"` logs a warning; `"enforce"` refuses fenced rules with
`budget_recovering` until a check passes. Real redis-servers."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer

MODEL: dict[str, Any] = {"provider": "openai", "prices": {"input": 1000.0, "output": 1000.0}}


def guard_on(url: str, checks: str, prefix: str = "chk") -> ug.Guard:
    document = {
        "models": {"m": MODEL},
        "settings": {"store_checks": checks},
        "limits": {
            "direct": [
                {
                    "user": "alice",
                    "model": "m",
                    "rules": [{"metric": "cost", "amount": 100.0, "window": "day"}],
                }
            ]
        },
    }
    return ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(url, prefix))


def admit(guard: ug.Guard) -> ug.Ticket:
    return guard.admit("alice", "m", prompt_tokens=10, max_tokens=10)


@pytest.fixture
def lru_server() -> Iterator[RedisServer]:
    server = RedisServer(extra=("--maxmemory-policy", "allkeys-lru"))
    try:
        yield server
    finally:
        server.stop()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("usage_guard") and "counter store check" in r.getMessage()
    ]


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_report_logs_an_evicting_store_and_goes_on(
    lru_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="usage_guard"):
        guard = guard_on(lru_server.url, "report")
        admit(guard).release()
        wait_for(lambda: warnings_of(caplog), "no store-check warning")
        admit(guard).release()
    # Logged once, not at every check: a recheck that finds the same problem stays quiet.
    # (A recheck that times out on a loaded machine logs its own, different problem.)
    messages = [m for m in warnings_of(caplog) if "allkeys-lru" in m]
    assert len(messages) == 1, warnings_of(caplog)
    assert "noeviction" in messages[0]


def test_enforce_fences_until_the_store_is_fixed(lru_server: RedisServer) -> None:
    guard = guard_on(lru_server.url, "enforce")
    with pytest.raises(ug.UsageLimitsUnavailable) as refused:
        admit(guard)
    assert refused.value.reason == "USAGE_LIMITS_RECOVERING"
    lru_server.cli("config", "set", "maxmemory-policy", "noeviction")

    def admitted() -> bool:
        try:
            admit(guard).release()
            return True
        except ug.UsageLimitsUnavailable:
            return False

    wait_for(admitted, "the fixed store was never trusted again")


def test_enforce_passes_a_healthy_store(redis_server: RedisServer) -> None:
    admit(guard_on(redis_server.url, "enforce")).release()


def acl_url(server: RedisServer, user: str, *rules: str) -> str:
    assert server.cli("acl", "setuser", user, "on", ">pw", "~*", "&*", *rules) == "OK"
    return f"redis://{user}:pw@127.0.0.1:{server.port}/"


def test_an_acl_user_that_may_flushall_fails_the_check(redis_server: RedisServer) -> None:
    url = acl_url(redis_server, "mighty", "+@all")
    with pytest.raises(ug.UsageLimitsUnavailable):
        admit(guard_on(url, "enforce"))


def test_an_acl_user_denied_flushall_and_restore_passes(redis_server: RedisServer) -> None:
    url = acl_url(redis_server, "careful", "+@all", "-flushall", "-restore")
    admit(guard_on(url, "enforce")).release()


def test_an_unverifiable_denial_is_not_a_pass(redis_server: RedisServer) -> None:
    # May not run ACL at all: the denial cannot be verified.
    url = acl_url(redis_server, "quiet", "+@all", "-flushall", "-restore", "-acl")
    with pytest.raises(ug.UsageLimitsUnavailable):
        admit(guard_on(url, "enforce"))


def test_a_bad_store_checks_value_names_the_field() -> None:
    with pytest.raises(ug.PolicyError) as bad:
        ug.Policy.from_dict({"settings": {"store_checks": "sometimes"}})
    assert bad.value.errors[0]["path"] == "settings.store_checks"
    assert "report, enforce" in bad.value.errors[0]["message"]
