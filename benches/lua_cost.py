"""What one usage_guard script costs inside Redis, in CPU instructions: a figure that does not
move with the machine's load (the µs of `INFO commandstats` do, by 2× on a shared VM).

It records the scripts of N sync admit + bill calls on the 6-rule path (`benches/admit_bill.py`)
with MONITOR, then replays that exact stream on a redis-server run under valgrind's callgrind,
counting only inside `evalShaCommand`, and prints instructions per script. The scripts are
built from `--lua` (default: this tree's `src/guard/store/lua`), so one captured stream can be
replayed against an edited script to see what an edit saves before building anything.

Run: .venv/bin/python benches/lua_cost.py [--calls N] [--lua DIR ...] [--top N] [--vary]
[--spread SECONDS]
(--top N also prints the N costliest functions of each replay, inclusive, per script;
--time also replays the stream on a plain redis-server, each folder in turn, 5 rounds, and
prints the best round's µs per script from INFO commandstats and the server's main-thread CPU
per script: the goal's unit, though it moves with the machine's load;
--vary asks each call for a different max_tokens, so its holds differ from the last call's as
in real traffic: by default every call is the same, and a carried bill's give-back cancels
the next reservation's hold of the same size;
--spread runs the guard on a manual clock moved that far after each call, so each counter's
holds hash keeps a field per minute its holds expire in, as steady real traffic does.)
Needs `valgrind` (apt-get install valgrind); the build installed in the venv makes the stream.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import redis  # noqa: E402
import usage_guard as ug  # noqa: E402
from admit_bill import SIX_RULES  # noqa: E402
from lua_floor import under_callgrind  # noqa: E402
from redis_harness import RedisServer  # noqa: E402

LUA = os.path.join(os.path.dirname(__file__), "..", "src", "guard", "store", "lua")


def scripts(lua: str) -> dict[str, str]:
    """Each script's text as `src/guard/store/redis/scripts.rs` puts it together."""

    def read(name: str) -> str:
        with open(os.path.join(lua, f"{name}.lua")) as f:
            return f.read()

    common, fence = read("common"), read("fence")
    settle, known = read("settle"), read("reserve_known")
    carried = (
        f"local function settle_one(KEYS, ARGV)\n{settle}\nend\n"
        f"local function reserve_one(KEYS, ARGV)\n{known}\nend\n"
    )

    def fenced(body: str, helpers: str = "") -> str:
        return f"{common}\n{fence}\n{helpers}fence_begin()\n{body}"

    return {
        "read": f"{common}\n{read('read')}",
        "reserve": fenced(read("reserve")),
        "reserve_known": fenced(known),
        "settle": fenced(settle),
        "filled": f"{common}\n{read('filled')}",
        "fill": f"{common}\n{read('fill')}",
        "mark_once": read("mark_once"),
        "raise_until": read("raise_until"),
        "epoch": read("epoch"),
        "settle_parts": fenced(read("settle_parts")),
        "wait_queues": read("wait_queues"),
        "carry": fenced(read("carry"), carried),
    }


def sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def capture(calls: int, vary: bool = False, spread: float = 0.0) -> list[list[bytes]]:
    """The EVALSHA commands of `calls` sync admit + bill, in order (MONITOR); with `vary`,
    each call asks a different max_tokens; with `spread`, on a manual clock moved that many
    seconds after each call."""
    server = RedisServer()
    try:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"MONITOR\r\n")
        chunks: list[bytes] = []
        stop = threading.Event()

        def pump() -> None:
            sock.settimeout(0.2)
            while not stop.is_set():
                try:
                    data = sock.recv(1 << 20)
                except socket.timeout:
                    continue
                if not data:
                    break
                chunks.append(data)

        reader = threading.Thread(target=pump)
        reader.start()
        time.sleep(0.3)
        clock = ug.ManualClock() if spread else None
        store = ug.RedisStore(server.url, "b6", functions=False)
        guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), store=store, clock=clock)
        for i in range(calls):
            max_tokens = 4000 + (i % 97) * 10 if vary else 4000
            guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=max_tokens).bill(1100, 800)
            if clock is not None:
                clock.advance(spread)
        guard.close()
        time.sleep(1.0)
        stop.set()
        reader.join()
        sock.close()
    finally:
        server.stop()
    commands = []
    for line in b"".join(chunks).decode("latin-1").split("\r\n"):
        # a client's command (a script's own commands show as [0 lua])
        found = re.match(r"^\+?[\d.]+ \[\d+ [\d.:]+\] (.*)$", line)
        if not found:
            continue
        tokens = [
            ast.literal_eval('b"' + t + '"')
            for t in re.findall(r'"((?:[^"\\]|\\.)*)"', found.group(1))
        ]
        if tokens and tokens[0].upper() == b"EVALSHA":
            commands.append(tokens)
    return commands


