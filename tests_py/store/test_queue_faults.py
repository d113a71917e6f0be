"""Faults around the fair FIFO queues of `throttle` rules (docs/quotas.md, "Queues") on a real
redis-server: a waiting process killed with SIGKILL, Redis losing its queues under waiters
(restarted empty, FLUSHALL; a stopped waiter's number handed out again), and fork() while
threads of the parent wait in a queue. In the shared layout and with slot groups (the queues
then live in the store's own group, the counters in the team's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable

import pytest
import usage_guard as ug
from redis_harness import RedisServer

MODELS = {"gpt-5": {"provider": "openai", "prices": {"input": 1.25, "output": 10.0}}}
TEAM = {"team": "t"}
PREFIX = "qfault"
SLOT_GROUPS = False


@pytest.fixture(autouse=True, params=["shared", "slot_groups"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs each test in both layouts (`guard_on`, the waiter and the key patterns follow)."""
    monkeypatch.setattr(sys.modules[__name__], "SLOT_GROUPS", request.param == "slot_groups")


def queue_tag() -> str:
    """The hash tag of the queues' keys: the store's own (with slot groups, its `:2` group)."""
    return "{" + PREFIX + (":2}" if SLOT_GROUPS else "}")


def policy(limit: int = 1, max_wait: int = 10) -> dict[str, Any]:
    """One team concurrency limit that queues."""
    rule = {
        "name": "team concurrency",
        "applies_when": TEAM,
        "amount": "concurrency",
        "budget": limit,
        "action": "throttle",
        "throttle_max_wait": max_wait,
        "throttle_max_queue": 10,
    }
    return {"models": MODELS, "rules": [rule]}


def guard_on(server: RedisServer, limit: int = 1, max_wait: int = 10) -> ug.Guard:
    store = ug.RedisStore(server.url, prefix=PREFIX, slot_groups=SLOT_GROUPS)
    return ug.Guard(ug.Policy.from_dict(policy(limit, max_wait)), store=store)


def admit(guard: ug.Guard, user: str = "u") -> ug.Ticket:
    return guard.admit(user, "gpt-5", prompt_tokens=10, max_tokens=10, attributes=TEAM)


def until(check: Callable[[], bool], within: float = 10.0) -> None:
    """Polls until `check()` holds; fails after `within` seconds."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def queue_length(server: RedisServer) -> int:
    """Waiters in the team's queue, as Redis holds it (lapsed ones included)."""
    # The queue's order key: `<tag>:m:queue:<counter>`, its name escaped (`:` is %3A).
    keys = server.cli("--scan", "--pattern", f"{queue_tag()}:m:queue%3A*").split()
    return sum(int(server.cli("zcard", k)) for k in keys)


def drop_queue_keys(server: RedisServer) -> int:
    """Deletes every key of the queues (not the counters); answers how many there were."""
    keys = server.cli("--scan", "--pattern", f"{queue_tag()}:m:queue*").split()
    assert keys and server.cli("del", *keys) == str(len(keys))  # in one step: polls go on
    return len(keys)


def assert_limit_free(guard: ug.Guard, limit: int = 1) -> None:
    """The whole limit is free (no hold left), and not one call more fits."""
    held = [admit(guard, f"check{i}") for i in range(limit)]
    with pytest.raises(ug.UsageLimitError, match="kept the call waiting in its queue"):
        admit(guard, "one-too-many")
    for ticket in held:
        ticket.release()


# -- a waiter killed with SIGKILL ---------------------------------------------------------

WAITER = """
import json, sys, threading, time
import usage_guard as ug

url, prefix, document = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = ug.RedisStore(url, prefix=prefix, slot_groups=sys.argv[4] == "1")
guard = ug.Guard(ug.Policy.from_dict(document), store=store)
outcome = []

def run():
    try:
        ticket = guard.admit("w", "gpt-5", prompt_tokens=10, max_tokens=10,
                             attributes={"team": "t"})
    except ug.UsageLimitError as e:
        outcome.append(("refused", e.message, None))
        return
    outcome.append(("admitted", None, ticket))

waiter = threading.Thread(target=run)
waiter.start()
while guard.waiting < 1 and not outcome:
    time.sleep(0.002)
print("queued" if not outcome else "not queued", flush=True)
waiter.join()
kind, message, ticket = outcome[0]
print(json.dumps({"outcome": kind, "message": message}), flush=True)
if ticket is not None:
    sys.stdin.readline()  # holds its slot until told
    ticket.release()
guard.close()
"""


def spawn_waiter(server: RedisServer, document: dict[str, Any]) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(WAITER),
            server.url,
            PREFIX,
            json.dumps(document),
            str(int(SLOT_GROUPS)),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "queued"
    return child


