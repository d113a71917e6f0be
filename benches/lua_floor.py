"""The floor under a script's cost in Redis: scripts that only issue a fixed list of commands
(no logic), with the keys and arguments of the carried 6-rule script, counted in CPU
instructions under callgrind like `benches/lua_cost.py`. It says what a data layout costs
before any of the scripts' own Lua runs:

- `empty`: nothing but the call itself with ~130 keys and arguments;
- `current_commands`: the 46 commands the carried 6-rule script issues on today's layout (a
  bucket and a holds hash per counter; docs/redis.md), with no logic between them;
- `per_counter_hash`: a layout with a counter's buckets and holds in one hash (27 commands);
- `one_hash`: every counter of the call in one hash, read once and written once (3 commands);
- `group_window`: issue 34's suggested layout as it falls for this policy: one hash per owner
  and window holding its counters' buckets and holds as fields. The six rules have six
  windows (day, 10 minutes, week for alice; day for the model; hour, month for the
  platform), so that is six hashes, each read once and written once (16 commands);
- `group`: one hash per owner (alice, the model, the platform), every window's buckets and
  holds as fields (10 commands).

With `--units`, what one operation costs inside a script instead: each of `UNITS` repeats
it 100 times (10 for INFO), and the empty script's cost is taken off.

Run: .venv/bin/python benches/lua_floor.py [NAME ...] [--units]
(needs valgrind and redis-server)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))

import redis  # noqa: E402
from redis_harness import _free_port  # noqa: E402

CALLS = 300
KEYS = [f"{{b6}}:c:pa:alice:-:-:k{i}:s3600:1796277600" for i in range(14)] + ["{b6}:epoch"]
ARGS = [str(1796277600000 + i) for i in range(118)]

SCRIPTS = {
    "empty": "return 0",
    "current_commands": """
for c = 1, 6 do
  redis.call('HMGET', KEYS[2 * c], 'u', 'e')
  redis.call('HGETALL', KEYS[2 * c + 1])
end
for c = 1, 6 do redis.call('HINCRBY', KEYS[2 * c + 1], 'r1', 5) end
for c = 1, 6 do redis.call('HINCRBY', KEYS[2 * c + 1], 'r1', -5) end
for c = 1, 6 do
  redis.call('HMGET', KEYS[2 * c], 'e', 'l')
  redis.call('HINCRBY', KEYS[2 * c], 'u', 7)
end
redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], 'h123', 'PX', 60000)
redis.call('GET', KEYS[14]); redis.call('SET', KEYS[14], 's123', 'PX', 60000)
redis.call('HMGET', KEYS[15], 'g', 'r')
redis.call('INFO', 'server')
return 0
""",
    "per_counter_hash": """
for c = 1, 6 do
  redis.call('HGETALL', KEYS[1 + c])
  redis.call('HINCRBY', KEYS[1 + c], 'r1', 5)
  redis.call('HINCRBY', KEYS[1 + c], 'r1', -5)
  redis.call('HINCRBY', KEYS[1 + c], 'u', 7)
end
redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], 'h123', 'PX', 60000)
redis.call('SET', KEYS[14], 's123', 'PX', 60000)
return 0
""",
    "group_window": """
for c = 1, 6 do
  redis.call('HGETALL', KEYS[1 + c])
  redis.call('HSET', KEYS[1 + c], 'u1796277600', 7, 'e', 1796364000000, 'r29937960', 5, 'k', '1')
end
redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], 'h123', 'PX', 60000)
redis.call('GET', KEYS[14]); redis.call('SET', KEYS[14], 's123', 'PX', 60000)
return 0
""",
    "group": """
for g, n in ipairs({3, 1, 2}) do
  local fields = {}
  for c = 1, n do
    local f = 'c' .. c .. ':'
    for _, v in ipairs({f .. 'u1796277600', 7, f .. 'e', 1796364000000, f .. 'r29937960', 5}) do
      fields[#fields + 1] = v
    end
  end
  redis.call('HGETALL', KEYS[1 + g])
  redis.call('HSET', KEYS[1 + g], unpack(fields))
end
redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], 'h123', 'PX', 60000)
redis.call('GET', KEYS[14]); redis.call('SET', KEYS[14], 's123', 'PX', 60000)
return 0
""",
    "one_hash": """
