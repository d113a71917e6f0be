"""Slot groups from Python (docs/redis.md, "Slot groups"): 4 guard processes x 16 asyncio
tasks on small budgets spread over a 3-master cluster, every admission reserving in two
groups (the person's and the model's); a master killed with its replica promoted fences its
groups, and the ledger refills them."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import pytest
import usage_guard as ug
from redis_harness import (
    GROUP_MODEL_BUDGET,
    GROUP_PERSON_BUDGET,
    GROUP_USERS,
    GROUPS_POLICY,
    RedisCluster,
    RedisServer,
    groups_worker,
)
from test_epoch_fence import HOLD_AGAIN_SECONDS


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


# 1 token = $0.001 in and out: a call of 50 + 50 tokens costs $0.10; each person's day $1.00
# (a fenced cost rule, refilled from the ledger after a loss).
COST_POLICY = {
    "models": {"m": {"provider": "openai", "prices": {"input": 1000.0, "output": 1000.0}}},
    "limits": {
        "public": [
            {"model": "m", "each_person": [{"metric": "cost", "amount": 1.0, "window": "day"}]}
        ]
    },
}


def admitted(guard: ug.Guard, user: str) -> ug.Ticket:
    """The next call of `user`, once the store answers (a failover may refuse a few as
    unavailable while the client finds the new master)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return guard.admit(user, "m", prompt_tokens=50, max_tokens=50)
        except ug.UsageLimitsUnavailable as e:
            if e.reason != "USAGE_LIMITS_UNAVAILABLE":
                raise
            if time.monotonic() > deadline:
                raise AssertionError(f"{user}: still {e.reason}") from e
            time.sleep(0.05)


def recovered_then_spent(guard: ug.Guard, clock: ug.ManualClock, user: str, epochs: int) -> int:
    """`user`'s next call makes the guard recover (its `epochs`-th epoch written); after the
    hold-again wait, how many more calls are admitted (each billed in full) before the day's
    limit refuses."""
    with pytest.raises(ug.UsageLimitsUnavailable) as refused:
        admitted(guard, user)
    assert refused.value.reason == "USAGE_LIMITS_RECOVERING"
    assert guard.stats()["epochs_written"] == epochs
    clock.advance(HOLD_AGAIN_SECONDS + 1)
    calls = 0
    while True:
        try:
            ticket = admitted(guard, user)
        except ug.UsageLimitError as e:
            assert e.reason == "USAGE_LIMIT_REACHED"
            return calls
        ticket.bill(50, 50, wait=True)
        calls += 1


def test_a_failed_over_master_fences_its_groups_and_the_ledger_refills_them(
    clock: ug.ManualClock, tmp_path: Path
) -> None:
    """A master killed with its replica promoted: the calls of people whose groups lived on
    other masters go on at once; the first call of a person on the lost master makes the
    guard recover (the group's copy of the epoch was written by the dead process), and after
    the hold-again wait that person's day is refilled from the ledger: never overspent. Then
    a second master is lost before its groups joined the recovery's epoch: the same again."""
    cluster = RedisCluster(replicas=1)
    try:
        store = ug.RedisStore.cluster(cluster.urls, "fo", slot_groups=True)
        ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
        policy = ug.Policy.from_dict(COST_POLICY)
        guard = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
        users = [f"p{i}" for i in range(24)]
        for user in users:
            for _ in range(3):
                guard.admit(user, "m", prompt_tokens=50, max_tokens=50).bill(50, 50, wait=True)
        ledger.flush()
        on: dict[int, list[str]] = {}
        home = ""
        for master in cluster.masters():
            if scan(master.port, "{fo:2}:epoch"):
                home = str(master.port)
            for user in users:
                if scan(master.port, "{fo:2:u:" + user + "}:c:*"):
                    on.setdefault(master.port, []).append(user)
        # The master to kill holds people's groups but not the store's own group (whose loss
        # is the store's epoch's: every group would wait for the recovery).
        lost_port = next(p for p in on if str(p) != home)
        lost = on[lost_port][0]
        kept = next(u for p, us in on.items() if p != lost_port for u in us)
        next(n for n in cluster.nodes if n.port == lost_port).kill()
        cluster.wait_ok()
        # A person on another master: admitted at once, no recovery yet.
        admitted(guard, kept).bill(50, 50, wait=True)
        assert guard.stats()["epochs_written"] == 1  # the first start's only
        # The person on the lost master: the guard recovers; fenced calls wait out the
        # hold-again time, then the day is refilled from the ledger (0.30 used).
        # 3 calls before the loss + 7 = the day's 10
        assert recovered_then_spent(guard, clock, lost, epochs=2) == 7
        # A second master lost after that recovery, before its people's groups joined the new
        # epoch: the recovery marked them held, so the copy of the dead process is a loss
        # under it too (before the marks such a group was joined as new and its counters
        # trusted as the replica had them).
        third_port = next(p for p in on if p != lost_port and str(p) != home)
        third = next(u for u in on[third_port] if u != kept)
        next(n for n in cluster.nodes if n.port == third_port).kill()
        cluster.wait_ok()
        assert recovered_then_spent(guard, clock, third, epochs=3) == 7
        guard.close()
        rows = {g["user"]: g["cost_micros"] for g in ledger.query(group_by=["user"])}
        assert rows[lost] == 1_000_000
        assert rows[third] == 1_000_000
        assert rows[kept] == 400_000
    finally:
        cluster.stop()