def test_a_killed_waiter_lapses_and_the_next_is_admitted(redis_server: RedisServer) -> None:
    document = policy(limit=1, max_wait=10)
    a = guard_on(redis_server)  # process A: this one
    holder = admit(a, "a")
    b = spawn_waiter(redis_server, document)
    c = None
    try:
        c = spawn_waiter(redis_server, document)  # behind B
        assert queue_length(redis_server) == 2
        os.kill(b.pid, signal.SIGKILL)
        assert b.wait(10) == -signal.SIGKILL
        holder.release()  # room: B is the head but dead, C behind it
        assert c.stdout is not None and c.stdin is not None
        answer = json.loads(c.stdout.readline())  # bounded by C's max_wait (10 s)
        assert answer == {"outcome": "admitted", "message": None}, answer
        assert queue_length(redis_server) == 0  # B's place lapsed and was dropped
        # C holds the one slot: never past the limit, in any process.
        probe = guard_on(redis_server, max_wait=1)
        with pytest.raises(ug.UsageLimitError, match="kept the call waiting"):
            admit(probe, "probe")
        c.stdin.write("release\n")
        c.stdin.flush()
        assert c.wait(20) == 0
    finally:
        for child in (b, c):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
    assert_limit_free(guard_on(redis_server, max_wait=1))


def test_a_waiter_from_before_the_store_lost_its_queues_keeps_no_new_place(
    redis_server: RedisServer,
) -> None:
    """The store loses its queues and their number sequence while a waiter's process is
    stopped; a new waiter joins. The old one, polling again, must find its place gone, not
    take the new waiter's for its own because the new sequence gave out its number again."""
    document = policy(limit=1, max_wait=10)
    guard = guard_on(redis_server)
    holder = admit(guard, "a")
    old = spawn_waiter(redis_server, document)
    assert old.stdout is not None
    try:
        os.kill(old.pid, signal.SIGSTOP)  # it does not poll meanwhile
        assert redis_server.cli("FLUSHALL") == "OK"
        holder.release()  # (its hold went with the flush)
        holder = admit(guard, "b")
        admitted: list[ug.Ticket] = []
        new = threading.Thread(target=lambda: admitted.append(admit(guard, "new")))
        new.start()
        until(lambda: guard.waiting == 1)
        os.kill(old.pid, signal.SIGCONT)
        answer = json.loads(old.stdout.readline())
        assert answer["outcome"] == "refused", answer
        assert "the store no longer had it" in answer["message"], answer
        assert old.wait(20) == 0
        holder.release()
        new.join(10)
        assert len(admitted) == 1, "the new waiter lost its place"
        admitted[0].release()
    finally:
        if old.poll() is None:
            os.kill(old.pid, signal.SIGCONT)
            old.kill()
            old.wait()
    assert_limit_free(guard_on(redis_server, max_wait=1))


# -- Redis restarting empty under waiters -------------------------------------------------


def test_redis_restarting_empty_under_waiters(redis_server: RedisServer) -> None:
    max_wait = 6
    guard = guard_on(redis_server, limit=1, max_wait=max_wait)
    holder = admit(guard, "holder")
    outcomes: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    running, most = [0], [0]

    def wait_in_queue(i: int) -> None:
        started = time.monotonic()
        try:
            ticket = admit(guard, f"w{i}")
        except ug.UsageLimitError as e:
            with lock:
                outcomes.append((type(e).__name__, e.message, time.monotonic() - started))
            return
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            outcomes.append(("admitted", "", time.monotonic() - started))
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        ticket.release()

    waiters = [threading.Thread(target=wait_in_queue, args=(i,)) for i in range(4)]
    for i, t in enumerate(waiters):
        t.start()
        until(lambda n=i + 1: guard.waiting == n)
    redis_server.restart()  # empty, same port: the queues and the holder's hold are gone
    for t in waiters:
        t.join(max_wait + 10)
        assert not t.is_alive(), "a waiter hung past max_wait"
    assert guard.waiting == 0
    assert len(outcomes) == 4
    for kind, message, waited in outcomes:
        assert waited < max_wait + 5, outcomes  # never past max_wait (plus a store timeout)
        if kind == "admitted":
            continue
        # Unavailable while Redis is down, or refused: its place in the queue was lost.
        assert kind in ("UsageLimitsUnavailable", "UsageLimitError"), outcomes
        if kind == "UsageLimitError":
            assert "dropped the call from its queue" in message, outcomes
            assert "the store no longer had it (restarted empty" in message, outcomes
    assert most[0] <= 1, outcomes  # the admitted ones, one at a time
    holder.release()  # its hold died with Redis: giving it back changes nothing
    until(lambda: _answers(guard))
    assert_limit_free(guard_on(redis_server, max_wait=1))
    assert queue_length(redis_server) == 0


