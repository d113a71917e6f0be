"""A guard survives `fork()`: made and used in a parent (gunicorn `--preload`, Celery
prefork, `multiprocessing` with fork), then used in forked children. Each child gets its own
runtime, Redis connection and ledger writer; none hangs; the counter holds every call."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import usage_guard as ug
from redis_harness import RedisServer

POLICY = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [{"metric": "tokens", "amount": 1_000_000, "window": "day"}],
            }
        ]
    },
}
CHILDREN = 3
CHILD_DEADLINE_S = 30.0


def _call(guard: ug.Guard, tokens: int) -> None:
    guard.admit("alice", "m", prompt_tokens=tokens, max_tokens=1).bill(tokens, 0)


async def _call_async(guard: ug.Guard, tokens: int) -> None:
    ticket = await guard.admit_async("alice", "m", prompt_tokens=tokens, max_tokens=1)
    await ticket.bill_async(tokens, 0)


def _child(guard: ug.Guard, ledger: ug.SqliteLedger, n: int) -> int:
    """What a forked child does; its exit code says whether every step worked."""
    try:
        _call(guard, 10 + n)  # sync, on the child's own connection and runtime
        asyncio.run(_call_async(guard, 100 + n))  # asyncio, on the child's runtime
        guard.close()  # its queued bills settle before os._exit (which skips atexit)
        ledger.flush()  # the child's own writer thread wrote its rows
        return 0
    except BaseException:  # pragma: no cover - reported through the exit code
        import traceback

        traceback.print_exc()
        return 1


def _wait_all(pids: list[int]) -> list[object]:
    """Each child's exit code, or "hung" for one still running at the deadline (killed)."""
    deadline = time.monotonic() + CHILD_DEADLINE_S
    results: dict[int, object] = {}
    while len(results) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid not in results:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    results[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    for pid in pids:
        if pid not in results:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            results[pid] = "hung"
    return [results[pid] for pid in pids]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_guard_on_redis_with_a_ledger_survives_fork(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    store = ug.RedisStore(redis_server.url, prefix="fork")
    guard = ug.Guard(ug.Policy.from_dict(POLICY), store=store, ledger=ledger)
    _call(guard, 1)  # the parent's connection, runtime and writer are live before the fork
    asyncio.run(_call_async(guard, 2))
    ledger.flush()

    pids = []
    for n in range(CHILDREN):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's result is its exit code
            os._exit(_child(guard, ledger, n))
        pids.append(pid)
    assert _wait_all(pids) == [0] * CHILDREN

    _call(guard, 3)  # the parent keeps working on its own connection
    children = sum(10 + n + 100 + n for n in range(CHILDREN))
    used = guard.usage("alice", "m")["rules"][0]["used"]
    assert used == 1 + 2 + 3 + children
    ledger.flush()
    rows = ledger.query(user="alice")
    assert sum(r["requests"] for r in rows) == 3 + 2 * CHILDREN
