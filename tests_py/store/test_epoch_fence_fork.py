"""The epoch fence across fork(): a forked child's open calls are held again under a new
epoch by the child's own watch (its runtime and watch start afresh in the child), so a
recovery elsewhere never counts them as free. Real redis-server, real SQLite ledger; the
shared layout and slot groups."""

from __future__ import annotations

import os
import select
import time
import traceback
from pathlib import Path

import pytest
import test_epoch_fence
import usage_guard as ug
from redis_harness import RedisServer
from test_epoch_fence import (
    DAY_COST,
    bill_all,
    call,
    full_after_the_wait,
    held_again,
    policy,
    reconnect,
    refused_reason,
    store,
    used,
)


@pytest.fixture(autouse=True, params=["shared", "slot_groups"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the test in both layouts (test_epoch_fence's `store` follows it)."""
    monkeypatch.setattr(test_epoch_fence, "SLOT_GROUPS", request.param == "slot_groups")


def _read_line(fd: int, within: float = 20.0) -> str:
    """One line from the pipe `fd`, or '' when none comes `within` seconds."""
    got = b""
    deadline = time.monotonic() + within
    while not got.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return ""
        chunk = os.read(fd, 1)
        if not chunk:
            return ""
        got += chunk
    return got.decode().strip()


def _child_keeps_two_calls_open(guard: ug.Guard, out: int, into: int) -> int:
    """The forked child: two calls open on the parent's guard, held again by the child once
    another guard recovered the store; billed when the parent says so."""
    try:
        tickets = [guard.admit("alice", "m", prompt_tokens=50, max_tokens=50) for _ in range(2)]
        os.write(out, b"open\n")
        deadline = time.monotonic() + 60  # the parent restarts Redis and recovers meanwhile
        while guard.stats()["calls_held_again"] < 2:
            if time.monotonic() > deadline:
                return 2
            time.sleep(0.05)
        os.write(out, b"held\n")
        if _read_line(into) != "bill":
            return 3
        for ticket in tickets:
            assert ticket.bill(input_tokens=50, output_tokens=50, wait=True) is not None
        guard.close()
        return 0
    except BaseException:  # pragma: no cover - reported through the exit code
        traceback.print_exc()
        return 1


def test_a_forked_childs_open_calls_are_held_again_by_the_child(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """`a` is made and used in the parent, and forked while it has a call open (its watch
    running): the child keeps two calls open on it. Redis restarts empty and the parent's `b`
    recovers (0.7 refilled from the ledger). Each process's watch holds its own calls again
    (the parent's one, the child's two: the child's watch is its own, not the parent's), so
    after the wait `b` refuses, and the bills land exactly on the limit."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    a, b = (ug.Guard(policy(), store=store(redis_server), clock=clock, ledger=ledger) for _ in "ab")
    for _ in range(6):
        call(a)
    call(b)
    ledger.flush()
    parents = a.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    to_parent, from_parent = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child leaves by _exit
        os._exit(_child_keeps_two_calls_open(a, to_parent[1], from_parent[0]))
    try:
        assert _read_line(to_parent[0]) == "open"
        written = b.stats()["epochs_written"]
        redis_server.restart()
        reconnect(b)
        assert refused_reason(b) == "USAGE_LIMITS_RECOVERING"
        assert b.stats()["epochs_written"] == written + 1
        assert _read_line(to_parent[0]) == "held", "the child never held its calls again"
        held_again(a, 1)
        full_after_the_wait(b, clock)  # 0.7 refilled, 0.3 held again
        bill_all([parents])
        os.write(from_parent[1], b"bill\n")
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        for fd in (*to_parent, *from_parent):
            os.close(fd)
    assert used(b) == DAY_COST
    a.close()
    b.close()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == DAY_COST
