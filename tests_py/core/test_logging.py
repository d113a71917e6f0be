"""Rust log records reach Python `logging` under the `usage_guard` logger, and a counter-store
outage is logged once when it starts, not once per call."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys

import pytest
import usage_guard as ug
from redis_harness import BUDGET_POLICY, RedisServer


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_store_outage_is_logged_once_under_usage_guard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ug.RedisStore(f"redis://127.0.0.1:{closed_port()}", prefix="logging")
    guard = ug.Guard(ug.Policy.from_dict(BUDGET_POLICY), store=store)
    calls = 5
    with caplog.at_level(logging.WARNING, logger="usage_guard"):
        for _ in range(calls):
            with pytest.raises(ug.UsageLimitsUnavailable):
                guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
    ours = [r for r in caplog.records if r.name.split(".")[0] == "usage_guard"]
    assert guard.stats()["store_errors"] >= calls
    assert len(ours) == 1, [r.getMessage() for r in ours]
    record = ours[0]
    assert record.levelno == logging.WARNING
    assert record.name.startswith("usage_guard.")  # the Rust module path, under usage_guard
    assert "counter store outage started" in record.getMessage()
    assert "admit" in record.getMessage()


def test_each_store_logs_its_own_outage(caplog: pytest.LogCaptureFixture) -> None:
    """Two stores down at once: each outage's start is logged (before, the log was the
    process's, and the first store's endless outage hid the second's start)."""
    guards = [
        ug.Guard(
            ug.Policy.from_dict(BUDGET_POLICY),
            store=ug.RedisStore(f"redis://127.0.0.1:{closed_port()}", prefix=f"down{i}"),
        )
        for i in range(2)
    ]
    with caplog.at_level(logging.WARNING, logger="usage_guard"):
        for guard in guards + guards:
            with pytest.raises(ug.UsageLimitsUnavailable):
                guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
    started = [r for r in caplog.records if "outage started" in r.getMessage()]
    assert len(started) == 2, [r.getMessage() for r in caplog.records]


BUSY_AT_EXIT = """
import asyncio, logging, os, signal, sys, threading, time
import usage_guard as ug

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
rule = {"name": "team concurrency", "applies_when": {"team": "t"}, "amount": "concurrency",
        "budget": 1, "action": "throttle", "throttle_max_wait": 30, "throttle_max_queue": 10}
models = {"gpt-5": {"provider": "openai", "prices": {"input": 1.25, "output": 10.0}}}
policy = ug.Policy.from_dict({"models": models, "rules": [rule]})
guard = ug.Guard(policy, store=ug.RedisStore(sys.argv[1], prefix="exit"))

def admit(user):
    return guard.admit(user, "gpt-5", prompt_tokens=10, max_tokens=10, attributes={"team": "t"})

async def admit_async():
    return await guard.admit_async(
        "a", "gpt-5", prompt_tokens=10, max_tokens=10, attributes={"team": "t"}
    )

holder = admit("holder")
for i in range(3):
    threading.Thread(target=admit, args=(f"w{i}",), daemon=True).start()
# and one coroutine, on its own loop: its future is resolved from the guard's runtime
threading.Thread(target=lambda: asyncio.run(admit_async()), daemon=True).start()
while guard.waiting < 4:
    time.sleep(0.01)
print("waiting", flush=True)
os.kill(int(sys.argv[2]), signal.SIGKILL)  # the waiters' next polls fail, and log, as Python exits
"""


def test_threads_busy_at_exit_stop_logging_without_a_panic() -> None:
    # Daemon threads waiting in a queue on a store that has just gone poll, fail, log and (the
    # coroutine's) resolve their future while Python exits: once it is exiting they no longer
    # enter it (before, pyo3 panicked there).
    server = RedisServer()
    try:
        run = [sys.executable, "-c", BUSY_AT_EXIT, server.url, str(server.pid)]
        child = subprocess.run(run, capture_output=True, text=True, timeout=60)
    finally:
        server.stop()
    assert child.returncode == 0, child.stderr
    assert child.stdout == "waiting\n"
    assert "panicked" not in child.stderr, child.stderr
