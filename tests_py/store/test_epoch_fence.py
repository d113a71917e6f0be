"""The epoch fence (issue 10 item 3): a Redis that lost its state (restarted empty on the same
port, a counter deleted) never reads as unspent capacity. Fenced rules are refused with
`budget_recovering` until the ledger refills the counters (one guard recovers) or the
operator attests; unfenced rules go on as before. Real redis-server, real SQLite ledger.
Every test runs in both store layouts: shared, and with slot groups (the fence per group,
docs/redis.md "Slot groups")."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import RedisServer

# 1 token = $0.001 in and out: a call of 50 + 50 tokens costs $0.10; the day allows $1.00.
MODEL: dict[str, Any] = {"provider": "openai", "prices": {"input": 1000.0, "output": 1000.0}}
CALL_COST = 100_000  # micro-dollars
DAY_COST = 1_000_000
# After a recovery from the ledger, fenced calls wait this long (guard clock) while every
# guard holds its open calls again (src/guard/engine/hold_again.rs, HOLD_AGAIN_MS).
HOLD_AGAIN_SECONDS = 5


def policy(metric: str = "cost", amount: float = 1.0, **settings: Any) -> ug.Policy:
    return ug.Policy.from_dict(
        {
            "models": {"m": MODEL},
            "settings": settings,
            "limits": {
                "direct": [
                    {
                        "user": "alice",
                        "model": "m",
                        "rules": [{"metric": metric, "amount": amount, "window": "day"}],
                    }
                ]
            },
        }
    )


def call(guard: ug.Guard) -> None:
    ticket = guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert ticket.bill(input_tokens=50, output_tokens=50, wait=True) is not None


def used(guard: ug.Guard) -> int:
    return int(guard.usage("alice", "m")["rules"][0]["used"])


SLOT_GROUPS = False


@pytest.fixture(autouse=True, params=["shared", "slot_groups"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs each test in both layouts (`store` and `pattern` follow it)."""
    monkeypatch.setattr(sys.modules[__name__], "SLOT_GROUPS", request.param == "slot_groups")


def store(server: RedisServer, prefix: str = "fence") -> ug.RedisStore:
    return ug.RedisStore(server.url, prefix, slot_groups=SLOT_GROUPS)


def pattern(prefix: str, kind: str) -> str:
    """A glob of the store's `kind` keys (`c` counters, `h` holds) in the layout under test."""
    tag = "{" + prefix + (":2:*}" if SLOT_GROUPS else "}")
    return f"{tag}:{kind}:*"


