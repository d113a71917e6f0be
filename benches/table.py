"""Every figure of issue 12 beside its peer measured in the same run, with the ratio and
whether the goal is met, printed as one Markdown table (what `make bench` ends with).

Run: .venv/bin/python benches/table.py [--seconds 1.5] [--rounds 2] [--mb 2] [--turns 200]
     [--criterion target/criterion]
Needs `limits`, `tiktoken` and `redis` (redis-py) in the environment, redis-server and
redis-benchmark on PATH (without them the Redis rows are left out, and the table says so).

Pairs are measured alternately (ours, peer, ours, peer, ...) and each side keeps its best
round, so a burst of load from elsewhere on the machine hurts both sides alike. The Redis
figures share one redis-server, started here on a free port and stopped by pid.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import admit_bill  # noqa: E402
import count_tokens  # noqa: E402
import usage_guard as ug  # noqa: E402


@dataclass
class Row:
    what: str
    ours: str
    peer: str
    ratio: str
    goal: str = "—"
    met: Optional[bool] = None


def progress(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


def criterion_rows(directory: str) -> list[Row]:
    """The Rust criterion figure `cargo bench --bench admit_bill` left in `directory`."""
    found = sorted(glob.glob(os.path.join(directory, "*", "new", "estimates.json")))
    rows = []
    for path in found:
        with open(path) as f:
            estimates = json.load(f)
        ns = (estimates.get("slope") or estimates["mean"])["point_estimate"]
        name = os.path.basename(os.path.dirname(os.path.dirname(path)))
        rows.append(Row(f"Rust (criterion): {name}", f"{ns / 1000:.2f} µs", "—", "—"))
    return rows


def memory_rows(rounds: int) -> list[Row]:
    progress("memory store: admit+bill sync and async, limits")
    sync = asyn = theirs = float("inf")
    for _ in range(rounds):
        sync = min(sync, admit_bill.bench_usage_guard(20_000))
        asyn = min(asyn, admit_bill.bench_usage_guard_async(20_000))
        hit = admit_bill.bench_limits(5_000)
        theirs = min(theirs, hit if hit is not None else float("nan"))
    return [
        Row(
            "memory, admit+bill, 6 rules, sync",
            f"{sync:.1f} µs",
            f"`limits` moving-window hit ×6, memory storage: {theirs:.1f} µs",
            f"{theirs / sync:.1f}× faster",
        ),
        Row(
            "memory, `admit_async` + `bill_async`, 6 rules",
            f"{asyn:.1f} µs",
            f"the same calls sync: {sync:.1f} µs",
            f"{asyn / sync:.2f}× the sync pair",
            "≤ 2×",
            asyn <= 2 * sync,
        ),
    ]


def redis_rows(seconds: float, rounds: int) -> list[Row]:
    import redis_bench
    from redis_harness import RedisServer

    server = RedisServer()
    try:
        progress("Redis: redis-benchmark EVALSHA ceiling")
        ceiling, ceiling_us = redis_bench.evalsha_ceiling(server)
        progress("Redis asyncio: 1 caller, usage_guard and limits.aio")
        one = redis_bench.asyncio_pair(server, 1, seconds, rounds)
        progress("Redis asyncio: 64 callers, usage_guard and limits.aio")
        many = redis_bench.asyncio_pair(server, 64, seconds, rounds)
        progress("Redis sync: 6 rules, usage_guard and limits")
        sync = redis_bench.sync_pair(server, seconds, rounds)
        progress("Redis sync: 6 rules, calls 5 s apart and back to back (a manual clock)")
        spread = redis_bench.spread_pair(server)
    finally:
        server.stop()
    aio = "`limits.aio` sliding-window hit, redis-py asyncio"
    return [
        Row(
            "Redis asyncio, 1 caller, 3 rules",
            f"{one[0]:,.0f} calls/s",
            f"{aio}: {one[1]:,.0f} calls/s",
            f"{one[0] / one[1]:.2f}×",
        ),
        Row(
            "Redis asyncio, 64 callers, 3 rules",
            f"{many[0]:,.0f} calls/s",
            f"{aio}, 64 callers: {many[1]:,.0f} calls/s",
            f"{many[0] / many[1]:.2f}×",
            "≥ 3×",
            many[0] >= 3 * many[1],
        ),
        Row(
            "Redis asyncio, 64 callers, share of the ceiling",
            f"{many[0]:,.0f} calls/s",
            f"`redis-benchmark` EVALSHA ceiling, 50 clients: {ceiling:,.0f} scripts/s",
            f"{many[0] / ceiling * 100:.1f} %",
            "≥ 25 %",
            many[0] >= 0.25 * ceiling,
        ),
        Row(
            "Redis sync, 1 caller, 6 rules, admit+bill",
            f"{sync['us']:.0f} µs",
            f"`limits` sliding-window hit, redis-py: {sync['limits_us']:.0f} µs",
            f"{sync['us'] / sync['limits_us']:.2f}×",
            "≤ 1.0×",
            sync["us"] <= sync["limits_us"],
        ),
        Row(
            "Redis sync, round trips per call (scripts in commandstats)",
            f"{sync['scripts']:.2f}",
            "—",
            "—",
            "≤ 1.2",
            sync["scripts"] <= 1.2,
        ),
        Row(
            "Redis sync, round trips per call (a pipeline of settles counted once)",
            f"{sync['trips']:.2f}",
            "—",
            "—",
        ),
        Row(
            "Redis sync, 6 rules, calls 5 s apart: Redis time per admit+bill",
            f"{spread['apart']:.1f} µs",
            f"the same calls back to back: {spread['back to back']:.1f} µs",
            f"{spread['apart'] / spread['back to back']:.2f}×",
        ),
        Row(
            "Redis sync, server time per script",
            f"{sync['script_us']:.1f} µs",
            f"the ceiling's one-HINCRBY script: {ceiling_us:.1f} µs",
            f"{sync['script_us'] / ceiling_us:.1f}×",
            "≤ 25 µs",
            sync["script_us"] <= 25,
        ),
    ]


def counting_rows(megabytes: float, rounds: int) -> list[Row]:
    import tiktoken

    rows = []
    corpora = (
        ("prose", count_tokens.prose_corpus),
        ("code", count_tokens.code_corpus),
        ("CJK and emoji", count_tokens.cjk_corpus),
    )
    for encoding, short in (("o200k_base", "o200k"), ("cl100k_base", "cl100k")):
        for kind, make in corpora:
            progress(f"prompt counting, {encoding}, {kind}: usage_guard and tiktoken")
            ours, theirs, same = count_tokens.throughput_pair(make(megabytes), encoding, rounds)
            rows.append(
                Row(
                    f"prompt count, {short}, {kind} ({megabytes:g} MB, ~10 kB documents)",
                    f"{ours:.1f} MB/s",
                    f"tiktoken {tiktoken.__version__}: {theirs:.1f} MB/s",
                    f"{ours / theirs:.2f}×, " + ("counts identical" if same else "COUNTS DIFFER"),
                    "≥ 2×, counts identical",
                    ours >= 2 * theirs and same,
                )
            )
    return rows


def chat_rows(turns: int, rounds: int) -> list[Row]:
    """The growing chat, each side's best of `rounds` (a single 40 ms run of the cached side
    moved by 1.7x with the machine's load)."""
    progress(f"growing chat, {turns} turns: cached, uncached, tiktoken, best of {rounds}")
    docs = count_tokens.corpus(0.5)
    runs = [count_tokens.growing_chat_times(docs, turns) for _ in range(rounds)]
    cached, uncached, tk = (
        min(r[label] for r in runs) for label in ("cached", "uncached", "tiktoken")
    )
    what = f"growing chat, {turns} turns of ~3 kB, whole chat recounted each turn"
    return [
        Row(
            what,
            f"{cached:.3f} s",
            f"the same without a cache applying (every message new text each turn): "
            f"{uncached:.2f} s",
            f"1/{uncached / cached:.0f}",
            "≤ 1/20",
            cached * 20 <= uncached,
        ),
        Row(
            what,
            f"{cached:.3f} s",
            f"tiktoken encoding every message each turn: {tk:.2f} s",
            f"{tk / cached:.0f}× faster",
        ),
    ]


