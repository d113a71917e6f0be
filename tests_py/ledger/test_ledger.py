"""The usage ledger from Python: rows per billed call, queries, close and exit flushes, the
CLI subcommand, batches, and a restart that keeps the day (subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}

POLICY: dict[str, Any] = {
    "models": {"gpt-5": GPT5},
    "teams": {"research": {"members": ["alice", "bob"]}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 10000, "window": "day"}],
            }
        ],
        "team": [
            {
                "team": "research",
                "model": "gpt-5",
                "shared": [{"metric": "tokens", "amount": 1000000, "window": "day"}],
            }
        ],
    },
}


def spend(guard: ug.Guard, user: str, n: int, inp: int, out: int, **kw: Any) -> None:
    for _ in range(n):
        t = guard.admit(user, "gpt-5", prompt_tokens=inp, max_tokens=out)
        assert t.bill(input_tokens=inp, output_tokens=out, **kw) is not None


def test_rows_are_queried_grouped(clock: ug.ManualClock) -> None:
    ledger = ug.SqliteLedger()
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    assert guard.ledger is ledger
    spend(guard, "alice", 3, 1000, 200)
    spend(guard, "bob", 2, 100, 10, request_id="req-1", metadata={"app": "x"})
    clock.advance(days=1)
    spend(guard, "alice", 1, 10, 5)
    guard.close()
    by_user = guard.ledger.query(group_by=["user"])
    assert [(g["user"], g["requests"], g["tokens"]) for g in by_user] == [
        ("alice", 4, 3615),
        ("bob", 2, 220),
    ]
    team = ledger.query(team="research", group_by=["team", "user"])
    assert team == [
        {
            "team": "research",
            "user": "bob",
            "requests": 2,
            "tokens": 220,
            "input_tokens": 200,
            "cached_input_tokens": 0,
            "output_tokens": 20,
            "reasoning_tokens": 0,
            "cost_micros": 2 * (125 + 100),
            "compute_ms": team[0]["compute_ms"],
        }
    ]
    days = ledger.query(user="alice", since="2026-12-01T00:00:00Z", group_by=["day"])
    assert days == [dict(days[0], day="2026-12-01", requests=1)]
    default = ledger.query()
    assert set(default[0]) >= {"user", "team", "model", "day", "requests", "cost_micros"}
    with pytest.raises(ValueError, match="accepted: user, team, model, day"):
        ledger.query(group_by=["week"])
    assert ledger.pending == (0, 0)


def test_a_ledger_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match="SqliteLedger or a PostgresLedger"):
        ug.Guard(ug.Policy.from_dict(POLICY), ledger="ledger.db")  # type: ignore[arg-type]
    with pytest.raises(ug.LedgerError, match="cannot open"):
        ug.SqliteLedger("/nonexistent-dir/x/ledger.db")


def run_child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


CHILD_SETUP = f"""
import sys, json, time
import usage_guard as ug
POLICY = json.loads({json.dumps(json.dumps(POLICY))})
clock = ug.ManualClock(sys.argv[2])
guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.SqliteLedger(sys.argv[1]))
"""

SPEND_AND_WAIT = (
    CHILD_SETUP
    + """
for _ in range(9):
    t = guard.admit("alice", "gpt-5", prompt_tokens=1000, max_tokens=100)
    t.bill(input_tokens=1000, output_tokens=100)
guard.close()
print("spent", flush=True)
time.sleep(600)
"""
)

SPEND_AND_EXIT = (
    CHILD_SETUP
    + """
for _ in range(9):
    t = guard.admit("alice", "gpt-5", prompt_tokens=1000, max_tokens=100)
    t.bill(input_tokens=1000, output_tokens=100)
# A daemon thread keeps the guard alive through interpreter shutdown, so its ledger is
# never dropped: only the atexit hook can write the rows still queued.
import threading
threading.Thread(target=lambda g=guard: time.sleep(3600), daemon=True).start()
print("spent", flush=True)
sys.exit(0)  # no close()
"""
)

TRY_ALICE = (
    CHILD_SETUP
    + """
print(json.dumps(guard.usage("alice", "gpt-5")["rules"][0]["used"]))
try:
    guard.admit("alice", "gpt-5", prompt_tokens=1500, max_tokens=100)
    print("admitted")
except ug.UsageLimitError as e:
    print("refused", e.reason)
