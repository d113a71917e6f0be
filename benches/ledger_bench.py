"""Rows per second each ledger sustains from Python `bill` at full speed.

Run: .venv/bin/python benches/ledger_bench.py [--seconds 3] [--threads 4] [--pg URL]

Each run bills from `--threads` threads (admit + bill on the in-memory store) for `--seconds`,
then flushes; the rate is rows committed / (billing time + flush). Without `--pg` a throwaway
PostgreSQL server is started (initdb + pg_ctl in a temp directory, fsync on, as the `postgres`
user when run as root) and stopped afterwards.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Callable, Optional

import usage_guard as ug

USERS = 8
POLICY = {
    "models": {
        "gpt-5": {
            "provider": "openai",
            "max_output_tokens": 128000,
            "prices": {"input": 1.25, "output": 10.0},
        }
    },
    "limits": {
        "direct": [
            {
                "user": f"u{i}",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 10**15, "window": "day"}],
            }
            for i in range(USERS)
        ]
    },
}


def run(ledger: Optional[Any], seconds: float, threads: int) -> tuple[int, float, float]:
    """Rows billed, bill rate (rows/s while billing), committed rate (rows/s incl. flush)."""
    guard = ug.Guard(ug.Policy.from_dict(POLICY), ledger=ledger)
    stop = threading.Event()
    counts = [0] * threads

    def bill(n: int) -> None:
        user = f"u{n % USERS}"
        while not stop.is_set():
            t = guard.admit(user, "gpt-5", prompt_tokens=10, max_tokens=10)
            t.bill(input_tokens=10, output_tokens=5)
            counts[n] += 1

    workers = [threading.Thread(target=bill, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    billed_at = time.perf_counter()
    guard.close()
    done = time.perf_counter()
    rows = sum(counts)
    if ledger is not None:
        assert ledger.query(group_by=[])[0]["requests"] == rows
    return rows, rows / (billed_at - start), rows / (done - start)


def start_postgres() -> tuple[str, Callable[[], None]]:
    tools = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    find = lambda name: next(  # noqa: E731
        (os.path.join(d, name) for d in tools if os.path.exists(os.path.join(d, name))),
        shutil.which(name),
    )
    initdb, pg_ctl = find("initdb"), find("pg_ctl")
    if not initdb or not pg_ctl:
        raise SystemExit("no initdb/pg_ctl: pass --pg URL")
    root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if root else []
    tmp = tempfile.mkdtemp(prefix="ug-bench-pg-")
    if root:
        shutil.chown(tmp, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = os.path.join(tmp, "data")
    subprocess.run(
        prefix + [initdb, "-D", data, "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1"
    log = os.path.join(tmp, "log")
    subprocess.run(
        prefix + [pg_ctl, "-D", data, "-w", "-l", log, "-o", opts, "start"],
        check=True,
        capture_output=True,
    )

    def stop() -> None:
        subprocess.run(prefix + [pg_ctl, "-D", data, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    return f"postgres://postgres@127.0.0.1:{port}/postgres", stop


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--pg", default=None)
    args = ap.parse_args()
    stop_pg: Callable[[], None] = lambda: None  # noqa: E731
    url = args.pg
    if url is None:
        url, stop_pg = start_postgres()
    tmp = tempfile.mkdtemp(prefix="ug-bench-ledger-")
    n = iter(range(100))

    def fresh_pg() -> str:
        # One table per run: a schema per run would need the ledger to know it, so truncate.
        subprocess.run(
            [
                shutil.which("psql") or "psql",
                url,
                "-qc",
                "DROP TABLE IF EXISTS usage_ledger",
            ],
            capture_output=True,
        )
        return url

    cases: list[tuple[str, Callable[[], Optional[Any]]]] = [
        ("no ledger", lambda: None),
        ("SQLite file", lambda: ug.SqliteLedger(os.path.join(tmp, f"{next(n)}.db"))),
        (
            "SQLite file, durable",
            lambda: ug.SqliteLedger(os.path.join(tmp, f"{next(n)}.db"), durable=True),
        ),
        ("PostgreSQL", lambda: ug.PostgresLedger(fresh_pg())),
        ("PostgreSQL, durable", lambda: ug.PostgresLedger(fresh_pg(), durable=True)),
    ]
    try:
        print(f"{args.threads} threads billing for {args.seconds:.0f} s each")
        print(f"{'ledger':<22} {'rows':>9} {'bill rows/s':>12} {'committed rows/s':>17}")
        for name, make in cases:
            ledger = make()
            rows, bill_rate, committed = run(ledger, args.seconds, args.threads)
            print(f"{name:<22} {rows:>9} {bill_rate:>12.0f} {committed:>17.0f}")
    finally:
        stop_pg()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
