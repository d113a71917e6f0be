"""How one store's load spreads over a Redis Cluster's masters: the share of scripts and of
Redis time on each master, scripts per admission and Redis µs per admission, for N users
each calling admit + bill (a person's rule and a Model Total), on a local 3-master cluster in
the shared layout and with slot groups (`slot_groups=True`; once more with the person's rule
alone, where no group is hot; once more with the Model Total leased, `lease_above=20`), and on
one server for comparison.

Run: .venv/bin/python benches/cluster_scale.py [--users N] [--calls K]

It starts its own redis-server processes on free ports (tests_py/redis_harness.py) and stops
them by pid. Figures come from each node's INFO commandstats, reset before the run; the µs
there move with the machine's load, the counts and shares do not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import usage_guard as ug  # noqa: E402
from redis_bench import SCRIPT_COMMANDS, commandstats  # noqa: E402
from redis_harness import RedisCluster, RedisServer  # noqa: E402

HUGE = 9_000_000_000_000
POLICY = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 4000}},
    "limits": {
        "public": [
            {
                "model": "gpt-5",
                "each_person": [{"metric": "tokens", "amount": HUGE, "window": "day"}],
            }
        ],
        "model_total": [
            {"model": "gpt-5", "rules": [{"metric": "tokens", "amount": HUGE, "window": "day"}]}
        ],
    },
}


PERSON_ONLY = {
    "models": POLICY["models"],
    "limits": {"public": POLICY["limits"]["public"]},
}


def run(
    store: ug.RedisStore,
    nodes: list[RedisServer],
    users: int,
    calls: int,
    policy: dict = POLICY,
) -> list[str]:
    """admit + bill (waited for) `calls` times for each of `users` users; one line per node."""
    guard = ug.Guard(ug.Policy.from_dict(policy), store=store)
    guard.admit("warm-up", "gpt-5", prompt_tokens=10, max_tokens=10).bill(10, 10, wait=True)
    for node in nodes:
        node.cli("CONFIG", "RESETSTAT")
    started = time.perf_counter()
    for _ in range(calls):
        for u in range(users):
            ticket = guard.admit(f"user-{u}", "gpt-5", prompt_tokens=100, max_tokens=200)
            ticket.bill(100, 50, wait=True)
    seconds = time.perf_counter() - started
    guard.close()
    admissions = users * calls
    per_node = []
    for node in nodes:
        stats = commandstats(node)
        scripts = sum(stats.get(c, (0, 0.0))[0] for c in SCRIPT_COMMANDS)
        busy = sum(usec for _, usec in stats.values())
        per_node.append((node.port, scripts, busy))
    total_scripts = sum(s for _, s, _ in per_node) or 1
    total_usec = sum(u for _, _, u in per_node) or 1.0
    lines = [
        f"  {admissions} admissions in {seconds:.2f} s: "
        f"{total_scripts / admissions:.2f} scripts and {total_usec / admissions:.1f} µs of "
        "Redis time per admission + bill"
    ]
    for port, scripts, busy in per_node:
        lines.append(
            f"    master :{port}: {scripts:>6} scripts ({100 * scripts / total_scripts:5.1f} %), "
            f"{busy / 1000:8.1f} ms ({100 * busy / total_usec:5.1f} % of Redis time)"
        )
    return lines


def model_group(nodes: list[RedisServer], prefix: str, admissions: int) -> str:
    """What the leases cost the Model Total's master: scripts on the model's group (three per
    lease: read, reserve, the old one's settle; one per flush), against the admissions."""
    tag = "{" + prefix + ":2:m:gpt-5}"
    for node in nodes:
        records = node.cli("--scan", "--pattern", f"{tag}:t:lease-*").split()
        if records:
            flushes = sum("%2Ff" in r for r in records)
            leases = len(records) - flushes
            scripts = 3 * leases + flushes
            share = admissions / max(scripts, 1)
            return (
                f"    the model's group on :{node.port}: {leases} leases, {flushes} flushes: "
                f"{scripts} scripts for {admissions} admissions (1/{share:.0f})"
            )
    return "    no lease was taken"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    shape = "a person's rule and a Model Total"
    print(f"{args.users} users × {args.calls} calls of admit + bill ({shape})")
    cluster = RedisCluster()
    try:
        store = ug.RedisStore.cluster(cluster.urls, prefix="scale")
        print("3-master cluster, shared layout:")
        print("\n".join(run(store, cluster.nodes, args.users, args.calls)))
        store = ug.RedisStore.cluster(cluster.urls, prefix="scale", slot_groups=True)
        print("3-master cluster, slot groups:")
        print("\n".join(run(store, cluster.nodes, args.users, args.calls)))
        print("3-master cluster, slot groups, the person's rule alone (no Model Total):")
        print("\n".join(run(store, cluster.nodes, args.users, args.calls, PERSON_ONLY)))
        prefix = "leased"
        store = ug.RedisStore.cluster(cluster.urls, prefix, slot_groups=True, lease_above=20)
        print("3-master cluster, slot groups, the Model Total leased (lease_above=20):")
        print("\n".join(run(store, cluster.nodes, args.users, args.calls)))
        print(model_group(cluster.nodes, prefix, args.users * args.calls))
    finally:
        cluster.stop()
    single = RedisServer()
    try:
        print("1 server:")
        store = ug.RedisStore(single.url, prefix="scale")
        print("\n".join(run(store, [single], args.users, args.calls)))
    finally:
        single.stop()


if __name__ == "__main__":
    main()