def reconnect(guard: ug.Guard) -> None:
    """Reads until the guard's store answers again after a restart (reads are not fenced)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            guard.usage("alice", "m")
            return
        except ug.UsageLimitsUnavailable:
            assert time.monotonic() < deadline, "the store never answered again"
            time.sleep(0.05)


def held_again(guard: ug.Guard, calls: int) -> None:
    """Waits (real time) until `guard` held `calls` open calls again under a new epoch."""
    deadline = time.monotonic() + 10
    while guard.stats()["calls_held_again"] < calls:
        assert time.monotonic() < deadline, guard.stats()
        time.sleep(0.05)


def full_after_the_wait(guard: ug.Guard, clock: ug.ManualClock) -> None:
    """Past the hold-again wait, `guard` finds the day's budget used or held: refused, as held
    by the calls in progress (without their holds it would fit)."""
    clock.advance(HOLD_AGAIN_SECONDS)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert refused.value.reason == "USAGE_LIMIT_HELD"


def bill_all(tickets: list[ug.Ticket]) -> None:
    for ticket in tickets:
        billed = ticket.bill(input_tokens=50, output_tokens=50, wait=True)
        assert billed is not None and billed["recorded"] is True


def refused_reason(guard: ug.Guard) -> str:
    """The reason the next call is refused, once the store answers again after a restart
    (the first call may still meet the broken connection: plain unavailable)."""
    deadline = time.monotonic() + 5
    while True:
        with pytest.raises(ug.UsageLimitsUnavailable) as refused:
            guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
        if refused.value.reason != "USAGE_LIMITS_UNAVAILABLE" or time.monotonic() > deadline:
            return refused.value.reason
        time.sleep(0.05)


def test_a_restart_fences_cost_rules_until_the_operator_attests(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    guard = ug.Guard(policy(), store=store(redis_server), clock=clock)
    for _ in range(9):
        call(guard)
    assert used(guard) == 9 * CALL_COST
    redis_server.restart()  # empty, on the same port
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
    for _ in range(2):
        with pytest.raises(ug.UsageLimitsUnavailable) as refused:
            guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    err = refused.value
    assert err.reason == "USAGE_LIMITS_RECOVERING" and err.unavailable
    status, _headers, body = err.to_http("openai")
    assert status == 503 and body["error"]["code"] == "budget_recovering"
    assert guard.stats()["recovering"] == 3
    with pytest.raises(ValueError, match="attest"):
        guard.recover()
    guard.recover(attest=True)
    call(guard)  # the operator's act: what was lost is not counted
    assert used(guard) == CALL_COST


def test_a_lost_counter_is_fenced(redis_server: RedisServer, clock: ug.ManualClock) -> None:
    guard = ug.Guard(policy(), store=store(redis_server, "lost"), clock=clock)
    for _ in range(3):
        call(guard)
    keys = redis_server.cli("--scan", "--pattern", pattern("lost", "c")).split()
    assert len(keys) == 1
    redis_server.cli("del", keys[0])  # the epoch stays; the counter it lists is gone
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"


def test_a_counter_lost_after_its_first_bill_is_fenced(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    """A reserve no longer writes the bucket: the bill that first wrote it lists it."""
    guard = ug.Guard(policy(), store=store(redis_server, "first"), clock=clock)
    call(guard)
    keys = redis_server.cli("--scan", "--pattern", pattern("first", "c")).split()
    assert len(keys) == 1
    redis_server.cli("del", keys[0])
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"


def test_a_released_ticket_is_no_lost_counter(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    """A reserve writes only the counter's holds; released, nothing was added: neither the
    bucket (never written) nor the holds hash (its last hold given back) reads as lost."""
    guard = ug.Guard(policy(), store=store(redis_server, "rel"), clock=clock)
    for _ in range(3):
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50).release()
    assert redis_server.cli("--scan", "--pattern", pattern("rel", "c")).split() == []
    call(guard)
    assert used(guard) == CALL_COST


def test_a_lost_holds_key_is_fenced(redis_server: RedisServer, clock: ug.ManualClock) -> None:
    """An open call's holds hash deleted under a running store: the hold it counted is gone,
    so the next reserve is fenced (not admitted into capacity the open call still uses)."""
    guard = ug.Guard(policy(), store=store(redis_server, "lh"), clock=clock)
    open_call = guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    keys = redis_server.cli("--scan", "--pattern", pattern("lh", "h")).split()
    assert len(keys) == 1
    redis_server.cli("del", keys[0])
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
    open_call.release()


def recovered(guard: ug.Guard, clock: ug.ManualClock) -> None:
    """The first call after a restart recovers from the ledger; calls then wait while the
    other guards hold their open calls again. Passes that time on the manual clock."""
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
    clock.advance(HOLD_AGAIN_SECONDS)


def billed_with_ledger(
    server: RedisServer, clock: ug.ManualClock, tmp_path: Path, calls: int, open_calls: int
) -> tuple[ug.SqliteLedger, ug.Guard, list[ug.Ticket]]:
    """A guard with a SQLite ledger after `calls` billed calls and `open_calls` admitted and
    still open; then Redis restarts empty and the guard reads it again."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    guard = ug.Guard(policy(), store=store(server), clock=clock, ledger=ledger)
    for _ in range(calls):
        call(guard)
    tickets = [
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50) for _ in range(open_calls)
    ]
    guard.close()
    server.restart()
    reconnect(guard)
    return ledger, guard, tickets


