"""One round of the in-memory store's paths, for comparing two builds side by side (run it
alternately with each build first on PYTHONPATH): the 6-rule sync admit + bill of
`admit_bill.py` (best of 3 x 30,000), the async pair (best of 2 x 20,000), and 4 threads
calling one guard for 2 s (calls/s). Prints one JSON line.

Run: PYTHONPATH=/path/to/build .venv/bin/python benches/memory_threads.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))

import usage_guard as ug  # noqa: E402
from admit_bill import SIX_RULES, bench_usage_guard, bench_usage_guard_async  # noqa: E402


def threads(count: int = 4, seconds: float = 2.0) -> float:
    """Calls per second of `count` threads admitting and billing on one guard."""
    guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), clock=ug.ManualClock("2026-11-30T14:20:00Z"))
    stop = time.perf_counter() + seconds
    counts = [0] * count

    def run(i: int) -> None:
        while time.perf_counter() < stop:
            guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000).bill(1100, 800)
            counts[i] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / seconds


if __name__ == "__main__":
    print(
        json.dumps(
            {
                "sync_us": min(bench_usage_guard(30_000) for _ in range(3)),
                "async_us": min(bench_usage_guard_async(20_000) for _ in range(2)),
                "threads4_calls_s": threads(),
            }
        )
    )
