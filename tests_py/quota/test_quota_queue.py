"""Fair FIFO queues (docs/quotas.md, "Queues"): a `throttle` rule — what `ai.concurrency` and
`ai.rate` with `on_rate = "enqueue"` compile to — makes calls over its limit wait in a queue
in the store, first in first out, bounded by `max_wait` and `max_queue`; across processes on
a real redis-server, and in one process on the memory store."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable

import pytest
import usage_guard as ug
from redis_harness import RedisServer
from usage_guard.quota.model import check_limits, compile_rules

MODELS = {"gpt-5": {"provider": "openai", "prices": {"input": 1.25, "output": 10.0}}}


def policy(limit: int, max_wait: int = 30, max_queue: int = 100) -> dict[str, Any]:
    """A team's concurrency limit that queues, as the quota service compiles it."""
    rules = compile_rules(
        [
            (
                "team",
                "t",
                check_limits(
                    {
                        "ai.concurrency": {
                            "limit": limit,
                            "max_wait": max_wait,
                            "max_queue": max_queue,
                        }
                    }
                ),
            )
        ]
    )
    return {"models": MODELS, "rules": rules}


TEAM = {"team": "t"}


def admit(guard: ug.Guard, user: str = "u") -> ug.Ticket:
    return guard.admit(user, "gpt-5", prompt_tokens=10, max_tokens=10, attributes=TEAM)