def describe() -> str:
    def out(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    import limits
    import tiktoken

    commit = out("git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "HEAD")
    redis = (
        out("redis-server", "--version").split(" sha=")[0]
        if shutil.which("redis-server")
        else "none"
    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"usage_guard {ug.__version__} ({commit[:7] or 'no git'}), "
        f"Python {platform.python_version()}, "
        f"limits {limits.__version__}, tiktoken {tiktoken.__version__}, {redis}; "
        f"{os.cpu_count()} cores, load average {load}"
    )


def print_table(rows: list[Row]) -> None:
    header = ("what", "usage_guard", "peer (same run)", "ratio", "goal", "met")
    cells = [
        (r.what, r.ours, r.peer, r.ratio, r.goal, {True: "yes", False: "**no**", None: "—"}[r.met])
        for r in rows
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for c in cells:
        print("| " + " | ".join(c) + " |")
    goals = [r.met for r in rows if r.met is not None]
    print(f"\nGoals met: {sum(goals)} of {len(goals)}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5, help="per Redis round and side")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per pair")
    ap.add_argument("--mb", type=float, default=2.0, help="size of each counting corpus")
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--criterion", default=None, help="criterion's output directory")
    ap.add_argument("--counting-only", action="store_true", help="only the prompt-counting rows")
    args = ap.parse_args()
    count_tokens.seed_tiktoken_cache()
    rows: list[Row] = []
    if args.counting_only:
        print_table(counting_rows(args.mb, args.rounds + 1))
        return
    if args.criterion:
        rows += criterion_rows(args.criterion)
    rows += memory_rows(args.rounds + 1)
    missing = [t for t in ("redis-server", "redis-benchmark") if shutil.which(t) is None]
    if missing:
        print(f"{' and '.join(missing)} not on PATH: the Redis rows are left out", file=sys.stderr)
    else:
        rows += redis_rows(args.seconds, args.rounds)
    rows += counting_rows(args.mb, args.rounds + 1)
    rows += chat_rows(args.turns, max(3, args.rounds))
    print()
    print(describe())
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
