"""Many threads and asyncio tasks on one small budget, on one guard: never more held plus
billed than the amount, every refusal a real refusal, every ticket settled once."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
import usage_guard as ug

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "context_window": 400000,
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}

AMOUNT = 10_000
THREADS = 8
CALLS_PER_THREAD = 120
TASKS = 240
USERS = [f"u{i}" for i in range(16)]

POLICY = {
    "models": {"gpt-5": GPT5},
    "limits": {
        "public": [
            {"model": "gpt-5", "shared": [{"metric": "tokens", "amount": AMOUNT, "window": "day"}]}
        ],
    },
}


@dataclass
class Tally:
    """What the callers saw, guarded by a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    admitted: int = 0
    billed_tokens: int = 0
    bills: int = 0
    releases: int = 0
    refusals: list[ug.UsageLimitError] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def problem(self, text: str) -> None:
        with self.lock:
            self.wrong.append(text)


def plan_call(rng: random.Random) -> tuple[str, int, int]:
    return rng.choice(USERS), rng.randint(10, 200), rng.randint(50, 800)


def check_ticket(ticket: ug.Ticket, prompt: int, max_tokens: int, tally: Tally) -> int:
    """Checks the ceiling and returns the output tokens the call may use."""
    ceiling = ticket.ceiling
    if ticket.source != {"type": "public", "id": "gpt-5"}:
        tally.problem(f"source {ticket.source}")
    if ceiling["tokens"] != ticket.reserved.get("tokens"):
        tally.problem(f"ceiling {ceiling} vs reserved {ticket.reserved}")
    if ceiling["tokens"] != prompt + ceiling["max_output_tokens"]:
        tally.problem(f"ceiling {ceiling} does not add up for prompt {prompt}")
    if not 0 < ceiling["max_output_tokens"] <= max_tokens:
        tally.problem(f"max_output_tokens {ceiling['max_output_tokens']} for {max_tokens}")
    return int(ceiling["max_output_tokens"])


def settled_result(
    ticket: ug.Ticket, first: Optional[dict[str, Any]], output: int, prompt: int, tally: Tally
) -> None:
    if first is None or first["input_tokens"] != prompt or first["output_tokens"] != output:
        tally.problem(f"bill returned {first}")
    if ticket.bill(input_tokens=prompt, output_tokens=output) is not None:
        tally.problem("a second bill was taken")
    if ticket.release() is not False:
        tally.problem("a release after bill was taken")


def refusal_ok(error: BaseException, tally: Tally) -> None:
    if not isinstance(error, ug.UsageLimitError):
        tally.problem(f"not a refusal: {error!r}")
        return
    if error.unavailable or error.reason not in (
        "USAGE_LIMIT_REACHED",
        "USAGE_LIMIT_DOES_NOT_FIT",
        # the room is held by the other workers' calls in progress, not used
        "USAGE_LIMIT_HELD",
    ):
        tally.problem(f"refusal {error.reason}: {error}")
    if (error.limit_type, error.metric, error.amount) != ("public", "tokens", AMOUNT):
        tally.problem(f"refused by {error.limit_type} {error.metric} {error.amount}")
    with tally.lock:
        tally.refusals.append(error)


def thread_worker(guard: ug.Guard, seed: int, tally: Tally, start: threading.Barrier) -> None:
    rng = random.Random(seed)
    start.wait()
    for _ in range(CALLS_PER_THREAD):
        user, prompt, max_tokens = plan_call(rng)
        try:
            ticket = guard.admit(user, "gpt-5", prompt_tokens=prompt, max_tokens=max_tokens)
        except Exception as error:  # every refusal must be a UsageLimitError
            refusal_ok(error, tally)
            continue
        tally.add(admitted=1)
        cap = check_ticket(ticket, prompt, max_tokens, tally)
        if rng.random() < 0.25:
            if ticket.release() is not True:
                tally.problem("first release not taken")
            if ticket.bill(input_tokens=prompt, output_tokens=0) is not None:
                tally.problem("bill after release was taken")
            tally.add(releases=1)
            continue
        output = rng.randint(0, min(cap, 60))
        first = ticket.bill(input_tokens=prompt, output_tokens=output)
        settled_result(ticket, first, output, prompt, tally)
        tally.add(bills=1, billed_tokens=prompt + output)


async def task_worker(guard: ug.Guard, seed: int, tally: Tally) -> None:
    rng = random.Random(seed)
    for _ in range(3):
        user, prompt, max_tokens = plan_call(rng)
        try:
            ticket = await guard.admit_async(
                user, "gpt-5", prompt_tokens=prompt, max_tokens=max_tokens
            )
        except Exception as error:
            refusal_ok(error, tally)
            await asyncio.sleep(0)
            continue
        tally.add(admitted=1)
        cap = check_ticket(ticket, prompt, max_tokens, tally)
        await asyncio.sleep(0)  # the call "runs" while other tasks admit
        if rng.random() < 0.25:
            if await ticket.release_async() is not True:
                tally.problem("first async release not taken")
            tally.add(releases=1)
            continue
        output = rng.randint(0, min(cap, 60))
        first = await ticket.bill_async(input_tokens=prompt, output_tokens=output)
        if await ticket.bill_async(input_tokens=prompt, output_tokens=output) is not None:
            tally.problem("a second async bill was taken")
        if first is None or first["output_tokens"] != output:
            tally.problem(f"async bill returned {first}")
        tally.add(bills=1, billed_tokens=prompt + output)


