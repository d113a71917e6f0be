"""Queue wait of `ai.concurrency` (docs/quotas.md, "Queues"): limit 4, 16 and 64 callers,
each holding its slot for 5 ms then releasing, on the memory store and a local Redis.

Run: .venv/bin/python benches/quota_queue.py [rounds-per-caller]

Each caller is a thread calling `guard.admit` (sync, the GIL released while it waits) in a
loop; the wait is the time `admit` takes. Printed beside each row is the wait an ideal FIFO
queue gives in the same run: with `limit` slots each held `hold` (measured, the sleep's
real length), a caller behind `callers - limit` others waits `(callers / limit - 1) × hold`
on average, so the ratio measured / ideal is the queue's overhead (polling, round trips,
wake-ups), independent of the machine's speed. The holds' p99 is printed too: on a loaded
machine a 5 ms sleep can last far longer, and every waiter behind it waits that much more.
It starts its own redis-server on a free port (stopped by pid).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))

import usage_guard as ug  # noqa: E402
from redis_harness import RedisServer  # noqa: E402
from usage_guard.quota.model import check_limits, compile_rules  # noqa: E402

LIMIT = 4
HOLD_S = 0.005
TEAM = {"team": "t"}


def policy() -> ug.Policy:
    limits = check_limits({"ai.concurrency": {"limit": LIMIT, "max_wait": 600, "max_queue": 1000}})
    rules = compile_rules([("team", "t", limits)], warn_at=None)
    return ug.Policy.from_dict({"models": {"gpt-5": {"provider": "openai"}}, "rules": rules})


def run(store: Any, callers: int, rounds: int) -> dict[str, float]:
    """Every caller admits, holds HOLD_S, releases, `rounds` times; the waits in ms."""
    guard = ug.Guard(policy(), store=store)
    waits: list[float] = []
    holds: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(callers)

    def caller(i: int) -> None:
        mine, held = [], []
        start.wait()
        for _ in range(rounds):
            t0 = time.perf_counter()
            ticket = guard.admit(f"u{i}", "gpt-5", prompt_tokens=1, max_tokens=1, attributes=TEAM)
            t1 = time.perf_counter()
            time.sleep(HOLD_S)
            held.append(time.perf_counter() - t1)
            ticket.release()
            mine.append((t1 - t0) * 1000)
        with lock:
            waits.extend(mine)
            holds.extend(held)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    q = statistics.quantiles(waits, n=100)
    hold_ms = statistics.mean(holds) * 1000
    hold_p99 = statistics.quantiles(holds, n=100)[98] * 1000
    ideal = max(callers / LIMIT - 1, 0) * hold_ms
    return {"p50": q[49], "p90": q[89], "p99": q[98], "hold99": hold_p99, "ideal": ideal}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    server = RedisServer()
    try:
        print(f"limit {LIMIT}, hold {HOLD_S * 1000:.0f} ms, {rounds} rounds per caller")
        print(
            f"{'store':<7}{'callers':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
            f"{'ideal ms':>10}{'p50/ideal':>11}{'hold p99 ms':>13}"
        )
        for name in ("memory", "redis"):
            for callers in (16, 64):
                store: Any = (
                    ug.MemoryStore()
                    if name == "memory"
                    else ug.RedisStore(server.url, prefix=f"bench{callers}")
                )
                r = run(store, callers, rounds)
                print(
                    f"{name:<7}{callers:>8}{r['p50']:>9.1f}{r['p90']:>9.1f}{r['p99']:>9.1f}"
                    f"{r['ideal']:>10.1f}{r['p50'] / r['ideal']:>11.2f}{r['hold99']:>13.1f}"
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