def until(check: Callable[[], bool]) -> None:
    """Waits (polling) until `check()` holds; fails after 10 s."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def queue_in_order(guard: ug.Guard, n: int) -> tuple[list[threading.Thread], list[int]]:
    """Starts `n` threads that admit one after the other joined the queue (so joining order
    is thread order); each records its index when admitted, then releases."""
    admitted: list[int] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        ticket = admit(guard, f"u{i}")
        with lock:
            admitted.append(i)
        time.sleep(0.01)
        ticket.release()

    threads = []
    for i in range(n):
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
        until(lambda n=i + 1: guard.waiting == n)
    return threads, admitted


def test_the_quota_compiler_queues_concurrency_and_enqueued_rate() -> None:
    limits = check_limits(
        {
            "ai.concurrency": {"limit": 2, "max_wait": 5, "max_queue": 7},
            "ai.rate": {"limit": 60, "window": "60s", "max_queue": 3},
        }
    )
    assert limits["ai.concurrency"] == {"limit": 2, "max_wait": 5, "max_queue": 7}
    rules = {r["name"]: r for r in compile_rules([("team", "x", limits)])}
    conc, rate = rules["quota ai.concurrency team:x"], rules["quota ai.rate team:x"]
    assert (conc["action"], conc["throttle_max_wait"], conc["throttle_max_queue"]) == (
        "throttle",
        5,
        7,
    )
    assert (rate["action"], rate["throttle_max_wait"], rate["throttle_max_queue"]) == (
        "throttle",
        10,
        3,
    )
    for bad, message in [
        ({"limit": 1, "max_queue": 0}, "max_queue: 0 is not a queue length; accepted: whole"),
        ({"limit": 1, "max_queue": 1.5}, "max_queue: 1.5 is not a queue length"),
        ({"limit": 1, "max_wait": 0}, "max_wait: 0 is not a wait; accepted: whole seconds"),
        ({"limit": 1, "on_rate": "reject"}, "'on_rate' is not a key; accepted: limit, max_queue"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_limits({"ai.concurrency": bad})
    with pytest.raises(ValueError, match=r"rules\[0\].throttle_max_queue"):
        ug.Policy.from_dict(
            {
                "models": MODELS,
                "rules": [
                    {
                        "name": "r",
                        "amount": "concurrency",
                        "budget": 1,
                        "action": "throttle",
                        "throttle_max_queue": 0,
                    }
                ],
            }
        )


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        yield ug.MemoryStore()
        return
    server = RedisServer()
    try:
        yield ug.RedisStore(server.url, prefix="queue")
    finally:
        server.stop()


def test_waiters_are_admitted_first_in_first_out(store: Any) -> None:
    guard = ug.Guard(ug.Policy.from_dict(policy(1)), store=store)
    holder = admit(guard)
    threads, admitted = queue_in_order(guard, 6)
    assert admitted == []  # the limit is taken: every one waits
    holder.release()
    for t in threads:
        t.join()
    assert admitted == list(range(6))
    assert guard.waiting == 0
    assert guard.stats()["refused"] == 0  # a wait that ends in admission is no refusal
    admit(guard).release()  # no hold left behind


def test_never_past_the_limit_in_one_process(store: Any) -> None:
    guard = ug.Guard(ug.Policy.from_dict(policy(2)), store=store)
    running, most, lock = [0], [0], threading.Lock()

    def run(i: int) -> None:
        ticket = admit(guard, f"u{i}")
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        ticket.release()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2


def test_max_wait_refuses_clearly_and_leaves_the_queue(store: Any) -> None:
    guard = ug.Guard(ug.Policy.from_dict(policy(1, max_wait=1)), store=store)
    holder = admit(guard)
    with pytest.raises(ug.UsageLimitError) as refused:
        admit(guard, "late")
    err = refused.value
    assert err.limit_type == "rule"
    assert 'Rule "quota ai.concurrency team:t" kept the call waiting in its queue' in err.message
    assert "its throttle_max_wait" in err.message
    assert guard.waiting == 0
    assert guard.stats()["refused"] == 1  # one call, one refusal
    holder.release()
    admit(guard).release()  # the timed-out waiter holds nothing


def test_a_full_queue_refuses_at_once(store: Any) -> None:
    guard = ug.Guard(ug.Policy.from_dict(policy(1, max_wait=30, max_queue=1)), store=store)
    holder = admit(guard)
    threads, admitted = queue_in_order(guard, 1)
    with pytest.raises(ug.UsageLimitError) as refused:
        admit(guard, "third")
    assert "has 1 calls waiting in its queue already, its throttle_max_queue" in (
        refused.value.message
    )
    assert guard.waiting == 1  # the refused call never joined
    holder.release()
    threads[0].join()
    assert admitted == [0]


def test_a_cancelled_asyncio_waiter_leaves_the_queue(store: Any) -> None:
    # max_wait 1 s: were the cancelled waiter still at the head, the next one could not be
    # admitted before it lapses (2 s) and would be refused.
    guard = ug.Guard(ug.Policy.from_dict(policy(1, max_wait=1)), store=store)

    async def run() -> None:
        holder = await guard.admit_async("h", "gpt-5", prompt_tokens=10, attributes=TEAM)
        first = asyncio.ensure_future(
            guard.admit_async("a", "gpt-5", prompt_tokens=10, attributes=TEAM)
        )
        while guard.waiting < 1:
            await asyncio.sleep(0.005)
        second = asyncio.ensure_future(
            guard.admit_async("b", "gpt-5", prompt_tokens=10, attributes=TEAM)
        )
        while guard.waiting < 2:
            await asyncio.sleep(0.005)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        while guard.waiting > 1:
            await asyncio.sleep(0.005)
        await holder.release_async()
        ticket = await second
        assert guard.waiting == 0
        await ticket.release_async()
        # No hold left by the cancelled waiter: the one slot is free.
        again = await guard.admit_async("c", "gpt-5", prompt_tokens=10, attributes=TEAM)
        await again.release_async()

    asyncio.run(run())


def test_waiting_does_not_block_the_event_loop() -> None:
    guard = ug.Guard(ug.Policy.from_dict(policy(1)), store=ug.MemoryStore())
    holder = admit(guard)

    async def run() -> int:
        waiter = asyncio.ensure_future(
            guard.admit_async("w", "gpt-5", prompt_tokens=10, attributes=TEAM)
        )
        ticks = 0
        while guard.waiting < 1:
            await asyncio.sleep(0.001)
        for _ in range(5):
            await asyncio.sleep(0.001)  # the loop runs while the call waits
            ticks += 1
        assert not waiter.done()
        holder.release()
        ticket = await waiter
        ticket.release()
        return ticks

    assert asyncio.run(run()) == 5


# -- across processes, on Redis -----------------------------------------------------------

CHILD = """
import fcntl, json, os, sys, threading, time
import usage_guard as ug

url, counter, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
document = json.loads(sys.argv[4])
guard = ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(url, prefix="queue"))
admitted, most, lock = [], [0], threading.Lock()

def running(delta):
    # A count of calls running in every process, in a file under an exclusive lock.
    with open(counter, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        now = int(f.read() or 0) + delta
        f.seek(0); f.truncate(); f.write(str(now)); f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)
    return now

def run(i):
    ticket = guard.admit(f"p{os.getpid()}-{i}", "gpt-5", prompt_tokens=10, max_tokens=10,
                         attributes={"team": "t"})
    now = running(+1)
    with lock:
        admitted.append(i)
        most[0] = max(most[0], now)
    time.sleep(0.02)
    running(-1)
    ticket.release()