def replay(
    commands: list[list[bytes]], names: dict[str, str], lua: str, top: int = 0
) -> tuple[float, int]:
    """(instructions per script, scripts) for `commands` replayed with the scripts of `lua`
    on a redis-server under callgrind. `names` maps a captured SHA to its script's name.
    With `top`, prints the `top` functions by inclusive instructions per script (where the
    time goes: Lua itself, `redis.call`'s own work, each command)."""
    texts = scripts(lua)

    def drive(client: redis.Redis) -> None:
        for text in texts.values():
            client.script_load(text)
        for command in commands:
            name = names.get(command[1].decode())
            script = sha(texts[name]) if name else command[1].decode()
            client.execute_command("EVALSHA", script, *command[2:])

    total, inclusive = under_callgrind(drive)
    if top:
        print_top(inclusive, top, len(commands))
    return total / len(commands), len(commands)


def replay_timed(commands: list[list[bytes]], names: dict[str, str], lua: str) -> tuple:
    """(µs per script in INFO commandstats, server main-thread CPU µs per script) for
    `commands` replayed with the scripts of `lua` on a fresh plain redis-server."""
    texts = scripts(lua)
    server = RedisServer()
    try:
        client = redis.Redis(port=server.port)
        for text in texts.values():
            client.script_load(text)
        client.config_resetstat()

        def cpu() -> float:
            info = client.info("cpu")
            return float(info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"])

        started = cpu()
        for command in commands:
            name = names.get(command[1].decode())
            script = sha(texts[name]) if name else command[1].decode()
            client.execute_command("EVALSHA", script, *command[2:])
        used = cpu() - started
        stats = client.info("commandstats")["cmdstat_evalsha"]
        return stats["usec"] / stats["calls"], used / len(commands) * 1e6
    finally:
        server.stop()


def print_top(annotated: str, top: int, scripts: int) -> None:
    """The `top` functions of callgrind_annotate's inclusive listing, per script, past the
    ones every instruction counted is under (main, the event loop, `evalShaCommand`…)."""
    shown = 0
    for line in annotated.splitlines():
        found = re.match(r"^\s*([\d,]+) \(\s*([\d.]+)%\)\s+\S*:(\S+)", line)
        if not found or float(found.group(2)) >= 99.9:
            continue
        per_script = int(found.group(1).replace(",", "")) / scripts
        print(f"  {per_script:>12,.0f}  {found.group(3)}")
        shown += 1
        if shown == top:
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="admit + bill calls captured")
    parser.add_argument("--lua", action="append", help="script folders to replay with")
    parser.add_argument(
        "--top", type=int, default=0, help="print the N costliest functions (inclusive)"
    )
    parser.add_argument(
        "--built-from", default=LUA, help="the script folder of the installed build (its SHAs)"
    )
    parser.add_argument(
        "--vary", action="store_true", help="a different max_tokens per call (holds differ)"
    )
    parser.add_argument(
        "--spread", type=float, default=0.0, help="seconds of a manual clock between calls"
    )
    parser.add_argument(
        "--time", action="store_true", help="also the µs per script on a plain redis-server"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    commands = capture(args.calls, args.vary, args.spread)
    names = {sha(text): name for name, text in scripts(args.built_from).items()}
    kinds: dict[str, int] = {}
    for command in commands:
        name = names.get(command[1].decode(), "?")
        kinds[name] = kinds.get(name, 0) + 1
    print(f"captured {len(commands)} scripts of {args.calls} admit + bill: {kinds}")
    for lua in args.lua or [LUA]:
        per_script, count = replay(commands, names, lua, args.top)
        print(
            f"{os.path.relpath(lua)}: {per_script:,.0f} instructions per script ({count} scripts)"
        )
    if args.time:
        best: dict[str, tuple] = {}
        for _ in range(5):  # the folders in turn, so the machine's load falls on each alike
            for lua in args.lua or [LUA]:
                timed = replay_timed(commands, names, lua)
                best[lua] = min(best.get(lua, timed), timed)
        for lua, (usec, cpu) in best.items():
            print(
                f"{os.path.relpath(lua)}: {usec:.1f} µs per script (INFO commandstats), "
                f"{cpu:.1f} µs of the server's main-thread CPU (best of 5 rounds)"
            )


if __name__ == "__main__":
    main()
