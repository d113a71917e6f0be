"""admit + bill per second on a local Redis, with 1, 8 and 64 concurrent asyncio callers,
beside the EVALSHA ceiling `redis-benchmark` measures on the same server.

Run: .venv/bin/python benches/redis_bench.py [seconds-per-level]

It starts its own redis-server on a free port (and stops it by pid). Each admit is 2 round
trips (read, reserve) and each bill 1 (settle), all EVALSHA on one multiplexed connection,
so the ratio column compares 3 scripts per call with redis-benchmark's 1-script EVALSHA.
The policy has 3 rules on 3 counters (tokens a day, requests per 10 minutes, a model total).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))

import usage_guard as ug  # noqa: E402
from redis_harness import RedisServer  # noqa: E402

POLICY = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 1000}},
    "limits": {
        "direct": [
            {
                "user": "u",
                "model": "gpt-5",
                "rules": [
                    {"metric": "tokens", "amount": 9_000_000_000_000, "window": "day"},
                    {"metric": "requests", "amount": 9_000_000_000_000, "window": "10 minutes"},
                ],
            }
        ],
        "model_total": [
            {
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 9_000_000_000_000, "window": "day"}],
            }
        ],
    },
}


async def run_level(guard: ug.Guard, callers: int, seconds: float) -> float:
    stop = time.perf_counter() + seconds
    done = 0

    async def caller(i: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            ticket = await guard.admit_async("u", "gpt-5", prompt_tokens=100, max_tokens=200)
            await ticket.bill_async(input_tokens=100, output_tokens=50)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    return done / (time.perf_counter() - started)


def evalsha_ceiling(server: RedisServer) -> float:
    sha = server.cli("SCRIPT", "LOAD", "return redis.call('HINCRBY', KEYS[1], 'u', 1)")
    out = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-q", "-n", "200000", "-c", "50"]
        + ["EVALSHA", sha, "1", "{bench}:k"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"([\d.]+) requests per second", out)
    return float(found[-1])


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    server = RedisServer()
    try:
        ceiling = evalsha_ceiling(server)
        server.cli("CONFIG", "RESETSTAT")
        guard = ug.Guard(ug.Policy.from_dict(POLICY), store=ug.RedisStore(server.url, "bench"))
        print(f"redis-benchmark EVALSHA (50 clients): {ceiling:,.0f} scripts/s")
        print("callers  admit+bill/s  scripts/s  ratio to EVALSHA ceiling")
        for callers in (1, 8, 64):
            rate = asyncio.run(run_level(guard, callers, seconds))
            scripts = rate * 3
            print(f"{callers:>7}  {rate:>12,.0f}  {scripts:>9,.0f}  {scripts / ceiling:.2f}")
        stats = server.cli("INFO", "commandstats")
        for line in stats.splitlines():
            if line.startswith("cmdstat_evalsha:"):
                usec = re.search(r"usec_per_call=([\d.]+)", line)
                if usec:
                    print(f"server time per usage_guard script: {float(usec.group(1)):.1f} us")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
