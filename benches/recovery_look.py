"""How long a recovery of a grouped store takes with N groups listed (docs/redis.md, "What a
recovery marks"): the store's list of groups and each group's copy of the epoch are written
straight to one redis-server, then `Guard.recover(attest=True)` runs twice; prints its time,
how many groups it marked held, and Redis's µs per look (`INFO commandstats`, HMGET).

Run: .venv/bin/python benches/recovery_look.py [--groups N ...]

It starts its own redis-server on a free port (tests_py/redis_harness.py) and stops it by
pid. The times move with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))

import usage_guard as ug  # noqa: E402
from redis_harness import GROUPS_POLICY, RedisServer  # noqa: E402

PREFIX = "look"
MARKED = (
    "local n = 0 for _, v in ipairs(redis.call('HVALS', KEYS[1])) do "
    "if string.sub(v, 1, 1) == '~' then n = n + 1 end end return n"
)


def run_id(server: RedisServer) -> str:
    info = server.cli("INFO", "server").splitlines()
    return next(line.split(":", 1)[1].strip() for line in info if line.startswith("run_id:"))


def one(groups: int) -> None:
    server = RedisServer()
    try:
        store = ug.RedisStore(server.url, PREFIX, slot_groups=True)
        guard = ug.Guard(ug.Policy.from_dict(GROUPS_POLICY), store=store)
        guard.recover(attest=True)  # the store's epoch, which the copies carry
        home = "{" + PREFIX + ":2}"
        generation = server.cli("HGET", f"{home}:epoch", "g").strip()
        rid = run_id(server)
        # entries as a reservation lists them: with the time they last (ten days on)
        until = int(time.time() * 1000) + 10 * 86_400_000
        lines = []
        for i in range(groups):
            tag = "{" + f"{PREFIX}:2:u:x{i}" + "}"
            lines.append(f"HSET {tag}:epoch g {generation} r {rid} t 0 h {until}\r\n")
            lines.append(f"HSET {home}:groups {tag} {generation}@{until}\r\n")
        pipe = ["redis-cli", "-p", str(server.port), "--pipe"]
        subprocess.run(pipe, input="".join(lines).encode(), capture_output=True, check=True)
        server.cli("CONFIG", "RESETSTAT")
        for _ in range(2):
            started = time.perf_counter()
            guard.recover(attest=True)
            took = (time.perf_counter() - started) * 1000
            print(f"{groups:>7} groups listed: recovery {took:7.0f} ms")
        stats = server.cli("INFO", "commandstats").splitlines()
        hmget = next((s for s in stats if s.startswith("cmdstat_hmget:")), "")
        per_call = hmget.split("usec_per_call=")[1].split(",")[0] if hmget else "-"
        marked = server.cli("EVAL", MARKED, "1", f"{home}:groups").strip()
        print(f"{groups:>7} groups listed: {marked} marked held; Redis {per_call} µs a look")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[0, 10_000, 100_000])
    for groups in parser.parse_args().groups:
        one(groups)


if __name__ == "__main__":
    main()