def test_with_a_ledger_a_restart_refills_and_never_overspends(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    ledger, guard, _ = billed_with_ledger(redis_server, clock, tmp_path, 9, 0)
    recovered(guard, clock)
    call(guard)  # refilled: 0.90 used, room for one more call
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert refused.value.reason == "USAGE_LIMIT_REACHED"
    assert used(guard) == DAY_COST
    guard.close()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == DAY_COST


def test_calls_open_across_a_restart_do_not_overspend_after_the_refill(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """The ledger refills what was billed; the guard holds its open calls again before it
    admits against that (before, both later calls were admitted: 1.2 billed on 1.0)."""
    ledger, guard, open_calls = billed_with_ledger(redis_server, clock, tmp_path, 8, 2)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert refused.value.reason == "USAGE_LIMIT_HELD"  # 0.8 refilled, 0.2 held again
    bill_all(open_calls)
    assert used(guard) == DAY_COST  # each hold given back once, each bill counted once
    guard.close()
    billed = sum(g["cost_micros"] for g in ledger.query(group_by=["user"]))
    assert billed == DAY_COST


def test_a_call_held_again_and_then_released_frees_its_room(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    _, guard, (open_call,) = billed_with_ledger(redis_server, clock, tmp_path, 9, 1)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    assert refused.value.reason == "USAGE_LIMIT_HELD"  # 0.9 refilled, 0.1 held again
    assert open_call.release()
    recovered(guard, clock)
    call(guard)  # its hold was given back: room for one call
    assert used(guard) == DAY_COST


def lands_on_the_limit(
    holder: ug.Guard,
    recovering: ug.Guard,
    open_calls: list[ug.Ticket],
    clock: ug.ManualClock,
    ledger: ug.SqliteLedger,
) -> None:
    """After a loss that `recovering` recovered from the ledger: `holder` holds its open calls
    again, `recovering` then finds the budget full, and their bills land exactly on it."""
    held_again(holder, len(open_calls))
    full_after_the_wait(recovering, clock)
    bill_all(open_calls)
    assert used(recovering) == DAY_COST
    for guard in (holder, recovering):
        guard.close()
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == DAY_COST


def test_another_guards_open_calls_are_held_again_before_any_guard_admits(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """Guard `a` has two calls open when Redis restarts empty, and admits nothing after it;
    guard `b` recovers (0.8 billed, refilled from the ledger). Fenced calls then wait while
    every guard holds its open calls again: `a` finds the new epoch by itself (it reads the
    store's epoch while it has calls open) and holds its two again, so `b` sees 1.0 counted
    and refuses. Before, `b` admitted two calls at once: 1.2 billed on a 1.0 limit."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    a, b = (ug.Guard(policy(), store=store(redis_server), clock=clock, ledger=ledger) for _ in "ab")
    for _ in range(7):
        call(a)
    call(b)  # b trusts the store's epoch too: it runs, as a's peer
    open_calls = [a.admit("alice", "m", prompt_tokens=50, max_tokens=50) for _ in range(2)]
    ledger.flush()
    written = b.stats()["epochs_written"]
    redis_server.restart()
    reconnect(b)
    assert refused_reason(b) == "USAGE_LIMITS_RECOVERING"
    assert b.stats()["epochs_written"] == written + 1  # b recovered; a wrote nothing
    lands_on_the_limit(a, b, open_calls, clock, ledger)  # 0.8 refilled, 0.2 held again


def command_calls(server: RedisServer) -> dict[str, int]:
    """Calls per command so far (INFO commandstats; those made inside scripts included)."""
    calls = {}
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line[len("cmdstat_") :].partition(":")
            calls[name] = int(fields.split(",")[0].split("=")[1])
    return calls


def test_the_epoch_watch_looks_with_one_hget_and_no_script(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    """While nothing changes, a guard with a call open looks at the store's epoch every
    second with one HGET of its generation, not the epoch script (whose INFO costs ~35 k
    instructions of Redis per look)."""
    guard = ug.Guard(policy(), store=store(redis_server), clock=clock)
    call(guard)  # it trusts the store's epoch
    ticket = guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
    before = command_calls(redis_server)
    deadline = time.monotonic() + 10
    while command_calls(redis_server).get("hget", 0) < before.get("hget", 0) + 2:
        assert time.monotonic() < deadline, "the watch never looked"
        time.sleep(0.1)
    after = command_calls(redis_server)
    for script in ("evalsha", "eval", "fcall"):
        assert after.get(script, 0) == before.get(script, 0), (before, after)
    ticket.release()
    guard.close()


def test_a_new_guard_recovering_a_store_that_lost_everything_waits_for_the_open_calls(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    """Guard `a` has two calls open when Redis restarts empty (no epoch left); a guard `c`
    that never trusted an epoch recovers it. The ledger's audit log has the epoch `a` wrote
    at its first start, so `c` knows the store lost it and makes fenced calls wait while `a`
    holds its calls again. Before, `c` took the empty store for a first start and admitted
    two calls at once: 1.2 billed on a 1.0 limit."""
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    a = ug.Guard(policy(), store=store(redis_server), clock=clock, ledger=ledger)
    for _ in range(8):
        call(a)
    open_calls = [a.admit("alice", "m", prompt_tokens=50, max_tokens=50) for _ in range(2)]
    ledger.flush()
    redis_server.restart()
    c = ug.Guard(policy(), store=store(redis_server), clock=clock, ledger=ledger)
    assert refused_reason(c) == "USAGE_LIMITS_RECOVERING"
    assert c.stats()["epochs_written"] == 1
    lands_on_the_limit(a, c, open_calls, clock, ledger)  # 0.8 refilled, 0.2 held again
    epochs = ledger.audit(kind="store_epoch")
    # (one instant on the manual clock: in no particular order)
    assert sorted(e["detail"]["how"] for e in epochs) == ["first_start", "recovered"]
    assert epochs[0]["detail"]["generation"] != epochs[1]["detail"]["generation"]
    assert sum(g["cost_micros"] for g in ledger.query(group_by=["user"])) == DAY_COST


def test_three_guards_one_recovers_none_overspends(
    redis_server: RedisServer, clock: ug.ManualClock, tmp_path: Path
) -> None:
    ledger = ug.SqliteLedger(str(tmp_path / "ledger.db"))
    guards = [
        ug.Guard(policy(), store=store(redis_server), clock=clock, ledger=ledger) for _ in range(3)
    ]
    for _ in range(6):
        call(guards[0])
    for g in guards[1:]:
        call(g)  # every guard is running (it trusted the store's epoch)
    guards[0].close()
    written = [g.stats()["epochs_written"] for g in guards]
    redis_server.restart()
    for g in guards:
        reconnect(g)
    barrier = threading.Barrier(3)
    admitted = [0, 0, 0]
    refusals: list[str] = []

    def run(i: int) -> None:
        barrier.wait()
        for _ in range(5):
            try:
                ticket = guards[i].admit("alice", "m", prompt_tokens=50, max_tokens=50)
            except ug.UsageLimitError as e:
                refusals.append(e.reason)
                continue
            admitted[i] += 1
            assert ticket.bill(input_tokens=50, output_tokens=50, wait=True) is not None

    def all_three() -> None:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    all_three()  # one recovers; fenced calls then wait while guards hold open calls again
    assert sum(admitted) == 0 and set(refusals) <= {
        "USAGE_LIMITS_RECOVERING",
        "USAGE_LIMITS_UNAVAILABLE",
    }, (admitted, refusals)
    clock.advance(HOLD_AGAIN_SECONDS)
    all_three()
    ledger.flush()
    after = [g.stats()["epochs_written"] - w for g, w in zip(guards, written)]
    assert sum(after) == 1, after  # exactly one guard recovered
    assert sum(admitted) == 2, (admitted, refusals)  # 0.80 used: two calls fit, no more
    assert used(guards[0]) == DAY_COST
    billed = sum(g["cost_micros"] for g in ledger.query(group_by=["user"]))
    assert billed == DAY_COST


def test_request_rules_are_not_fenced_unless_configured(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    plain = ug.Guard(policy("requests", 100), store=store(redis_server, "r1"), clock=clock)
    fenced = ug.Guard(
        policy("requests", 100, fenced_metrics=["requests"]),
        store=store(redis_server, "r2"),
        clock=clock,
    )
    for guard in (plain, fenced):
        call(guard)
    redis_server.restart()
    assert refused_reason(fenced) == "USAGE_LIMITS_RECOVERING"
    reconnect(plain)
    call(plain)  # as before: the request count starts over


def test_a_first_start_on_an_empty_store_adopts(redis_server: RedisServer) -> None:
    guard = ug.Guard(policy(), store=store(redis_server, "adopt"))
    call(guard)
    assert guard.stats()["epochs_written"] == 1
    other = ug.Guard(policy(), store=store(redis_server, "adopt"))
    call(other)  # a second guard trusts the epoch the first wrote
    assert other.stats()["epochs_written"] == 0
    assert used(other) == 2 * CALL_COST


def test_memory_store_needs_no_fence() -> None:
    guard = ug.Guard(policy())
    call(guard)
    assert isinstance(guard.recover(attest=True), str)  # nothing to lift: state dies with it
    assert guard.stats()["recovering"] == 0


def test_cli_recover_lifts_the_fence(redis_server: RedisServer) -> None:
    guard = ug.Guard(policy(), store=store(redis_server, "cli"))
    call(guard)
    redis_server.restart()
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
    base = [sys.executable, "-m", "usage_guard.cli", "recover", "--redis", redis_server.url]
    base += ["--slot-groups"] if SLOT_GROUPS else []
    no_attest = subprocess.run([*base, "--prefix", "cli"], capture_output=True, text=True)
    assert no_attest.returncode == 2 and "--attest" in no_attest.stderr
    done = subprocess.run(
        [*base, "--prefix", "cli", "--attest"], capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("recovered: new epoch ")
    call(guard)


@pytest.mark.parametrize("kind", ["call", "batch part"])
def test_a_lost_counter_a_bill_recreates_stays_fenced(
    redis_server: RedisServer, clock: ug.ManualClock, kind: str
) -> None:
    """The counter is deleted while a call is open; that call's bill adds its use and so
    recreates the key, holding only that one bill. The loss must not hide behind it: the next
    call is still fenced, until a recovery (a new generation) lifts it. A batch's part bills
    through settle_parts.lua, which must see the loss and mark the key as settle.lua does."""
    prefix = "rec-" + kind[0]
    guard = ug.Guard(policy(), store=store(redis_server, prefix), clock=clock)
    for _ in range(3):
        call(guard)
    if kind == "call":
        ticket = guard.admit("alice", "m", prompt_tokens=50, max_tokens=50)
        bill: Any = lambda: ticket.bill(input_tokens=50, output_tokens=50, wait=True)  # noqa: E731
    else:
        batch = guard.admit_batch(
            "alice", "m", [{"custom_id": "r0", "prompt_tokens": 50, "max_tokens": 50}]
        )
        bill = lambda: batch.bill_part("r0", 50, 50)  # noqa: E731
    keys = redis_server.cli("--scan", "--pattern", pattern(prefix, "c")).split()
    assert len(keys) == 1
    redis_server.cli("del", keys[0])
    assert bill() is not None
    assert redis_server.cli("hget", keys[0], "u").strip() == str(CALL_COST)
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
    guard.recover(attest=True)
    call(guard)
    assert used(guard) == 2 * CALL_COST


def test_a_counter_only_a_batch_part_bill_wrote_is_fenced_when_lost(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    """A bucket that only a batch part's bill ever wrote (no call read it since) is listed
    for the fence as a bill's is: lost, it fences the next call."""
    guard = ug.Guard(policy(), store=store(redis_server, "onlyp"), clock=clock)
    batch = guard.admit_batch(
        "alice", "m", [{"custom_id": "r0", "prompt_tokens": 50, "max_tokens": 50}]
    )
    assert batch.bill_part("r0", 50, 50) is not None
    keys = redis_server.cli("--scan", "--pattern", pattern("onlyp", "c")).split()
    assert len(keys) == 1
    redis_server.cli("del", keys[0])
    assert refused_reason(guard) == "USAGE_LIMITS_RECOVERING"
