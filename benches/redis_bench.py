"""admit + bill on a local Redis beside its peers on the same server: `limits` (sync and
asyncio, sliding-window counter over redis-py, one hit per call) and the EVALSHA ceiling
`redis-benchmark` measures; round trips and server time per script from INFO commandstats;
and at 64 asyncio callers, the CPU per call of this process and of the redis-server (`cpu_split`),
and the store's scripts as functions beside by SHA (`functions_pair`).

Run: .venv/bin/python benches/redis_bench.py [seconds-per-level]
(`benches/table.py` runs the same functions and prints them in the one table.)

It starts its own redis-server on a free port (and stops it by pid). The asyncio policy has
3 rules on 3 counters (tokens a day, requests per 10 minutes, a model total); the sync one is
the 6-rule path of `benches/admit_bill.py`.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import usage_guard as ug  # noqa: E402
from admit_bill import SIX_RULES  # noqa: E402
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
# What a script is in INFO commandstats (everything else there was called from inside one).
SCRIPT_COMMANDS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro")
LIMIT = "9000000000/day"


async def run_level(guard: ug.Guard, callers: int, seconds: float) -> float:
    """admit_async + bill_async per second from `callers` asyncio tasks."""
    stop = time.perf_counter() + seconds
    done = 0

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            ticket = await guard.admit_async("u", "gpt-5", prompt_tokens=100, max_tokens=200)
            await ticket.bill_async(input_tokens=100, output_tokens=50)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return done / (time.perf_counter() - started)


async def limits_aio_level(url: str, callers: int, seconds: float) -> float:
    """`limits.aio` sliding-window-counter hits per second (redis-py asyncio storage)."""
    from limits import parse
    from limits.aio.strategies import SlidingWindowCounterRateLimiter
    from limits.storage import storage_from_string

    storage = storage_from_string("async+" + url, implementation="redispy")
    limiter = SlidingWindowCounterRateLimiter(storage)  # type: ignore[arg-type]
    item = parse(LIMIT)
    await limiter.hit(item, "u")
    stop = time.perf_counter() + seconds
    done = 0

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await limiter.hit(item, "u")
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    rate = done / (time.perf_counter() - started)
    await storage.bridge.storage.aclose()  # type: ignore[attr-defined]
    return rate


def asyncio_pair(server: RedisServer, callers: int, seconds: float, rounds: int) -> tuple:
    """(usage_guard calls/s, limits.aio calls/s), best of `rounds` alternating rounds."""
    guard = ug.Guard(ug.Policy.from_dict(POLICY), store=ug.RedisStore(server.url, "bench"))
    asyncio.run(run_level(guard, 1, 0.1))
    ours, theirs = 0.0, 0.0
    for _ in range(rounds):
        ours = max(ours, asyncio.run(run_level(guard, callers, seconds)))
        theirs = max(theirs, asyncio.run(limits_aio_level(server.url, callers, seconds)))
    guard.close()
    return ours, theirs


def commandstats(server: RedisServer) -> dict[str, tuple[int, float]]:
    """INFO commandstats as {command: (calls, usec)}."""
    out = {}
    for line in server.cli("INFO", "commandstats").splitlines():
        found = re.match(r"cmdstat_([^:]+):calls=(\d+),usec=(\d+)", line)
        if found:
            out[found.group(1)] = (int(found.group(2)), float(found.group(3)))
    return out


def scripts_run(server: RedisServer) -> tuple[int, float]:
    """(scripts called, server µs spent in them) since the last CONFIG RESETSTAT."""
    stats = commandstats(server)
    calls = sum(stats.get(c, (0, 0.0))[0] for c in SCRIPT_COMMANDS)
    usec = sum(stats.get(c, (0, 0.0))[1] for c in SCRIPT_COMMANDS)
    return calls, usec


def evalsha_ceiling(server: RedisServer) -> tuple[float, float]:
    """redis-benchmark's EVALSHA of a one-HINCRBY script, 50 clients: (scripts/s, server µs
    per script)."""
    sha = server.cli("SCRIPT", "LOAD", "return redis.call('HINCRBY', KEYS[1], 'u', 1)")
    server.cli("CONFIG", "RESETSTAT")
    out = subprocess.run(
        ["redis-benchmark", "-p", str(server.port), "-q", "-n", "200000", "-c", "50"]
        + ["EVALSHA", sha, "1", "{bench}:k"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.findall(r"([\d.]+) requests per second", out)
    calls, usec = scripts_run(server)
    return float(found[-1]), usec / max(calls, 1)


def sync_round(server: RedisServer, seconds: float) -> tuple[float, float, float, float]:
    """One sync round of the 6-rule path: (µs per admit+bill with the guard's flush at the end
    counted, scripts per call, server µs per script, round trips per call: the scripts, with
    the settles sent in one pipeline counted once per pipeline)."""
    store = ug.RedisStore(server.url, "bench6")
    guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), store=store)

    def once() -> None:
        ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
        ticket.bill(1100, 800)

    for _ in range(50):
        once()
    guard.close()
    server.cli("CONFIG", "RESETSTAT")
    steps, carried = guard.stats()["settle_steps"], guard.stats()["settles_carried"]
    n = 0
    started = time.perf_counter()
    stop = started + seconds
    while time.perf_counter() < stop:
        once()
        n += 1
    guard.close()
    elapsed = time.perf_counter() - started
    calls, usec = scripts_run(server)
    stats = guard.stats()
    pipelines = stats["settle_steps"] - steps
    # Settles sent in pipelines are one round trip per pipeline; the others rode with a
    # reservation (one script for both).
    alone = n - (stats["settles_carried"] - carried)
    return elapsed / n * 1e6, calls / n, usec / max(calls, 1), (calls - alone + pipelines) / n


def limits_sync_round(server: RedisServer, seconds: float) -> float:
    """µs per `limits` sliding-window-counter hit (redis-py storage)."""
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import SlidingWindowCounterRateLimiter

    limiter = SlidingWindowCounterRateLimiter(storage_from_string(server.url))
    item = parse(LIMIT)
    for _ in range(50):
        limiter.hit(item, "alice")
    n = 0
    started = time.perf_counter()
    stop = started + seconds
    while time.perf_counter() < stop:
        limiter.hit(item, "alice")
        n += 1
    return (time.perf_counter() - started) / n * 1e6


def sync_pair(server: RedisServer, seconds: float, rounds: int) -> dict[str, float]:
    """Best of `rounds` alternating rounds: usage_guard µs/call, scripts/call, server µs per
    script (from the fastest round), and `limits` µs per hit."""
    best: tuple[float, float, float, float] = (float("inf"), 0.0, 0.0, 0.0)
    theirs = float("inf")
    for _ in range(rounds):
        best = min(best, sync_round(server, seconds))
        theirs = min(theirs, limits_sync_round(server, seconds))
    return {
        "us": best[0],
        "scripts": best[1],
        "script_us": best[2],
        "trips": best[3],
        "limits_us": theirs,
    }


def spread_pair(server: RedisServer, calls: int = 1000) -> dict[str, float]:
    """Redis µs per sync admit + bill (6 rules) for calls 5 s apart on a manual clock, as
    real calls spread over minutes, and for the same calls back to back (a clock that does
    not move): the median of 5 rounds each way, alternating (`benches/spread_time.py`, the
    second half of `calls` counted). Every other Redis row calls back to back, which hides
    what spread calls pay (a holds field per minute, values the guard knows growing old)."""
    from spread_time import round_usec

    ways = {"apart": 5.0, "back to back": 0.0}
    rounds: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(5):
        for name, seconds in ways.items():
            rounds[name].append(round_usec(server.url, f"spread-{name}-{r}", seconds, calls)[0])
    return {name: sorted(each)[2] for name, each in rounds.items()}


def redis_cpu(server: RedisServer) -> float:
    """CPU seconds the redis-server's main thread has used (user + system)."""
    found = dict(re.findall(r"(used_cpu_\w+):([\d.]+)", server.cli("INFO", "cpu")))
    return float(found["used_cpu_user_main_thread"]) + float(found["used_cpu_sys_main_thread"])


