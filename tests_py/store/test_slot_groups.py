"""Slot groups from Python (docs/redis.md, "Slot groups"): 4 guard processes x 16 asyncio
tasks on small budgets spread over a 3-master cluster, every admission reserving in two
groups (the person's and the model's)."""

from __future__ import annotations

import multiprocessing
import subprocess

import usage_guard as ug
from redis_harness import (
    GROUP_MODEL_BUDGET,
    GROUP_PERSON_BUDGET,
    GROUP_USERS,
    GROUPS_POLICY,
    RedisCluster,
    groups_worker,
)


def scan(port: int, pattern: str) -> list[str]:
    """The keys of the node at `port` that match `pattern`."""
    command = ["redis-cli", "-p", str(port), "--scan", "--pattern", pattern]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()


def test_processes_on_slot_groups_never_bill_past_a_budget() -> None:
    cluster = RedisCluster()
    try:
        prefix = "spread"
        ctx = multiprocessing.get_context("spawn")
        with ctx.Manager() as manager, ctx.Pool(4) as pool:
            start = manager.Barrier(4)
            args = [(cluster.urls, prefix, 16, 12, seed, start) for seed in range(4)]
            results = pool.starmap(groups_worker, args)
        store = ug.RedisStore.cluster(cluster.urls, prefix, slot_groups=True)
        watcher = ug.Guard(ug.Policy.from_dict(GROUPS_POLICY), store=store)
        assert all(r["bill_none"] == 0 for r in results)
        assert sum(r["refused"] for r in results) > 0, "a budget ran out during the run"
        total = 0
        for user in GROUP_USERS:
            reported = sum(r["reported"][user] for r in results)
            person = watcher.usage(user, "gpt-5")["rules"][0]
            assert person["used"] == reported, user
            assert person["reserved"] == 0, user
            assert reported <= GROUP_PERSON_BUDGET, user
            total += reported
        # The Model Total, read in its own group: every reported token once, no hold left.
        model_used, model_held, holding = 0, 0, set()
        for node in cluster.nodes:
            for key in scan(node.port, "{spread:2:m:gpt-5}:c:*"):
                model_used += int(node.cli("HGET", key, "u") or 0)
            for key in scan(node.port, "{spread:2:m:gpt-5}:h:*"):
                fields = node.cli("HGETALL", key).split()
                model_held += sum(int(v) for f, v in zip(fields[::2], fields[1::2]) if f != "k")
            if scan(node.port, "{spread:2:u:*"):
                holding.add(node.port)
        assert model_used == total
        assert model_held == 0
        assert total <= GROUP_MODEL_BUDGET
        # The people's counters are on more than one master (the shared layout: one).
        assert len(holding) >= 2, holding
    finally:
        cluster.stop()
