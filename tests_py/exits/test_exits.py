"""A bill that returned is never lost, whatever way the worker ends (issue 31, item 1).

Each test runs tests_py/exit_worker.py: a module-level guard on a real redis-server (or the
memory store) with a SQLite ledger, made before any fork; the parent and each child admit
and bill once and return at once, so every bill is still queued for the background and every
ledger row still queued for the writer when the process ends. The process then ends by one
path: normal exit, `sys.exit`, SIGTERM under the default handler, or the children of
`multiprocessing` (`Process`, `Pool` with and without `maxtasksperchild`, ended by
`terminate()` or by `close()`), `concurrent.futures.ProcessPoolExecutor` and billiard's pool
(Celery prefork). Every call is counted once in Redis (no hold left) and in the ledger."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import usage_guard as ug
from redis_harness import LAYOUTS, RedisServer, watching, with_model_total

WORKER = str(Path(__file__).resolve().parents[1] / "exit_worker.py")
CHILDREN = 4  # exit_worker.CHILDREN
POLICY = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [{"metric": "tokens", "amount": 1_000_000, "window": "day"}],
            }
        ]
    },
}

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")


def _start(
    path: str, redis: RedisServer | None, tmp: Path, layout: str = "shared"
) -> tuple[subprocess.Popen[str], str, str]:
    prefix, ledger = f"exit-{uuid.uuid4().hex[:8]}", str(tmp / "ledger.db")
    url, env = "memory", dict(os.environ)
    if redis is not None:
        url, env["REDIS_PID"] = redis.url, str(redis.pid)
    worker = subprocess.Popen(
        [sys.executable, WORKER, path, url, prefix, ledger, layout],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(tmp),
        env=env,
    )
    return worker, prefix, ledger


def _counted(
    redis: RedisServer, prefix: str, ledger: str, layout: str = "shared"
) -> tuple[int, int, int]:
    """Calls counted in Redis (tokens used / 10), tokens still held, and ledger rows (two a
    call), once the worker has ended. A stall the worker left ends on its own (ending it
    early would let a process still exiting send what it should have flushed). On the layouts
    with a Model Total, it counts what the person's rule counts: every lease was given back,
    the use billed against it told to the store."""
    policy = POLICY if layout == "shared" else with_model_total(POLICY, "m", 1_000_000)
    store = ug.RedisStore(redis.url, prefix=prefix, timeout=8, **watching(layout))
    usage = ug.Guard(ug.Policy.from_dict(policy), store=store).usage("alice", "m")
    rule = usage["rules"][0]
    if layout != "shared":
        model = usage["ceilings"][0]
        assert (model["used"], model["reserved"]) == (rule["used"], rule["reserved"]), usage
    rows = ug.SqliteLedger(ledger).query(user="alice")
    return rule["used"] // 10, rule["reserved"], sum(r["requests"] for r in rows)


def _run(
    path: str, redis: RedisServer, tmp: Path, code: int = 0, layout: str = "shared"
) -> tuple[int, int, int]:
    worker, prefix, ledger = _start(path, redis, tmp, layout)
    assert worker.wait(60) == code
    return _counted(redis, prefix, ledger, layout)


# The process's own exits, on every layout (with slot groups and leased, the call touches the
# Model Total's group too, and the leased one holds a slice that its exit must give back).
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_normal_exit_flushes(redis: RedisServer, tmp_path: Path, layout: str) -> None:
    assert _run("exit", redis, tmp_path, layout=layout) == (1, 0, 2)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sys_exit_flushes(redis: RedisServer, tmp_path: Path, layout: str) -> None:
    assert _run("sys.exit", redis, tmp_path, code=3, layout=layout) == (1, 0, 2)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sigterm_under_the_default_handler_flushes_then_ends_by_sigterm(
    redis: RedisServer, tmp_path: Path, layout: str
) -> None:
    worker, prefix, ledger = _start("sigterm", redis, tmp_path, layout)
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "billed"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == -signal.SIGTERM, "the process still ends by SIGTERM"
    assert _counted(redis, prefix, ledger, layout) == (2, 0, 4)


@pytest.mark.parametrize("before", ["mine", "signal.SIG_IGN"])
def test_a_sigterm_handler_the_host_installed_is_left_alone(before: str) -> None:
    code = (
        "import signal\n"
        "def mine(signum, frame): pass\n"
        f"signal.signal(signal.SIGTERM, {before})\n"
        "import usage_guard\n"
        f"assert signal.getsignal(signal.SIGTERM) is {before}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_sigterm_handler_is_installed_only_over_the_default() -> None:
    code = (
        "import signal\n"
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL\n"
        "import usage_guard\n"
        "assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


PATHS = [
    "process",
    "process-sys.exit",
    "process-terminated",
    "pool",
    "pool-maxtasks",
    "pool-closed",
    "executor",
]
# On the other layouts, one path of each way a child ends: `os._exit` after the target
# (multiprocessing's finalizers), SIGTERM from `terminate()`, a pool's exit terminating its
# workers (two calls each, one stalled while the next was queued).
LAYOUT_PATHS = ["process", "process-terminated", "pool"]


@pytest.mark.parametrize(
    ("path", "layout"),
    [(path, "shared") for path in PATHS]
    + [(path, layout) for layout in LAYOUTS if layout != "shared" for path in LAYOUT_PATHS],
)
def test_the_children_of_multiprocessing_flush(
    path: str, layout: str, redis: RedisServer, tmp_path: Path
) -> None:
    """The parent's call and each child's: 1 + 4, none lost, no hold left (before: 1 to 3 of
    5 with `Process`, the others' holds left for 15 minutes)."""
    counted = _run(path, redis, tmp_path, layout=layout)
    assert counted == (1 + CHILDREN, 0, 2 * (1 + CHILDREN))


BILLIARD_SKIP = pytest.mark.skipif(
    importlib.util.find_spec("billiard") is None, reason="needs billiard"
)


@BILLIARD_SKIP
@pytest.mark.parametrize(
    ("path", "layout"),
    [
        ("billiard", "shared"),
        # Seen once on the wheel's 3.9 suite: billiard reported the recycled worker lost
        # (WorkerLostError, exitcode 155: EX_RECYCLE) before the job's answer; not explained.
        pytest.param(
            "billiard-maxtasks",
            "shared",
            marks=pytest.mark.xfail(
                sys.version_info < (3, 10), reason="billiard recycling on 3.9", strict=False
            ),
        ),
        # On the other layouts, the pool's workers leaving by themselves and ended by SIGTERM
        # (the path where a lease was last found left held: `lease/exit_tests.rs`).
        *(("billiard", layout) for layout in LAYOUTS if layout != "shared"),
        *(("billiard-terminated", layout) for layout in LAYOUTS),
    ],
)
def test_the_workers_of_billiards_pool_flush(
    path: str, layout: str, redis: RedisServer, tmp_path: Path
) -> None:
    counted = _run(path, redis, tmp_path, layout=layout)
    assert counted == (1 + CHILDREN, 0, 2 * (1 + CHILDREN))


@pytest.mark.parametrize("path", ["exit", "process", "pool"])
def test_ledger_rows_of_a_guard_alive_at_exit_are_written_on_the_memory_store(
    path: str, tmp_path: Path
) -> None:
    worker, _, ledger = _start(path, None, tmp_path)
    assert worker.wait(60) == 0
    rows = ug.SqliteLedger(ledger).query(user="alice")
    expected = 2 if path == "exit" else 2 * (1 + CHILDREN)
    assert sum(r["requests"] for r in rows) == expected


DAEMONS = """
import atexit, os, sys, threading, time
# A host's exit hook that runs after the package's (registered first, so it runs last): the
# daemon threads bill on after the package's exit flush; then the process ends at once, with
# whatever the writer had not committed yet.
def end_now():
    time.sleep(0.1)
    os._exit(0)
atexit.register(end_now)
import usage_guard as ug
guard = ug.Guard(ug.Policy.from_dict({"models": {"m": {}}}), ledger=ug.SqliteLedger(sys.argv[1]))
acked = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
def bill_on():
    while True:
        ticket = guard.admit("d", "m", prompt_tokens=1, max_tokens=1)
        ticket.bill(1, 1)
        os.write(acked, (ticket.id + "\\n").encode())  # acknowledged: it returned
for _ in range(3):
    threading.Thread(target=bill_on, daemon=True).start()
time.sleep(0.3)
sys.exit(0)
"""


def test_bills_daemon_threads_return_while_the_interpreter_ends_are_written(
    tmp_path: Path,
) -> None:
    """Daemon threads bill on while the interpreter ends (here through a host's exit hook
    that runs after the package's): a bill that returns after the exit flush began waits for
    its row's commit (it was queued after the flush, and lost: thousands of acknowledged
    rows a run)."""
    import sqlite3

    for run in range(3):
        ledger, acked = str(tmp_path / f"l{run}.db"), str(tmp_path / f"acked{run}")
        done = subprocess.run(
            [sys.executable, "-c", DAEMONS, ledger, acked], capture_output=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        with open(acked, encoding="utf-8") as f:
            returned = set(f.read().split())
        with sqlite3.connect(ledger) as db:
            written = {row[0] for row in db.execute("SELECT ticket_id FROM usage_ledger")}
        assert returned and not returned - written, (run, len(returned - written))
