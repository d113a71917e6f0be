"""Real redis-server processes for the Redis tests: a single server or a 3-master cluster on
free ports, in temp dirs, stopped by pid. Never touches a Redis the machine runs on 6379."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

import pytest


def _free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 55000:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _cli(port: int, *args: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


class RedisServer:
    """One `redis-server` (no persistence) on a free port; `kill()` and `restart()` by pid."""

    def __init__(self, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.port = port or _free_port()
        self.dir = tempfile.mkdtemp(prefix=f"ug-redis-{self.port}-")
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # A second server on the port would fail, and this one would be lost to kill().
            raise RuntimeError(f"redis-server on {self.port} is running (pid {self.proc.pid})")
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", self.dir, *self.extra]
        self.proc = subprocess.Popen(
            ["redis-server", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while _cli(self.port, "ping") != "PONG":
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {self.port} did not start")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL by pid; returns once the port no longer answers."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.01)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cli(self, *args: str) -> str:
        return _cli(self.port, *args)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """A real 3-master Redis Cluster (`redis-cli --cluster create`), with `replicas` replicas
    of each master (a killed master's replica takes over after the node timeout, 2 s)."""

    def __init__(self, replicas: int = 0) -> None:
        extra = ("--cluster-enabled", "yes", "--cluster-node-timeout", "2000")
        # A replica syncs at once (the default waits 5 s for others to share the transfer).
        extra += ("--repl-diskless-sync-delay", "0")
        self.nodes = [RedisServer(extra=extra) for _ in range(3 * (1 + replicas))]
        addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", str(replicas)]
            + ["--cluster-yes"],
            capture_output=True,
            check=True,
        )
        self.wait_ok()

    def wait_ok(self, seconds: float = 20) -> None:
        """Returns once every running node says the cluster is ok, there are 3 masters and
        every replica is in sync with its master (so a replica can take over)."""
        deadline = time.monotonic() + seconds

        def ready(node: RedisServer) -> bool:
            if node.proc is None:
                return True
            role = node.cli("info", "replication")
            synced = "role:master" in role or "master_link_status:up" in role
            return synced and "cluster_state:ok" in node.cli("cluster", "info")

        while not (all(ready(n) for n in self.nodes) and len(self.masters()) == 3):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not become ok")
            time.sleep(0.05)

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        running = [n for n in self.nodes if n.proc is not None]
        return [n for n in running if n.cli("role").splitlines()[:1] == ["master"]]

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# Policy shared by the many-servers test and its workers: one small daily budget.
BUDGET = 20_000
BUDGET_POLICY = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 400}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": BUDGET, "window": "day"}],
            }
        ]
    },
}


def budget_worker(
    url: str, prefix: str, tasks: int, calls: int, seed: int, start: Any
) -> dict[str, int]:
    """One guard instance (run in its own OS process): once every process has reached `start`
    (a barrier shared through a multiprocessing manager, so every process starts together),
    `tasks` asyncio tasks each admit and bill `calls` times on the shared budget. Returns the
    tokens its tickets reported."""
    import usage_guard as ug

    guard = ug.Guard(ug.Policy.from_dict(BUDGET_POLICY), store=ug.RedisStore(url, prefix))
    totals = admit_and_bill(guard, ["alice"], tasks, calls, seed, start)
    return {**totals, "reported": totals["reported"]["alice"]}


def admit_and_bill(
    guard: Any, users: list[str], tasks: int, calls: int, seed: int, start: Any
) -> dict[str, Any]:
    """Once `start` (a barrier) lets every process go: `tasks` asyncio tasks each admit and bill
    `calls` times on gpt-5, each call by one of `users` at random with a random prompt and
    output within the ticket's ceiling. Returns the tokens reported per user, the calls
    admitted and refused, and the bills that answered None. Closes the guard (its queued
    bills are sent before a pool ends the process)."""
    import asyncio
    import random

    import usage_guard as ug

    rng = random.Random(seed)
    totals: dict[str, Any] = {"reported": {u: 0 for u in users}, "admitted": 0}
    totals.update(refused=0, bill_none=0)

    async def task() -> None:
        for _ in range(calls):
            user, prompt = rng.choice(users), rng.randint(10, 100)
            try:
                ticket = await guard.admit_async(
                    user, "gpt-5", prompt_tokens=prompt, max_tokens=rng.randint(50, 400)
                )
            except ug.UsageLimitError:
                totals["refused"] += 1
                await asyncio.sleep(0.001)
                continue
            totals["admitted"] += 1
            await asyncio.sleep(rng.random() * 0.02)
            output = rng.randint(0, ticket.ceiling["tokens"] - prompt)
            billed = await ticket.bill_async(input_tokens=prompt, output_tokens=output)
            if billed is None:
                totals["bill_none"] += 1
            else:
                totals["reported"][user] += prompt + output

    async def main() -> None:
        await asyncio.gather(*(task() for _ in range(tasks)))

    start.wait(60)
    asyncio.run(main())
    guard.close()
    return totals


# Six people with small budgets of their own and one small Model Total: with slot groups each
# admission reserves in two groups (the person's and the model's), spread over the masters.
GROUP_USERS = [f"g{i}" for i in range(6)]
GROUP_PERSON_BUDGET = 3_000
GROUP_MODEL_BUDGET = 12_000
GROUPS_POLICY = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 400}},
    "limits": {
        "public": [
            {
                "model": "gpt-5",
                "each_person": [
                    {"metric": "tokens", "amount": GROUP_PERSON_BUDGET, "window": "day"}
                ],
            }
        ],
        "model_total": [
            {
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": GROUP_MODEL_BUDGET, "window": "day"}],
            }
        ],
    },
}


def groups_worker(
    urls: list[str],
    prefix: str,
    tasks: int,
    calls: int,
    seed: int,
    start: Any,
    lease_above: float | None = None,
) -> dict[str, Any]:
    """`budget_worker` on a cluster store with slot groups and `GROUPS_POLICY` (leasing the
    Model Total above `lease_above` calls a second, when set): each call by one of
    `GROUP_USERS` at random. Returns the tokens reported per person."""
    import usage_guard as ug

    store = ug.RedisStore.cluster(urls, prefix, slot_groups=True, lease_above=lease_above)
    guard = ug.Guard(ug.Policy.from_dict(GROUPS_POLICY), store=store)
    return admit_and_bill(guard, GROUP_USERS, tasks, calls, seed, start)


# The store layouts a fault test runs on (docs/redis.md, "Slot groups" and "Leases"): the
# shared one, slot groups, and slot groups leasing shared counters from the first call.
LAYOUTS: dict[str, dict[str, Any]] = {
    "shared": {},
    "slot_groups": {"slot_groups": True},
    "leased": {"slot_groups": True, "lease_above": 0},
}


def watching(layout: str) -> dict[str, Any]:
    """The store options of a watcher of `layout`: its keys, never a lease of its own (a
    leasing process reads a leased counter as its lease last saw it plus its own use)."""
    return {k: v for k, v in LAYOUTS[layout].items() if k != "lease_above"}


def with_model_total(policy: dict[str, Any], model: str, amount: int) -> dict[str, Any]:
    """`policy` with a Model Total of `amount` tokens a day on `model`: with slot groups a
    second group each call touches (the model's), and the counter a leasing store leases."""
    total = {"model": model, "rules": [{"metric": "tokens", "amount": amount, "window": "day"}]}
    return {**policy, "limits": {**policy["limits"], "model_total": [total]}}