threads = []
for i in range(n):
    t = threading.Thread(target=run, args=(i,))
    t.start()
    threads.append(t)
    while guard.waiting < i + 1:
        time.sleep(0.002)
print("queued", flush=True)
for t in threads:
    t.join()
print(json.dumps({"admitted": admitted, "most": most[0], "waiting": guard.waiting}), flush=True)
"""


@pytest.mark.parametrize("limit", [1, 3])
def test_three_processes_share_one_fifo_queue_on_redis(
    redis_server: RedisServer, tmp_path: Any, limit: int
) -> None:
    document = policy(limit)
    guard = ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(redis_server.url, "queue"))
    # The parent takes the whole limit, so every child's call joins the queue.
    held = [admit(guard, f"parent{i}") for i in range(limit)]
    counter = tmp_path / "running"
    counter.write_text("0")
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(CHILD),
                redis_server.url,
                str(counter),
                "4",
                json.dumps(document),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        for _ in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "queued"
        # Calls ending here admit the waiters of the other processes.
        for ticket in held:
            ticket.release()
        answers = []
        for child in children:
            assert child.stdout is not None
            answers.append(json.loads(child.stdout.readline()))
            assert child.wait(timeout=60) == 0
    finally:
        for child in children:
            child.kill()
            child.wait()
    for answer in answers:
        if limit == 1:
            assert answer["admitted"] == [0, 1, 2, 3]  # strictly FIFO within the process
        assert sorted(answer["admitted"]) == [0, 1, 2, 3]
        assert answer["most"] <= limit  # never past the limit, across the processes
        assert answer["waiting"] == 0
    # Every hold was given back: the whole limit is free again.
    again = [admit(guard, f"again{i}") for i in range(limit)]
    for ticket in again:
        ticket.release()


def test_a_newcomer_does_not_jump_the_queue(store: Any) -> None:
    # The team has a free slot, but alice waits at the head of the team's queue (her own
    # limit is taken): bob, a newcomer, joins behind her instead of taking the free slot.
    # (bob's own limit only shortens his wait: 1 s, where alice may wait 30 s.)
    limits = [
        ("team", "t", check_limits({"ai.concurrency": {"limit": 2, "max_wait": 30}})),
        ("user", "alice", check_limits({"ai.concurrency": {"limit": 1, "max_wait": 30}})),
        ("user", "bob", check_limits({"ai.concurrency": {"limit": 10, "max_wait": 1}})),
    ]
    doc = {"models": MODELS, "rules": compile_rules(limits)}
    guard = ug.Guard(ug.Policy.from_dict(doc), store=store)
    held = admit(guard, "alice")
    outcome: list[str] = []

    def alice() -> None:
        try:
            admit(guard, "alice").release()
            outcome.append("admitted")
        except ug.UsageLimitError:
            outcome.append("refused")

    waiter = threading.Thread(target=alice)
    waiter.start()
    until(lambda: guard.waiting == 1)
    with pytest.raises(ug.UsageLimitError, match="kept the call waiting in its queue"):
        admit(guard, "bob")
    assert outcome == [] and guard.waiting == 1  # alice still waits, at the head
    held.release()  # alice's own limit has room: she is admitted
    waiter.join()
    assert outcome == ["admitted"]
    admit(guard, "bob").release()  # the queue is empty again: straight in
    assert guard.waiting == 0


def test_an_enqueued_rate_limit_waits_for_its_window() -> None:
    limits = check_limits({"ai.rate": {"limit": 1, "window": "1s", "max_wait": 5}})
    doc = {"models": MODELS, "rules": compile_rules([("team", "t", limits)])}
    guard = ug.Guard(ug.Policy.from_dict(doc), store=ug.MemoryStore())
    admit(guard).bill(input_tokens=1, output_tokens=1)
    # Refused now, admitted once the 1 s window has rolled (system clock).
    admit(guard).bill(input_tokens=1, output_tokens=1)
    assert guard.waiting == 0 and guard.stats()["refused"] == 0
    rejecting = check_limits({"ai.rate": {"limit": 1, "window": "60s", "on_rate": "reject"}})
    doc = {"models": MODELS, "rules": compile_rules([("team", "t", rejecting)])}
    guard = ug.Guard(ug.Policy.from_dict(doc), store=ug.MemoryStore())
    admit(guard).bill(input_tokens=1, output_tokens=1)
    with pytest.raises(ug.UsageLimitError):
        admit(guard)