def test_waiters_whose_queue_the_store_lost_are_refused_saying_so(
    redis_server: RedisServer,
) -> None:
    # The deterministic half of the restart: Redis answers throughout, the queues' keys are
    # gone (removed, or evicted: they have a time to live) and the holder's hold is not. With
    # the hold gone too (FLUSHALL) the head may poll its place just before the flush and take
    # the room the flush freed, as a newcomer could: that race is the restart test's.
    guard = guard_on(redis_server, limit=1, max_wait=20)
    holder = admit(guard, "holder")
    refusals: list[str] = []

    def wait_in_queue(i: int) -> None:
        with pytest.raises(ug.UsageLimitError) as refused:
            admit(guard, f"w{i}")
        refusals.append(refused.value.message)

    waiters = [threading.Thread(target=wait_in_queue, args=(i,)) for i in range(3)]
    for i, t in enumerate(waiters):
        t.start()
        until(lambda n=i + 1: guard.waiting == n)
    assert drop_queue_keys(redis_server) >= 2  # a queue's order and its waiters' lapse times
    for t in waiters:
        t.join(10)  # at the next poll (50 ms), far before max_wait
        assert not t.is_alive(), "a waiter waited on for a place the store lost"
    assert len(refusals) == 3
    for message in refusals:
        assert message.startswith('Rule "team concurrency" dropped the call from its queue')
        assert "the store no longer had it (restarted empty, or its keys removed)" in message
    assert guard.waiting == 0 and queue_length(redis_server) == 0
    holder.release()
    assert_limit_free(guard_on(redis_server, max_wait=1))


def _answers(guard: ug.Guard) -> bool:
    """Whether the store answers the guard again (the connection reconnects on use)."""
    try:
        admit(guard, "reconnect").release()
        return True
    except ug.UsageLimitsUnavailable:
        return False


# -- fork() while a parent thread waits ----------------------------------------------------


def _child_after_fork(guard: ug.Guard) -> int:
    """The forked child: one call through the queue (behind the parent's waiter), on its own
    runtime and connection; its exit code says whether it worked."""
    try:
        ticket = admit(guard, "child")
        ticket.release()
        guard.close()
        return 0
    except BaseException:  # pragma: no cover - reported through the exit code
        import traceback

        traceback.print_exc()
        return 1


FORKS = 6


def _reap(pid: int, within: float) -> object:
    """The child's exit code, or "hung" when it still ran at the deadline (then killed)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(raw)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
def test_fork_while_parent_threads_wait_in_a_queue(redis_server: RedisServer) -> None:
    guard = guard_on(redis_server, limit=1, max_wait=20)
    holder = admit(guard, "holder")
    admitted: list[str] = []

    def parent_waiter() -> None:  # waits on its own thread, the GIL released
        ticket = admit(guard, "parent-waiter")
        admitted.append("parent")
        time.sleep(0.05)
        ticket.release()

    async def async_waiter() -> None:  # waits on the runtime's threads
        ticket = await guard.admit_async(
            "parent-async", "gpt-5", prompt_tokens=10, max_tokens=10, attributes=TEAM
        )
        admitted.append("parent-async")
        await ticket.release_async()

    waiter = threading.Thread(target=parent_waiter)
    waiter.start()
    until(lambda: guard.waiting == 1)
    waiters = [waiter, threading.Thread(target=asyncio.run, args=(async_waiter(),))]
    waiters[1].start()
    until(lambda: guard.waiting == 2)
    pids = []
    try:
        # Forks land at different points of the parent thread's wait (polling, sleeping).
        for n in range(FORKS):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's result is its exit code
                os._exit(_child_after_fork(guard))
            pids.append(pid)
            time.sleep(0.013 * (n % 4))
        # Each child joins behind the parent's waiter (their places show in Redis).
        until(lambda: queue_length(redis_server) == 2 + FORKS)
        assert admitted == []
        holder.release()
        for t in waiters:
            t.join(20)
            assert not t.is_alive(), "a waiter of the parent was never admitted"
        # First in, first out: the parent's waiters joined before every child.
        assert admitted == ["parent", "parent-async"]
    finally:
        statuses = [_reap(pid, within=30) for pid in pids]
    assert statuses == [0] * FORKS, statuses
    assert guard.waiting == 0
    assert_limit_free(guard_on(redis_server, max_wait=1))
