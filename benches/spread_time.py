"""Redis time per sync admit + bill when calls are spread over minutes, as real calls are:
the guard on a manual clock moved SPREAD seconds after each call (the 6 rules of
`benches/admit_bill.py`, one redis-server started here). Each of 5 rounds makes N calls on a
fresh prefix and counts the second half's scripts in `INFO commandstats` (the first half
builds the holds up); prints the best and the median round's Redis µs per admit + bill, and
its wall-clock µs per admit + bill in this process (the guard's own work, the round trips,
and Redis's time). Time moves with the machine's load; `benches/functions_cost.py --spread`
counts instructions instead.

Run: .venv/bin/python benches/spread_time.py SPREAD [N]   (default N 400; needs redis-py)
"""

from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import redis  # noqa: E402
import usage_guard as ug  # noqa: E402
from admit_bill import SIX_RULES  # noqa: E402
from redis_harness import RedisServer  # noqa: E402

SCRIPTS = ("cmdstat_fcall", "cmdstat_evalsha")


def round_usec(url: str, prefix: str, spread: float, calls: int) -> tuple[float, float]:
    """Redis µs and wall-clock µs per admit + bill over the second half of `calls` calls
    `spread` s apart."""
    client = redis.Redis.from_url(url)
    clock = ug.ManualClock()
    guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), store=ug.RedisStore(url, prefix), clock=clock)
    half = calls // 2
    for i in range(calls):
        if i == half:
            client.config_resetstat()
            started = time.perf_counter()
        ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000 + i % 7)
        ticket.bill(1100, 800)
        clock.advance(spread)
    wall = (time.perf_counter() - started) * 1e6 / (calls - half)
    stats = client.info("commandstats")
    guard.close()
    return sum(v["usec"] for k, v in stats.items() if k in SCRIPTS) / (calls - half), wall


def main() -> None:
    spread = float(sys.argv[1])
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    server = RedisServer()
    try:
        rounds = [round_usec(server.url, f"s{r}", spread, calls) for r in range(5)]
    finally:
        server.stop()
    for i, what in enumerate(("Redis", "wall-clock")):
        each = [r[i] for r in rounds]
        print(
            f"{spread} s apart: {what} µs per admit + bill, best {min(each):.1f}, "
            f"median {statistics.median(each):.1f} (5 rounds of {calls} calls)"
        )


if __name__ == "__main__":
    main()