def cpu_split(server: RedisServer, callers: int, seconds: float) -> dict[str, float]:
    """Where the CPU of an asyncio call goes, at `callers` tasks: this process's CPU (Python
    and the guard's threads) and the redis-server main thread's, in µs per call, for
    usage_guard and for `limits.aio` in turn. When the two add up to the cores there are,
    the rate cannot grow: the split says which side has to shrink."""
    guard = ug.Guard(ug.Policy.from_dict(POLICY), store=ug.RedisStore(server.url, "split"))
    runs = {
        "usage_guard": lambda: run_level(guard, callers, seconds),
        "limits.aio": lambda: limits_aio_level(server.url, callers, seconds),
    }
    asyncio.run(run_level(guard, callers, 0.2))
    out = {}
    for name, run in runs.items():
        client, redis_side, started = time.process_time(), redis_cpu(server), time.perf_counter()
        rate = asyncio.run(run())
        calls = rate * (time.perf_counter() - started)
        out[f"{name} client"] = (time.process_time() - client) / calls * 1e6
        out[f"{name} redis"] = (redis_cpu(server) - redis_side) / calls * 1e6
    guard.close()
    return out


def functions_pair(server: RedisServer, seconds: float, rounds: int) -> list[dict[str, float]]:
    """64 asyncio callers with the scripts as functions (`FCALL`, the default) and by SHA
    (`functions=False`), alternating, `rounds` times: per round and way, calls/s and the
    redis-server main thread's CPU per call."""
    guards = {
        way: ug.Guard(
            ug.Policy.from_dict(POLICY),
            store=ug.RedisStore(server.url, f"ways-{way}", functions=way == "function"),
        )
        for way in ("function", "by SHA")
    }
    for guard in guards.values():
        asyncio.run(run_level(guard, 64, 0.2))
    out = []
    for _ in range(rounds):
        row = {}
        for way, guard in guards.items():
            redis_side, started = redis_cpu(server), time.perf_counter()
            rate = asyncio.run(run_level(guard, 64, seconds))
            calls = rate * (time.perf_counter() - started)
            row[f"{way} calls/s"] = rate
            row[f"{way} redis µs"] = (redis_cpu(server) - redis_side) / calls * 1e6
        out.append(row)
    for guard in guards.values():
        guard.close()
    return out


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    server = RedisServer()
    try:
        ceiling, ceiling_us = evalsha_ceiling(server)
        print(
            f"redis-benchmark EVALSHA (50 clients): {ceiling:,.0f} scripts/s, {ceiling_us:.1f} µs"
        )
        print("callers  usage_guard calls/s  limits.aio calls/s  share of EVALSHA ceiling")
        ours64 = 0.0
        for callers in (1, 8, 64):
            ours, theirs = asyncio_pair(server, callers, seconds, 1)
            ours64 = ours
            print(f"{callers:>7}  {ours:>19,.0f}  {theirs:>18,.0f}  {ours / ceiling:.1%}")
        split = cpu_split(server, 64, seconds)
        for peer in ("usage_guard", "limits.aio"):
            print(
                f"{peer}, 64 callers, CPU per call: this process {split[peer + ' client']:.0f} "
                f"µs, redis-server {split[peer + ' redis']:.0f} µs"
            )
        for row in functions_pair(server, seconds, 2):
            print(
                "64 callers, as functions / by SHA: "
                f"{row['function calls/s']:,.0f} / {row['by SHA calls/s']:,.0f} calls/s, "
                f"redis-server {row['function redis µs']:.0f} / {row['by SHA redis µs']:.0f} "
                "µs per call"
            )
        sync = sync_pair(server, seconds, 1)
        print(
            f"sync, 6 rules: {sync['us']:.0f} µs per admit+bill, {sync['scripts']:.2f} scripts "
            f"per call, {sync['script_us']:.1f} µs server time per script; "
            f"limits sliding-window hit {sync['limits_us']:.0f} µs"
        )
        spread = spread_pair(server)
        print(
            f"sync, 6 rules, Redis µs per admit+bill: {spread['apart']:.1f} for calls 5 s apart, "
            f"{spread['back to back']:.1f} back to back"
        )
        # issue 34's goals for the carried script, beside the peers they are measured against
        print(
            f"goals: {sync['script_us']:.1f} µs of Redis time per carried admission (≤ 40); "
            f"sync admit + bill {sync['us'] / sync['limits_us']:.2f}× a limits hit (≤ 1.0); "
            f"64 asyncio callers {ours64 / ceiling:.1%} of the EVALSHA ceiling (≥ 25 %)"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
