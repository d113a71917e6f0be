"""The core's threads leave asynchronous signals to the host's threads.

Python runs signal handlers in the main thread, and learns of a signal there only when the
signal interrupts that thread. A SIGTERM the kernel delivered to one of the core's threads
(the tokio runtime's, the ledger writer's, the gateway's) left a `multiprocessing.Pool` worker
whose main thread waited for the task-queue lock blocked for good: the usage_guard SIGTERM
handler never ran, the worker never ended and `Pool.terminate()` waited for it forever (the
test command hung in tests_py/store/test_redis_store.py). Every thread the core starts now blocks
those signals, so the kernel can only deliver them to the host's threads."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from redis_harness import BUDGET_POLICY, LAYOUTS, RedisServer, watching, with_model_total

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads each thread's mask from /proc (Linux)"
)

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD)

# Starts every kind of thread the core has: the shared runtime's (a Redis store), the ledger
# writer's and the gateway's serving threads; then prints each thread's name and blocked mask.
THREADS = textwrap.dedent(
    """
    import os, sys, time
    import usage_guard as ug
    policy = ug.Policy.from_dict({
        "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
        "limits": {"direct": [{"user": "alice", "model": "m",
                   "rules": [{"metric": "tokens", "amount": 1000, "window": "day"}]}]},
    })
    guard = ug.Guard(policy, store=ug.RedisStore(sys.argv[1], "signals"),
                     ledger=ug.SqliteLedger(sys.argv[2]))
    guard.admit("alice", "m", prompt_tokens=1, max_tokens=1).bill(
        input_tokens=1, output_tokens=1, wait=True)
    gateway = ug.Gateway(guard, "127.0.0.1:0")

    def threads():
        for tid in sorted(os.listdir("/proc/self/task")):
            name = open(f"/proc/self/task/{tid}/comm").read().strip()
            status = open(f"/proc/self/task/{tid}/status").read().splitlines()
            mask = next(line.split()[1] for line in status if line.startswith("SigBlk:"))
            yield tid == str(os.getpid()), name, mask

    # Until the serving threads have started and named themselves (a thread still being
    # made is named after the process, and glibc blocks every signal in it meanwhile).
    for _ in range(500):
        now = list(threads())
        process = next(name for main, name, _ in now if main)
        if sum(name == process for _, name, _ in now) == 1 and any(
            name == "usage-guard-gat" for _, name, _ in now
        ):
            break
        time.sleep(0.01)
    for main, name, mask in now:
        print(main, name, mask)
    gateway.shutdown()
    gateway.wait()
    """
)


def test_every_thread_of_the_core_blocks_the_signals_the_host_handles(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", THREADS, redis_server.url, str(tmp_path / "l.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    threads = [line.split() for line in out.splitlines()]
    ours = [(name, int(mask, 16)) for main, name, mask in threads if name.startswith("usage-guard")]
    names = {name for name, _ in ours}
    # comm is cut at 15 characters: usage-guard (runtime), usage-guard-led(ger), -gat(eway).
    assert {"usage-guard", "usage-guard-led", "usage-guard-gat"} <= names, threads
    for name, mask in ours:
        for sig in HANDLED:
            assert mask & (1 << (sig - 1)), f"{name} leaves {sig.name} unblocked: {mask:#x}"
    main = [int(mask, 16) for is_main, _, mask in threads if is_main == "True"]
    assert main == [0], "the host's main thread keeps every signal"


def _policy(layout: str) -> dict[str, object]:
    """`BUDGET_POLICY`, with a Model Total on the layouts other than the shared one (a second
    group each call touches, the counter a leasing store leases)."""
    return BUDGET_POLICY if layout == "shared" else with_model_total(BUDGET_POLICY, "gpt-5", 10**6)


def _wait_on(lock_url: str, layout: str, lock: object, ready: object) -> None:
    """A child that made a guard on Redis (the core's threads run), billed once (leased: its
    lease still held) and then waits in a C call (a lock the parent holds), as an idle `Pool`
    worker waits for the task queue."""
    import usage_guard as ug

    store = ug.RedisStore(lock_url, "sig", **LAYOUTS[layout])
    guard = ug.Guard(ug.Policy.from_dict(_policy(layout)), store=store)
    guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10).bill(
        input_tokens=10, output_tokens=1, wait=True
    )
    assert store.lease_state()["leases"] == (1 if layout == "leased" else 0)
    ready.set()  # type: ignore[attr-defined]
    lock.acquire()  # type: ignore[attr-defined]


def _counted(url: str, layout: str) -> list[tuple[int, int]]:
    """(used, reserved) of alice's budget and, on the layouts with one, of the Model Total."""
    import usage_guard as ug

    guard = ug.Guard(
        ug.Policy.from_dict(_policy(layout)), store=ug.RedisStore(url, "sig", **watching(layout))
    )
    usage = guard.usage("alice", "gpt-5")
    return [(c["used"], c["reserved"]) for c in usage["rules"] + usage["ceilings"]]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_child_waiting_in_a_lock_ends_on_sigterm(redis_server: RedisServer, layout: str) -> None:
    """Each child ends by SIGTERM; its exit flush gave its lease (leased) back, so what the
    children billed is all the counters hold."""
    ctx = multiprocessing.get_context("spawn")
    for _ in range(3):
        lock, ready = ctx.Lock(), ctx.Event()
        lock.acquire()
        child = ctx.Process(target=_wait_on, args=(redis_server.url, layout, lock, ready))
        child.start()
        try:
            assert ready.wait(60), "the child made its guard"
            time.sleep(0.05)  # into the lock's wait
            child.terminate()
            child.join(20)
            assert child.exitcode == -signal.SIGTERM, "the child ended by SIGTERM"
        finally:
            if child.exitcode is None:
                child.kill()
                child.join()
    counters = 1 if layout == "shared" else 2
    assert _counted(redis_server.url, layout) == [(3 * 11, 0)] * counters