def test_the_migrate_command_moves_a_shared_stores_day_into_slot_groups(
    redis_server: RedisServer,
) -> None:
    """`usage-guard migrate`: what a guard of the shared layout counted is what a guard with
    slot groups finds after it; a second run changes nothing; a store without slot groups
    cannot migrate."""
    policy = ug.Policy.from_dict(GROUPS_POLICY)
    old = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "mv"))
    for user in GROUP_USERS[:3]:
        old.admit(user, "gpt-5", prompt_tokens=100, max_tokens=100).bill(100, 50, wait=True)
    open_call = old.admit(GROUP_USERS[0], "gpt-5", prompt_tokens=100, max_tokens=100)
    before = {u: old.usage(u, "gpt-5")["rules"][0] for u in GROUP_USERS[:3]}
    assert before[GROUP_USERS[0]]["reserved"] > 0
    command = [sys.executable, "-m", "usage_guard.cli", "migrate", "--redis", redis_server.url]
    command += ["--prefix", "mv"]
    for run in range(2):
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        # Read: 3 people's buckets and the Model Total's, their 4 holds keys (the others'
        # holds given back to 0 until their minute is over). Copied: the 4 buckets and the open
        # call's 2 holds keys (its person's and the Model Total's); nothing the second time.
        copied = "4 counters, 2 holds keys" if run == 0 else "0 counters, 0 holds keys"
        assert done.stdout.strip() == f"migrated: {copied} copied (8 keys read)"
        assert done.stderr == ""
        new = ug.Guard(policy, store=ug.RedisStore(redis_server.url, "mv", slot_groups=True))
        for user, rule in before.items():
            assert new.usage(user, "gpt-5")["rules"][0] == rule, user
    open_call.release()
    with pytest.raises(ValueError, match="slot_groups"):
        ug.RedisStore(redis_server.url, "mv").migrate_from_shared()
    # A prefix with nothing under it is said, not silently "migrated".
    empty = command[:-1] + ["no-such-prefix"]
    done = subprocess.run(empty, capture_output=True, text=True, check=True)
    assert "nothing found under {no-such-prefix}" in done.stderr, done.stderr
    # A URL that does not parse is a usage error with the reason, not a traceback.
    bad = [sys.executable, "-m", "usage_guard.cli", "migrate", "--redis", "notaurl"]
    done = subprocess.run(bad, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("usage-guard migrate: "), done.stderr


def test_serve_and_dashboard_take_slot_groups() -> None:
    from usage_guard.cli import build_parser
    from usage_guard.cli.common import store_from_url

    for command in ("serve", "dashboard"):
        argv = [command, "--policy", "p.toml", "--store", "redis://127.0.0.1:1/0"]
        argv += ["--ledger", "l.db", "--slot-groups"]
        args = build_parser().parse_args(argv)
        store = store_from_url(args.store, args.prefix, args.slot_groups)
        assert isinstance(store, ug.RedisStore) and store.slot_groups, command
    assert not ug.RedisStore("redis://127.0.0.1:1/0").slot_groups
