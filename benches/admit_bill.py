"""admit + bill from Python on the in-memory store, next to the `limits` library.

Run: .venv/bin/python benches/admit_bill.py   (installs `limits` for the comparison only)

Our path has 6 rules (tokens, requests, cost over day/10 min/week/hour/month windows); every
admit reserves on 5 counters at once, all or none, and every bill settles them. `limits` is
shown doing what it can do: `hit` on 6 independent rate-limit items (moving window, memory
storage) — check-then-increment per item, no reservation, no cost, no calendar windows.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import usage_guard as ug

SIX_RULES = """
[models.gpt-5]
display_name = "GPT-5"
max_output_tokens = 128000
prices = { input = 1.25, cached_input = 0.125, output = 10.0 }

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [
  { metric = "tokens", amount = 9000000000000, window = "day" },
  { metric = "requests", amount = 9000000000000, window = "10 minutes" },
]

[[limits.model_total]]
model = "gpt-5"
rules = [{ metric = "tokens", amount = 9000000000000, window = "day" }]

[[limits.user_total]]
user = "alice"
rules = [{ metric = "cost", amount = 9000000.0, window = "week" }]

[limits.platform]
rules = [
  { metric = "requests", amount = 9000000000000, window = "hour" },
  { metric = "tokens", amount = 9000000000000, window = "month" },
]
"""

N = 50_000


def twenty_rules() -> str:
    """SIX_RULES plus 20 generic rules: 5 fanning by 2 attributes (credential × agent), 5 on
    every call in prod, and 10 for other models (defined, never matching gpt-5: resolving
    reads only the rules indexed under the call's model or under no model)."""
    out = [SIX_RULES]
    huge = 9000000000000
    for i in range(5):
        out.append(
            f"""
[[rules]]
name = "fan {i}"
count_by = ["credential", "agent"]
amount = "{("requests", "tokens")[i % 2]}"
budget = {huge}
window = "{("minute", "hour", "day", "10 minutes", "month")[i]}"
"""
        )
    for i in range(5):
        out.append(
            f"""
[[rules]]
name = "prod {i}"
applies_when = {{ environment = "prod", model = "gpt-5" }}
amount = "tokens"
budget = {huge}
window = {{ kind = "calendar", count = {i + 1}, unit = "day", anchor_zone = "Europe/Paris" }}
warn_at = [0.8]
"""
        )
    for i in range(10):
        out.append(
            f"""
[[rules]]
name = "other model {i}"
applies_when = {{ model = "other-{i}" }}
amount = "requests"
budget = 1
window = "minute"
"""
        )
    return "".join(out)


TWENTY_RULES = twenty_rules()
ATTRIBUTES = {"credential": "key-1", "agent": "planner", "environment": "prod"}


def per_op_us(fn, n: int = N) -> float:
    for _ in range(1000):
        fn()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def bench_usage_guard(n: int = N) -> float:
    guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), clock=ug.ManualClock("2026-11-30T14:20:00Z"))

    def once() -> None:
        ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
        ticket.bill(1100, 800)

    return per_op_us(once, n)


def bench_generic_rules(store: object = None, n: int = N) -> float:
    """admit + bill on the 6-rule path plus 20 generic rules (10 of them match the call: 5
    fanning by credential × agent, 5 zoned calendar rules), with attributes."""
    policy = ug.Policy.from_toml(TWENTY_RULES)
    guard = ug.Guard(policy, store=store, clock=ug.ManualClock("2026-11-30T14:20:00Z"))

    def once() -> None:
        ticket = guard.admit(
            "alice", "gpt-5", prompt_tokens=1200, max_tokens=4000, attributes=ATTRIBUTES
        )
        ticket.bill(1100, 800)

    return per_op_us(once, n)


def bench_usage_guard_async(n: int = N) -> float:
    """`admit_async` + `bill_async` awaited in one task, same guard shape as the sync pair."""
    guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), clock=ug.ManualClock("2026-11-30T14:20:00Z"))

    async def run(n: int) -> float:
        for _ in range(1000):
            ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
            await ticket.bill_async(1100, 800)
        start = time.perf_counter()
        for _ in range(n):
            ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
            await ticket.bill_async(1100, 800)
        return (time.perf_counter() - start) / n * 1e6

    return asyncio.run(run(n))


def bench_limits(n: int = N // 5) -> float | None:
    try:
        import limits  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "limits"], check=False)
    try:
        from limits import parse
        from limits.storage import MemoryStorage
        from limits.strategies import MovingWindowRateLimiter
    except ImportError:
        return None
    limiter = MovingWindowRateLimiter(MemoryStorage())
    items = [
        parse(text)
        for text in (
            "1000000000/day",
            "1000000000/10 minutes",
            "1000000000/day",
            "1000000000/7 days",
            "1000000000/hour",
            "1000000000/month",
        )
    ]

    def once() -> None:
        for i, item in enumerate(items):
            limiter.hit(item, "alice", str(i))

    return per_op_us(once, n)


def main() -> None:
    ours = bench_usage_guard()
    ours_async = bench_usage_guard_async()
    theirs = bench_limits()
    generic = bench_generic_rules()
    print(f"usage_guard admit+bill, 6 rules, memory store: {ours:8.2f} µs per call")
    print(
        f"the same + 20 generic rules (10 match), memory: {generic:8.2f} µs per call"
        f" ({generic / ours:.2f}x the 6-rule path)"
    )
    print(
        f"usage_guard admit_async+bill_async, same:       {ours_async:8.2f} µs per call"
        f" ({ours_async / ours:.2f}x the sync pair; goal <= 2x)"
    )
    if theirs is None:
        print("limits (not installed): skipped")
    else:
        print(f"limits MovingWindow hit x6, memory storage:    {theirs:8.2f} µs per call")
        print(f"ratio: usage_guard is {theirs / ours:.1f}x the speed of limits")


if __name__ == "__main__":
    main()
