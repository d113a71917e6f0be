"""Batches survive a crash (issue 10, item 6): each part of a batch settles in one atomic
store step, so a `kill -9` in the middle of `finish()` or of a `bill_part` loop leaves nothing
that a resumed batch cannot settle: nothing stays held, each result counts exactly once. A real
redis-server and real processes killed with SIGKILL; in each store layout (with slot groups
a part also counts on a Model Total in the model's group; leased, that counter is leased)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from redis_harness import LAYOUTS, RedisServer, watching, with_model_total

POLICY: dict[str, Any] = {
    "models": {"gpt-5": {"provider": "openai", "max_output_tokens": 4_000}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 1_000_000_000, "window": "day"}],
            }
        ]
    },
}

MODEL_TOTAL = 10**12


@pytest.fixture(params=list(LAYOUTS))
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _policy(layout: str) -> dict[str, Any]:
    return POLICY if layout == "shared" else with_model_total(POLICY, "gpt-5", MODEL_TOTAL)


def _guard(server: RedisServer, layout: str) -> ug.Guard:
    store = ug.RedisStore(server.url, **LAYOUTS[layout])
    return ug.Guard(ug.Policy.from_dict(_policy(layout)), store=store)


# The child: admits a batch of N parts (10 prompt + 10 output tokens each), writes its state,
# bills the first BILLED parts (10 in, 5 out), says "go" and then either finishes the batch or
# bills every part, until it is killed.
CHILD = """
import json, sys
import usage_guard as ug
url, state_path, then = sys.argv[1], sys.argv[2], sys.argv[5]
n, billed = int(sys.argv[3]), int(sys.argv[4])
policy = ug.Policy.from_dict(json.loads(sys.argv[6]))
guard = ug.Guard(policy, store=ug.RedisStore(url, **json.loads(sys.argv[7])))
reqs = [{"custom_id": f"r{i}", "prompt_tokens": 10, "max_tokens": 10} for i in range(n)]
batch = guard.admit_batch("alice", "gpt-5", reqs)
with open(state_path, "w") as f:
    f.write(batch.state)
for i in range(billed):
    assert batch.bill_part(f"r{i}", 10, 5) is not None
print("go", flush=True)
if then == "finish":
    batch.finish()
else:
    for i in range(n):
        batch.bill_part(f"r{i}", 10, 5)
print("done", flush=True)
sys.stdin.read()
"""


def _keys(server: RedisServer) -> int:
    out = subprocess.run(
        ["redis-cli", "-p", str(server.port), "DBSIZE"], capture_output=True, text=True
    )
    return int(out.stdout.strip() or "0")


def _killed_after_progress(
    server: RedisServer, tmp_path: Path, n: int, billed: int, then: str, layout: str
) -> str:
    """Runs the child until its step after "go" has written to the store, kills it with
    SIGKILL, and returns the batch's state."""
    state = tmp_path / "state.json"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            server.url,
            str(state),
            str(n),
            str(billed),
            then,
            json.dumps(_policy(layout)),
            json.dumps(LAYOUTS[layout]),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        bufsize=0,
    )
    try:
        assert child.stdout is not None
        out = b""
        while b"go\n" not in out:
            chunk = os.read(child.stdout.fileno(), 64)
            assert chunk, f"the child ended before its step: {out!r}"
            out += chunk
        before = _keys(server)
        # Kill once the step has written to the store; a loaded machine may let the child
        # finish its step before a change is seen ("done"): it is killed then all the same.
        while _keys(server) == before and child.poll() is None and b"done" not in out:
            if select.select([child.stdout], [], [], 0)[0]:
                out += os.read(child.stdout.fileno(), 64)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    return state.read_text()


def _rule(guard: ug.Guard) -> tuple[int, int]:
    rule = guard.usage("alice", "gpt-5")["rules"][0]
    return rule["used"], rule["reserved"]


def _model_total(server: RedisServer, layout: str) -> tuple[int, int]:
    """The Model Total's (used, reserved) as a guard that leases nothing reads it."""
    store = ug.RedisStore(server.url, **watching(layout))
    watcher = ug.Guard(ug.Policy.from_dict(_policy(layout)), store=store)
    total = watcher.usage("alice", "gpt-5")["ceilings"][0]
    assert total["amount"] == MODEL_TOTAL, total
    return total["used"], total["reserved"]


def _check_model_total(server: RedisServer, layout: str, person: tuple[int, int]) -> None:
    """With slot groups the Model Total reads what the person's rule reads; leased too, as
    batches never take from a lease (docs/redis.md, "Leases")."""
    if layout != "shared":
        assert _model_total(server, layout) == person


def test_kill_during_finish_then_resume_leaves_nothing_held(
    redis_server: RedisServer, tmp_path: Path, layout: str
) -> None:
    state = _killed_after_progress(redis_server, tmp_path, 4_000, 100, "finish", layout)
    guard = _guard(redis_server, layout)
    used, _ = _rule(guard)
    assert used == 100 * 15
    resumed = guard.resume_batch(state)
    given = resumed.finish()
    assert given <= 3_900
    assert _rule(guard) == (100 * 15, 0)
    assert resumed.finish() == 0
    assert _rule(guard) == (100 * 15, 0)
    # Parts billed before the kill are not billed again; one never billed still counts once.
    assert resumed.bill_part("r0", 10, 5) is None
    assert resumed.bill_part("r3999", 10, 5) is not None
    assert resumed.bill_part("r3999", 10, 5) is None
    assert _rule(guard) == (101 * 15, 0)
    guard.close()
    _check_model_total(redis_server, layout, (101 * 15, 0))


def test_kill_during_bill_part_loop_then_every_part_counts_once(
    redis_server: RedisServer, tmp_path: Path, layout: str
) -> None:
    n = 2_000
    state = _killed_after_progress(redis_server, tmp_path, n, 0, "bill", layout)
    guard = _guard(redis_server, layout)
    resumed = guard.resume_batch(state)
    billed_now = sum(resumed.bill_part(f"r{i}", 10, 5) is not None for i in range(n))
    assert 0 < billed_now < n
    assert _rule(guard) == (n * 15, 0)
    assert resumed.finish() == 0
    assert _rule(guard) == (n * 15, 0)
    guard.close()
    _check_model_total(redis_server, layout, (n * 15, 0))


def test_finish_twice_gives_back_nothing_the_second_time(
    redis_server: RedisServer, layout: str
) -> None:
    a, b = _guard(redis_server, layout), _guard(redis_server, layout)
    reqs = [{"custom_id": f"r{i}", "prompt_tokens": 10, "max_tokens": 10} for i in range(10)]
    batch = a.admit_batch("alice", "gpt-5", reqs)
    assert batch.bill_part("r0", 10, 5) is not None
    assert _rule(a) == (15, 180)
    assert batch.finish() == 9
    assert b.resume_batch(batch.state).finish() == 0
    assert batch.finish() == 0
    assert _rule(a) == (15, 0)
    assert batch.bill_part("r1", 10, 5) is not None  # a late result still counts, once
    assert b.resume_batch(batch.state).bill_part("r1", 10, 5) is None
    assert _rule(a) == (30, 0)
    a.close()
    b.close()
    _check_model_total(redis_server, layout, (30, 0))