# A main thread inside a C call that retries its wait after a signal (glibc's `system()`
# waits for its child again on EINTR): a Python-level handler would run only when the call
# returns. The core's handler ends the process at once, the ledger row written first.
IN_C_WAIT = textwrap.dedent(
    """
    import ctypes, sys
    import usage_guard as ug
    guard = ug.Guard(ug.Policy.from_dict({"models": {"m": {"display_name": "M"}}}),
                     ledger=ug.SqliteLedger(sys.argv[1]))
    guard.admit("alice", "m", prompt_tokens=1, max_tokens=1).bill(input_tokens=1, output_tokens=1)
    print("billed", flush=True)
    ctypes.CDLL(None).system(("echo $$ > " + sys.argv[2] + "; exec sleep 120").encode())
    """
)


def test_sigterm_ends_a_main_thread_asleep_in_a_c_call_after_the_flush(tmp_path: Path) -> None:
    ledger, sleeper = tmp_path / "l.db", tmp_path / "sleep.pid"
    child = subprocess.Popen(
        [sys.executable, "-c", IN_C_WAIT, str(ledger), str(sleeper)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "billed"
        for _ in range(200):  # until the shell wrote its pid: the main thread is in system()
            if sleeper.exists() and sleeper.read_text().strip():
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        assert child.wait(30) == -signal.SIGTERM, "ended by SIGTERM, not when the C call returned"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if sleeper.exists() and sleeper.read_text().strip():
            try:
                os.kill(int(sleeper.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
    import usage_guard as ug

    rows = ug.SqliteLedger(str(ledger)).query(user="alice")
    assert sum(r["requests"] for r in rows) == 1, "the queued ledger row was written first"


# Python 3.12+ warns at each fork() of a multi-threaded process (it counts the OS threads):
# the package starts no thread of its own until the core starts one (SIGTERM's exit thread
# starts with the first), so a memory-store guard without a ledger leaves one thread.
ONE_THREAD = textwrap.dedent(
    """
    import os
    import usage_guard as ug
    guard = ug.Guard(ug.Policy.from_dict({"models": {"m": {"display_name": "M"}}}))
    guard.admit("alice", "m", prompt_tokens=1, max_tokens=1).bill(input_tokens=1, output_tokens=1)
    print(len(os.listdir("/proc/self/task")))
    """
)


def test_importing_the_package_starts_no_thread() -> None:
    out = subprocess.run(
        [sys.executable, "-c", ONE_THREAD], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip() == "1"
