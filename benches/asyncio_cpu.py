"""What 64 (or N) asyncio callers cost this process: calls per second of `admit_async` +
`bill_async` on the 3-rule policy of `benches/redis_bench.py` (one redis-server started
here), with this process's CPU per call (user and system, from `os.times`) and its context
switches per call (`getrusage`: voluntary ones are mostly threads waiting for the GIL or for
work). To compare two builds in one session, install the other as a wheel in a directory and
put it first on `PYTHONPATH` for alternate runs.

Run: .venv/bin/python benches/asyncio_cpu.py [CALLERS] [SECONDS]   (default 64 callers, 3 s)
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import usage_guard as ug  # noqa: E402
from redis_bench import POLICY, run_level  # noqa: E402
from redis_harness import RedisServer  # noqa: E402


def main() -> None:
    callers = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    server = RedisServer()
    try:
        guard = ug.Guard(ug.Policy.from_dict(POLICY), store=ug.RedisStore(server.url, "cpu"))
        asyncio.run(run_level(guard, 1, 0.2))  # connected, scripts loaded
        before, usage_before = os.times(), resource.getrusage(resource.RUSAGE_SELF)
        rate = asyncio.run(run_level(guard, callers, seconds))
        after, usage_after = os.times(), resource.getrusage(resource.RUSAGE_SELF)
        guard.close()
    finally:
        server.stop()
    calls = rate * seconds
    user = (after.user - before.user) / calls * 1e6
    system = (after.system - before.system) / calls * 1e6
    waits = (usage_after.ru_nvcsw - usage_before.ru_nvcsw) / calls
    preempted = (usage_after.ru_nivcsw - usage_before.ru_nivcsw) / calls
    print(
        f"{callers} callers: {rate:,.0f} calls/s; this process's CPU per call "
        f"{user + system:.1f} µs (user {user:.1f}, system {system:.1f}); context switches "
        f"per call {waits:.2f} voluntary, {preempted:.2f} involuntary"
    )


if __name__ == "__main__":
    main()