"""
)


@pytest.mark.parametrize("ending", ["killed", "exited"])
def test_a_restart_keeps_the_day(tmp_path: Path, ending: str) -> None:
    db = str(tmp_path / "ledger.db")
    first = run_child(
        SPEND_AND_WAIT if ending == "killed" else SPEND_AND_EXIT, db, "2026-11-30T09:00:00Z"
    )
    assert first.stdout is not None
    assert first.stdout.readline().strip() == "spent"
    if ending == "killed":
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=30) == -signal.SIGKILL
    else:
        assert first.wait(timeout=30) == 0, first.stderr.read() if first.stderr else ""
    second = run_child(TRY_ALICE, db, "2026-11-30T15:00:00Z")
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    used, verdict = out.strip().splitlines()
    assert int(used) == 9900
    assert verdict == "refused USAGE_LIMIT_DOES_NOT_FIT"
    # The next day starts at 0 again.
    third = run_child(TRY_ALICE, db, "2026-12-01T00:30:00Z")
    out, err = third.communicate(timeout=60)
    assert out.strip().splitlines() == ["0", "admitted"], err


def test_cli_usage_prints_groups(tmp_path: Path, clock: ug.ManualClock) -> None:
    db = str(tmp_path / "ledger.db")
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ug.SqliteLedger(db))
    spend(guard, "alice", 2, 1000, 200)
    spend(guard, "bob", 1, 100, 10)
    guard.close()
    cmd = [sys.executable, "-m", "usage_guard.cli", "usage", "--ledger", db]
    out = subprocess.run(
        [*cmd, "--user", "alice", "--since", "2026-11-30", "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 1
    assert rows[0]["user"] == "alice" and rows[0]["day"] == "2026-11-30"
    assert rows[0]["requests"] == 2 and rows[0]["tokens"] == 2400
    table = subprocess.run(
        [*cmd, "--group-by", "team", f"--ledger=sqlite:///{db}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["team", "requests", "tokens"]
    assert lines[1].split()[:3] == ["research", "1", "110"]
    assert lines[2].split()[:3] == ["-", "2", "2,400"]
    bad = subprocess.run([*cmd, "--since", "yesterday"], capture_output=True, text=True)
    assert bad.returncode == 2 and "not a date" in bad.stderr


def test_batch_results_bill_once(clock: ug.ManualClock) -> None:
    ledger = ug.SqliteLedger()
    store = ug.MemoryStore()
    policy = ug.Policy.from_dict(POLICY)
    a = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
    b = ug.Guard(policy, store=store, clock=clock, ledger=ledger)
    reqs = [{"custom_id": f"r{i}", "prompt_tokens": 500, "max_tokens": 500} for i in range(5)]
    batch = a.admit_batch("alice", "gpt-5", reqs)
    assert batch.reserved == {"tokens": 5000}
    other = b.resume_batch(batch.state)
    billed = [
        batch.bill_part("r0", 500, 100),
        other.bill_part("r0", 500, 100),
        other.bill_part("r1", 500, 50, request_id="q1"),
    ]
    assert [x is not None for x in billed] == [True, False, True]
    assert a.usage("alice", "gpt-5")["rules"][0]["reserved"] == 3000
    assert other.finish() == 3
    assert batch.finish() == 0
    rule = a.usage("alice", "gpt-5")["rules"][0]
    assert (rule["used"], rule["reserved"]) == (1150, 0)
    a.close()
    assert ledger.query(group_by=[])[0]["requests"] == 2
    with pytest.raises(ug.UsageLimitError):
        a.admit_batch("alice", "gpt-5", [dict(r, id=f"x{i}") for i, r in enumerate(reqs * 3)])
    with pytest.raises(ValueError, match="unique"):
        a.admit_batch("alice", "gpt-5", reqs * 2)


def test_interpreter_exit_writes_rows_still_queued(tmp_path: Path) -> None:
    """The database is locked while the child bills and exits: its rows are still queued
    when the interpreter ends, and the atexit flush (which waits for the lock) writes them."""
    import sqlite3

    db = str(tmp_path / "ledger.db")
    ug.SqliteLedger(db).close()
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    child = run_child(SPEND_AND_EXIT, db, "2026-11-30T09:00:00Z")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "spent"
    time.sleep(0.5)
    assert child.poll() is None, "the child must still be flushing"
    lock.execute("COMMIT")
    lock.close()
    assert child.wait(timeout=30) == 0
    assert ug.SqliteLedger(db).query(group_by=[])[0]["requests"] == 9


def test_a_closed_ledger_has_nothing_to_flush_at_exit(tmp_path: Path) -> None:
    """A ledger closed by hand is still reached by the exit flush: it succeeds (everything
    was written by the close) instead of logging "the ledger is closed"."""
    child = run_child(
        """
        import logging, sys
        import usage_guard as ug
        logging.basicConfig(level=logging.WARNING)
        ug.SqliteLedger(sys.argv[1]).close()
        kept = ug.SqliteLedger(sys.argv[1] + "-kept")
        kept.close()
        kept.flush()
        print("closed", flush=True)
        """,
        str(tmp_path / "ledger.db"),
    )
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "closed"
    assert "the ledger is closed" not in err, err
    assert "at exit" not in err, err


async def test_async_calls_fill_and_record(clock: ug.ManualClock) -> None:
    ledger = ug.SqliteLedger()
    first = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    spend(first, "alice", 9, 1000, 0)
    # A fresh guard on an empty store, used from asyncio: the fill runs inside admit_async.
    fresh = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    with pytest.raises(ug.UsageLimitError):
        await fresh.admit_async("alice", "gpt-5", prompt_tokens=1500, max_tokens=10)
    t = await fresh.admit_async("alice", "gpt-5", prompt_tokens=500, max_tokens=10)
    await t.bill_async(input_tokens=500, output_tokens=10, request_id="r-async")
    fresh.close()
    rows = ledger.query(user="alice", group_by=["user"])
    assert rows[0]["requests"] == 10 and rows[0]["tokens"] == 9510


def test_cli_usage_on_a_missing_ledger_file_is_an_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    missing = tmp_path / "typo.db"
    done = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", "usage", "--ledger", str(missing)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "no ledger at" in done.stderr
    assert not missing.exists(), "reading usage must not create a ledger"