def shared_rule(guard: ug.Guard, user: str = "u0") -> dict[str, Any]:
    [rule] = guard.usage(user, "gpt-5")["rules"]
    assert (rule["limit_type"], rule["amount"]) == ("public", AMOUNT)
    return rule


@pytest.mark.parametrize("n_guards", [1, 4], ids=["one-guard", "four-guards-one-store"])
def test_threads_and_tasks_never_overspend_one_budget(n_guards: int) -> None:
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    store = ug.MemoryStore()
    policy = ug.Policy.from_dict(POLICY)
    guards = [ug.Guard(policy, store=store, clock=clock) for _ in range(n_guards)]
    guard = guards[0]
    tally = Tally()
    done = threading.Event()
    samples: list[int] = []
    over: list[dict[str, Any]] = []

    def sampler() -> None:
        pick = random.Random(7)
        while not done.is_set():
            try:
                rule = shared_rule(guard, pick.choice(USERS))
            except BaseException as error:  # reported by the main thread
                over.append({"error": repr(error)})
                return
            samples.append(rule["used"] + rule["reserved"])
            if rule["used"] + rule["reserved"] > AMOUNT or rule["left"] < 0:
                over.append(rule)

    start = threading.Barrier(THREADS + 1)
    threads = [
        threading.Thread(target=thread_worker, args=(guards[seed % n_guards], seed, tally, start))
        for seed in range(THREADS)
    ]
    watcher = threading.Thread(target=sampler)
    watcher.start()
    for t in threads:
        t.start()

    async def tasks() -> None:
        start.wait()
        await asyncio.gather(
            *(task_worker(guards[i % n_guards], 1_000 + i, tally) for i in range(TASKS))
        )

    asyncio.run(tasks())
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive()
    done.set()
    watcher.join(timeout=30)

    assert tally.wrong == []
    assert over == []
    assert len(samples) > 10
    assert max(samples) <= AMOUNT
    # The budget was contended: some calls got in, and some were really refused.
    attempts = THREADS * CALLS_PER_THREAD + TASKS * 3
    assert tally.admitted + len(tally.refusals) == attempts
    assert tally.admitted > 20 and len(tally.refusals) > 20
    assert tally.admitted == tally.bills + tally.releases
    # At the end nothing is held, and what was billed is exactly what tickets billed.
    rule = shared_rule(guard)
    assert rule["reserved"] == 0
    assert rule["used"] == tally.billed_tokens
    assert tally.billed_tokens <= AMOUNT
    stats = {k: sum(g.stats()[k] for g in guards) for k in guard.stats()}
    assert stats["admitted"] == tally.admitted
    assert stats["refused"] == len(tally.refusals)
    assert (stats["billed"], stats["released"]) == (tally.bills, tally.releases)
    # A refusal of USAGE_LIMIT_REACHED means nothing was left when it was decided.
    reached = [e for e in tally.refusals if e.reason == "USAGE_LIMIT_REACHED"]
    assert all(str(e).startswith("Public use of GPT-5 has used its 10,000 tokens") for e in reached)
    held = [e for e in tally.refusals if e.reason == "USAGE_LIMIT_HELD"]
    assert all("held by calls in progress" in str(e) for e in held)


def test_bill_and_release_race_settles_each_ticket_once() -> None:
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock)
    rounds = 200
    outcomes: list[tuple[Optional[dict[str, Any]], bool]] = []
    for _ in range(rounds):
        ticket = guard.admit("u1", "gpt-5", prompt_tokens=5, max_tokens=20)
        gate = threading.Barrier(2)
        result: dict[str, Any] = {}

        def bill(t: ug.Ticket = ticket, g: threading.Barrier = gate, r: dict = result) -> None:
            g.wait()
            r["bill"] = t.bill(input_tokens=5, output_tokens=1)

        def release(t: ug.Ticket = ticket, g: threading.Barrier = gate, r: dict = result) -> None:
            g.wait()
            r["release"] = t.release()

        pair = [threading.Thread(target=bill), threading.Thread(target=release)]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        outcomes.append((result["bill"], result["release"]))
        assert ticket.settled
    # Exactly one of the two won each race.
    assert all((b is not None) != r for b, r in outcomes)
    bills = sum(1 for b, _ in outcomes if b is not None)
    rule = shared_rule(guard)
    assert rule["reserved"] == 0
    assert rule["used"] == 6 * bills
    stats = guard.stats()
    assert (stats["billed"], stats["released"]) == (bills, rounds - bills)
