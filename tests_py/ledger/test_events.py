"""Events from Python (issue 13.4): `guard.events()` as an async iterator beside
`guard.on_event`, the audit log on SQLite and PostgreSQL with `usage-guard audit`, generic
rules on calls with no user and on batches with attributes, and docs/policy.md's events
example run as written."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import usage_guard as ug
from postgres_harness import pg_url  # noqa: F401  (pg_url: a fixture)
from usage_guard import types

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"gpt-4o": {"provider": "openai", "prices": {"input": 2.5, "output": 10.0}}}
SOFT = {
    "name": "soft",
    "count_by": ["agent"],
    "amount": "requests",
    "budget": 10,
    "window": "minute",
    "warn_at": [0.1, 0.2, 0.3, 0.4, 0.5],
}
HALT = {
    "name": "runaway",
    "count_by": ["session"],
    "amount": "requests",
    "budget": 2,
    "window": "minute",
    "action": "halt_session",
    "action_duration_seconds": 600,
}
POLICY: dict[str, Any] = {"models": MODELS, "rules": [SOFT, HALT]}


def keys(typed_dict: Any) -> frozenset[str]:
    return frozenset(typed_dict.__required_keys__) | frozenset(typed_dict.__optional_keys__)


def admit(guard: ug.Guard, n: int, **attributes: str) -> list[ug.Ticket]:
    return [
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=attributes) for _ in range(n)
    ]


def test_the_iterator_gets_what_on_event_gets(make_guard: Callable[..., ug.Guard]) -> None:
    guard = make_guard(POLICY)
    heard: list[types.Event] = []
    guard.on_event(heard.append)

    async def run() -> tuple[list[types.Event], list[types.Event]]:
        one, two = guard.events(), guard.events()
        held = [
            await guard.admit_async("alice", "gpt-4o", prompt_tokens=10, attributes={"agent": "a"})
            for _ in range(3)
        ]
        assert len(held) == 3
        return [await one.__anext__() for _ in range(3)], [await two.__anext__() for _ in range(3)]

    one, two = asyncio.run(run())
    assert one == heard and two == heard
    assert [e["threshold"] for e in heard] == [0.1, 0.2, 0.3]
    assert set(heard[0]) == keys(types.Event)
    assert {k: heard[0][k] for k in ("kind", "rule", "principal", "model", "at")} == {
        "kind": "soft_threshold",
        "rule": "soft",
        "principal": "alice",
        "model": "gpt-4o",
        "at": "2026-11-30T08:00:00Z",
    }
    assert len({e["id"] for e in heard}) == 3


def test_a_slow_reader_loses_the_oldest_and_counts_them(
    make_guard: Callable[..., ug.Guard],
) -> None:
    guard = make_guard(POLICY)
    small = guard.events(buffer=2)
    held = admit(guard, 5, agent="a")

    async def read(n: int) -> list[float]:
        return [(await small.__anext__())["threshold"] for _ in range(n)]

    assert asyncio.run(read(2)) == [0.4, 0.5]
    assert small.dropped == 3 and len(held) == 5


def test_waiting_never_blocks_the_loop_and_close_ends_the_iteration(
    make_guard: Callable[..., ug.Guard],
) -> None:
    guard = make_guard(POLICY)

    async def run() -> tuple[list[str], int]:
        got: list[str] = []
        arrived = asyncio.Event()
        stream = guard.events()

        async def consume() -> None:
            async for event in stream:
                got.append(event["kind"])
                arrived.set()

        consumer = asyncio.create_task(consume())
        # The consumer waits on an empty stream; the loop keeps running other work.
        ticks = 0
        for _ in range(20):
            await asyncio.sleep(0)
            ticks += 1
        assert not consumer.done()
        held = await guard.admit_async(
            "alice", "gpt-4o", prompt_tokens=10, attributes={"agent": "a"}
        )
        await arrived.wait()
        held.release()
        guard.close()
        await asyncio.wait_for(consumer, 30)
        assert stream.closed
        return got, ticks

    got, ticks = asyncio.run(run())
    assert got == ["soft_threshold"] and ticks == 20


def produce_events(guard: ug.Guard, clock: ug.ManualClock) -> list[types.Event]:
    """Three soft thresholds, then a halt of a session of a call with no user."""
    heard: list[types.Event] = []
    guard.on_event(heard.append)
    held = admit(guard, 3, agent="a")
    clock.advance(seconds=30)
    held += [guard.admit(None, "gpt-4o", prompt_tokens=10, attributes={"session": "s9"})]
    held += [guard.admit(None, "gpt-4o", prompt_tokens=10, attributes={"session": "s9"})]
    with pytest.raises(ug.UsageLimitError):
        guard.admit(None, "gpt-4o", prompt_tokens=10, attributes={"session": "s9"})
    guard.close()
    return heard


def assert_audited(ledger: Any, heard: list[types.Event]) -> None:
    rows = ledger.audit()
    assert [r["kind"] for r in rows] == ["soft_threshold"] * 3 + ["halt_session"]
    for row, event in zip(rows, heard):
        assert set(row) == keys(types.AuditEntry)
        same = ("id", "at", "kind", "rule", "counter", "threshold", "principal", "model")
        assert {k: row[k] for k in same} == {k: event[k] for k in same}
    assert rows[0]["detail"] == {
        "amount": "requests",
        "unit": "requests",
        "used": 1,
        "budget": 10,
        "action": "block",
        "would_refuse": False,
    }
    assert rows[3]["principal"] is None and "s9" in rows[3]["counter"]
    assert ledger.audit(kind="halt_session") == rows[3:]
    assert ledger.audit(since="2026-11-30T08:00:30Z") == rows[3:]
    assert ledger.audit(limit=2) == rows[2:]
    with pytest.raises(ValueError, match="is not an audit kind; accepted: soft_threshold"):
        ledger.audit(kind="soft")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_events_are_audit_rows_on_sqlite_and_the_cli_lists_them(
    tmp_path: Path, clock: ug.ManualClock
) -> None:
    db = str(tmp_path / "ledger.db")
    ledger = ug.SqliteLedger(db)
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    heard = produce_events(guard, clock)
    assert_audited(ledger, heard)
    # Scripts read JSON lines, people a table.
    lines = cli("audit", "--ledger", db, "--json").stdout.splitlines()
    assert [json.loads(line) for line in lines] == ledger.audit()
    table = cli("audit", "--ledger", f"sqlite:///{db}", "--kind", "halt_session").stdout
    header, row = table.splitlines()
    assert header.split() == ["at", "kind", "rule", "threshold", "principal", "model", "counter"]
    when, kind, rule, threshold, principal, model, _counter = row.split()
    assert [when, kind, rule, threshold, principal, model] == [
        "2026-11-30T08:00:30Z",
        "halt_session",
        "runaway",
        "100%",
        "-",
        "gpt-4o",
    ]
    later = cli("audit", "--ledger", db, "--since", "2026-12-01")
    assert later.stdout == "(no events)\n"
    missing = cli("audit", "--ledger", str(tmp_path / "nope.db"))
    assert missing.returncode == 2 and "no ledger" in missing.stderr


def test_events_are_audit_rows_on_postgres(
    pg_url: Any,  # noqa: F811
    clock: ug.ManualClock,
) -> None:
    ledger = ug.PostgresLedger(pg_url())
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    assert_audited(ledger, produce_events(guard, clock))


def test_rules_count_calls_with_no_user_and_batches_with_attributes(
    make_guard: Callable[..., ug.Guard],
) -> None:
    per_credential = {
        "name": "per credential",
        "count_by": ["credential"],
        "amount": "requests",
        "budget": 2,
        "window": "day",
    }
    guard = make_guard({"models": MODELS, "rules": [per_credential]})
    k1 = {"credential": "k1"}
    held = [guard.admit(None, "gpt-4o", prompt_tokens=10, attributes=k1) for _ in range(2)]
    with pytest.raises(ug.UsageLimitError, match='Rule "per credential"'):
        guard.admit(None, "gpt-4o", prompt_tokens=10, attributes=k1)
    requests = [{"id": i, "prompt_tokens": 10, "max_tokens": 10} for i in ("a", "b")]
    batch = guard.admit_batch("bob", "gpt-4o", requests, attributes={"credential": "k2"})
    with pytest.raises(ug.UsageLimitError, match='Rule "per credential"'):
        guard.admit("bob", "gpt-4o", prompt_tokens=10, attributes={"credential": "k2"})
    with pytest.raises(ValueError, match="attributes"):
        guard.admit_batch("bob", "gpt-4o", requests, attributes={"colour": "red"})
    assert guard.resume_batch(batch.state).state == batch.state
    assert len(held) == 2


def test_the_events_example_of_the_policy_doc_runs_as_written(tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "policy.md").read_text()
    sample = re.search(
        r"<!-- events-sample -->\n```python\n(?P<code>.*?)```\n\n```console\n\$ (?P<cmd>[^\n]+)\n"
        r"(?P<table>.*?)```",
        doc,
        re.S,
    )
    assert sample, "docs/policy.md has no events sample"
    printed = re.search(r"print\(.*\)  # (.*)\n", sample["code"])
    assert printed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", sample["code"]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.stdout == printed[1] + "\n", done.stderr
    program, *args = sample["cmd"].split()
    assert program == "usage-guard"
    shown = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert shown.stdout == sample["table"], shown.stderr