redis.call('HMGET', KEYS[2], 'u1', 'h1', 'u2', 'h2', 'u3', 'h3', 'u4', 'h4', 'u5', 'h5', 'u6', 'h6')
redis.call('HSET', KEYS[2], 'u1', 1, 'h1', 2, 'u2', 3, 'h2', 4, 'u3', 5, 'h3', 6, 'u4', 7,
  'h4', 8, 'u5', 9, 'h5', 10, 'u6', 11, 'h6', 12)
redis.call('SET', KEYS[1], 'h123', 'PX', 60000)
return 0
""",
}

# One operation of a script, repeated: name -> (body, times).
UNITS = {
    "tonumber of a 13-digit argument": (
        "local s = 0 for i = 1, 100 do s = s + tonumber(ARGV[i]) end return 0",
        100,
    ),
    "string.format('%d', n)": (
        "local x for i = 1, 100 do x = string.format('%d', 1796277600000 + i) end return 0",
        100,
    ),
    "'r' .. an argument": ("local x for i = 1, 100 do x = 'r' .. ARGV[i] end return 0", 100),
    "string.sub": ("local x for i = 1, 100 do x = string.sub(ARGV[i], 2) end return 0", 100),
    "a table of two": ("local x for i = 1, 100 do x = {i, i} end return 0", 100),
    "a closure": ("for i = 1, 100 do local function f(a) return a end end return 0", 100),
    "HGET": ("for i = 1, 100 do redis.call('HGET', KEYS[2], 'u') end return 0", 100),
    "HMGET of two fields": (
        "for i = 1, 100 do redis.call('HMGET', KEYS[2], 'u', 'e') end return 0",
        100,
    ),
    "HINCRBY": ("for i = 1, 100 do redis.call('HINCRBY', KEYS[2], 'u', '5') end return 0", 100),
    "INFO server": ("for i = 1, 10 do redis.call('INFO', 'server') end return 0", 10),
    "returning 13 integers": (
        "local t = {} for i = 1, 13 do t[i] = i * 1000 end return t",
        1,
    ),
}


def under_callgrind(
    drive: Callable[[redis.Redis], None], counted: tuple[str, ...] = ("evalShaCommand",)
) -> tuple[int, str]:
    """Starts a redis-server under callgrind, counting inside the functions `counted` only
    (`evalShaCommand`: scripts called by SHA), runs `drive` with a client of it, shuts it
    down, and returns the instructions counted and callgrind_annotate's inclusive listing
    (functions by what they and their callees cost)."""
    port = _free_port()
    out = tempfile.mktemp(prefix="ug-callgrind-")
    toggles = [f"--toggle-collect={name}" for name in counted]
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", *toggles]
        + [f"--callgrind-out-file={out}", "redis-server", "--port", str(port)]
        + ["--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        drive(client)
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        server.wait(timeout=120)
        inclusive = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", out], capture_output=True, text=True
        ).stdout
    finally:
        if server.poll() is None:
            server.kill()
        if os.path.exists(out):
            os.unlink(out)
    total = re.search(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", inclusive)
    assert total, inclusive[:500]
    return int(total.group(1).replace(",", "")), inclusive


def instructions_per_script(body: str) -> float:
    """`body` run CALLS times with KEYS and ARGS, in instructions per call."""

    def drive(client: redis.Redis) -> None:
        sha = client.script_load(body)
        for _ in range(CALLS):
            client.evalsha(sha, len(KEYS), *KEYS, *ARGS)

    return under_callgrind(drive)[0] / CALLS


def main() -> None:
    if "--units" in sys.argv:
        empty = instructions_per_script(SCRIPTS["empty"])
        for name, (body, times) in UNITS.items():
            each = (instructions_per_script(body) - empty) / times
            print(f"{name:>34}: {each:>8,.0f} instructions each")
        return
    for name in sys.argv[1:] or list(SCRIPTS):
        per_script = instructions_per_script(SCRIPTS[name])
        print(f"{name:>18}: {per_script:>10,.0f} instructions per script")


if __name__ == "__main__":
    main()
