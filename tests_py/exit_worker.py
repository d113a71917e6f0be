"""A worker process for tests_py/exits/test_exits.py: a module-level guard on Redis (or the memory
store) with a SQLite ledger, made before any fork; each call admits and bills once, and
returns at once (the bill still queued for the background, its ledger row still queued for
the writer). Then the process ends by the path named on the command line.

    REDIS_PID=pid python exit_worker.py PATH REDIS_URL|memory PREFIX LEDGER_PATH [LAYOUT]

LAYOUT is one of `redis_harness.LAYOUTS` (default "shared"); the layouts other than the shared
one add a Model Total (a second group each call touches, the counter a leasing store leases).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import usage_guard as ug
from redis_harness import LAYOUTS, with_model_total

PATH, URL, PREFIX, LEDGER = sys.argv[1:5]
LAYOUT = sys.argv[5] if len(sys.argv) > 5 else "shared"
CHILDREN = 4
# billiard's pool workers sleep 1 s before they exit: a longer stall there. The store's
# timeout outlasts a chain of stalls (an admission waits out the stalls of the calls ahead).
BILLIARD = PATH.startswith("billiard")
STALL_S = 4.0 if BILLIARD else 0.4
TIMEOUT_S = 6.0
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
if LAYOUT != "shared":
    POLICY = with_model_total(POLICY, "m", 1_000_000)
store = (
    ug.MemoryStore()
    if URL == "memory"
    else ug.RedisStore(URL, prefix=PREFIX, timeout=TIMEOUT_S, **LAYOUTS[LAYOUT])
)
guard = ug.Guard(ug.Policy.from_dict(POLICY), store=store, ledger=ug.SqliteLedger(LEDGER))


def stall() -> None:
    """Redis (its pid in `REDIS_PID`) stops answering for `STALL_S` from now: bills sent
    meanwhile stay in flight, and the ones after them queued in this process, until after the
    process was told to end."""
    pid = os.environ.get("REDIS_PID")
    if pid:
        # Only the latest stall resumes Redis: an earlier one's end must not cut it short.
        token = f"{os.getpid()}-{time.monotonic_ns()}"
        os.kill(int(pid), signal.SIGSTOP)
        with open(f"stall.{token}", "w") as f:
            f.write(token)
        os.replace(f"stall.{token}", "stall.token")  # whole: a resume never reads half of one
        resume = f'sleep {STALL_S}; [ "$(cat stall.token)" = {token} ] && kill -CONT {pid}'
        subprocess.Popen(["sh", "-c", resume])


def call(n: object = None) -> int:
    """Call `n`: two tickets of 5 tokens, billed in the background while Redis stalls
    (the first bill in flight, the second queued behind it); returns at once. On billiard
    only the last task stalls (stalls of 2.5 s on two workers would chain past the store's
    timeout)."""
    tickets = [guard.admit("alice", "m", prompt_tokens=5, max_tokens=1) for _ in range(2)]
    if LAYOUT == "leased":  # the calls took from a slice of the Model Total
        assert store.lease_state()["leases"] == 1, store.lease_state()
    if not BILLIARD or n == CHILDREN - 1:
        stall()
    tickets[0].bill(5, 0)
    time.sleep(0.02)  # past the drain's linger: this bill is sent alone, the next one waits
    tickets[1].bill(5, 0)
    return os.getpid()


def call_then_exit() -> None:
    call()
    sys.exit(0)


def call_then_wait() -> None:
    """Bills, says so on stdout, and waits to be ended (SIGTERM)."""
    call()
    print("billed", flush=True)
    while True:
        time.sleep(1)


def processes(target: object) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    children = [ctx.Process(target=target) for _ in range(CHILDREN)]
    for p in children:
        p.start()
    for p in children:
        p.join(30)
        assert p.exitcode == 0, p.exitcode


def terminated_processes() -> None:
    """Children that bill and then wait; the parent ends them with `terminate()` (SIGTERM)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    ready = ctx.Queue()

    def child() -> None:
        call()
        ready.put(os.getpid())
        while True:
            time.sleep(1)

    children = [ctx.Process(target=child) for _ in range(CHILDREN)]
    for p in children:
        p.start()
    for _ in children:
        ready.get(timeout=30)
    for p in children:
        p.terminate()
    for p in children:
        p.join(30)
        assert p.exitcode == -15, p.exitcode


def pool(maxtasksperchild: int | None) -> None:
    """`with Pool(...)`: its exit terminates the workers (SIGTERM) once the map is done."""
    import multiprocessing as mp

    with mp.get_context("fork").Pool(2, maxtasksperchild=maxtasksperchild) as p:
        p.map(call, range(CHILDREN), chunksize=1)


def pool_closed() -> None:
    """`close()` and `join()`: the workers leave their loop and return."""
    import multiprocessing as mp

    p = mp.get_context("fork").Pool(2)
    p.map(call, range(CHILDREN), chunksize=1)
    p.close()
    p.join()


def executor() -> None:
    import concurrent.futures
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as ex:
        list(ex.map(call, range(CHILDREN)))


def billiard_pool(maxtasksperchild: int | None) -> None:
    import billiard  # type: ignore[import-untyped]

    p = billiard.Pool(2, maxtasksperchild=maxtasksperchild)
    p.map(call, range(CHILDREN), chunksize=1)
    p.close()
    p.join()


def billiard_terminated() -> None:
    import billiard

    p = billiard.Pool(2)
    p.map(call, range(CHILDREN), chunksize=1)
    p.terminate()
    p.join()


def main() -> None:
    # The parent's own call: the connection, runtime and writer are live at the fork.
    call()
    if PATH == "exit":
        return
    if PATH == "sys.exit":
        sys.exit(3)
    if PATH == "sigterm":
        call_then_wait()
    paths = {
        "process": lambda: processes(call),
        "process-sys.exit": lambda: processes(call_then_exit),
        "process-terminated": terminated_processes,
        "pool": lambda: pool(None),
        "pool-maxtasks": lambda: pool(1),
        "pool-closed": pool_closed,
        "executor": executor,
        "billiard": lambda: billiard_pool(None),
        "billiard-maxtasks": lambda: billiard_pool(1),
        "billiard-terminated": billiard_terminated,
    }
    paths[PATH]()


if __name__ == "__main__":
    main()
