"""What issue 34's suggested layout would cost Redis per carried admission, with its logic:
a probe, not the store. `benches/lua_floor.py` prices a layout's commands alone; this runs a
script that does the carried 6-rule admission's work on that layout — settle the previous
call (give its holds back if it landed, add its use, mark it settled), read every counter
(its bucket, the previous bucket of a sliding window, its live holds, dropping expired ones),
check each limit, place the holds, write the new ticket's record and answer the fresh
values — under valgrind's callgrind, like `benches/functions_cost.py`, and prints
instructions per call beside the store's own carried script measured the same way, and how
many of the probe's went to the commands themselves (`scriptCall`) and to parsing numbers
(`strtod`, under Lua's `tonumber`).

The layout: one hash per owner and window (for the six rules of `benches/admit_bill.py`,
six hashes: each window is a different one), holding `u<bucket start>` per bucket, `e`
(retain-until) and `r<minute>` (holds expiring then) as fields; ticket records as today.
What the probe leaves out, so the store on that layout would do more than it does (its
figure is one lean way of writing it, not a prediction): the epoch fence (its check,
registry and marks), fill marks, the known-values checks of `reserve_known.lua` (previous
buckets that grew, sources passed over), batches and slot groups' bookkeeping.

A second probe does the same work on a packed layout: each counter one string of
little-endian doubles (its bucket start, use, the previous bucket's use, retain-until, the
number of holds, then each hold's minute and amount), read with `GET`, decoded and encoded
with the `struct` library Redis bundles, written with `SET` (`KEEPTTL` unless its retention
moved); the call's numbers come as one packed argument and the answer goes back as one packed
string. So no hash fields pass through Lua as strings and no number goes through `tonumber`.
It leaves out what the first probe leaves out.

Run: .venv/bin/python benches/layout_probe.py [N]   (default 300; needs valgrind, redis-py)
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import redis  # noqa: E402
from functions_cost import run as store_cost  # noqa: E402
from lua_floor import under_callgrind  # noqa: E402

# KEYS: the new ticket's record, the settled ticket's record, one hash per counter.
# ARGV: now, minute, the settled call's minute, settled_until, n, then per counter: bucket
# field, previous bucket field ('' none), hold, limit ('' none), carried, give-back, use added,
# retain-until.
PROBE = """
local now, minute = tonumber(ARGV[1]), ARGV[2]
local hold_until = tonumber(minute) * 60000
local back_field = 'r' .. ARGV[3]
local field = 'r' .. minute
local n = tonumber(ARGV[5])
local mark = redis.call('GET', KEYS[2])
local landed = mark and string.sub(mark, 1, 1) == 'h'
local out, writes = {-1}, {}
for c = 1, n do
  local a = 5 + (c - 1) * 8
  local key, bucket, previous = KEYS[2 + c], ARGV[a + 1], ARGV[a + 2]
  local flat = redis.call('HGETALL', key)
  local used, before, held, until_ms = 0, 0, 0, 0
  local values, dead = {}, nil
  for i = 1, #flat, 2 do
    local name, value = flat[i], flat[i + 1]
    local kind = string.byte(name, 1)
    if kind == 114 then -- r<minute>
      if tonumber(string.sub(name, 2)) * 60000 > now then
        values[name] = tonumber(value)
      else
        dead = dead or {}
        dead[#dead + 1] = name
      end
    elseif name == bucket then
      used = tonumber(value)
    elseif name == previous then
      before = tonumber(value)
    elseif name == 'e' then
      until_ms = tonumber(value)
    end
  end
  if dead then
    redis.call('HDEL', key, unpack(dead))
  end
  local set = {}
  if landed and values[back_field] then
    values[back_field] = math.max(values[back_field] + tonumber(ARGV[a + 6]), 0)
    set[#set + 1] = back_field
    set[#set + 1] = values[back_field]
  end
  used = used + tonumber(ARGV[a + 7])
  set[#set + 1] = bucket
  set[#set + 1] = used
  for _, v in pairs(values) do
    held = held + v
  end
  local hold, limit = tonumber(ARGV[a + 3]), ARGV[a + 4]
  if limit ~= '' then
    local counted, cap = used + held + tonumber(ARGV[a + 5]), tonumber(limit)
    if counted >= cap or hold > cap - counted then
      out[1] = c - 1
    end
  end
  local retain = tonumber(ARGV[a + 8])
  writes[c] = {key, set, hold, retain > until_ms and retain, values}
  out[2 * c], out[2 * c + 1] = used, held
  out[1 + 2 * n + c] = before
end
for c = 1, n do
  local key, set, hold, retain, values = unpack(writes[c])
  if out[1] == -1 and hold > 0 then
    set[#set + 1] = field
    set[#set + 1] = (values[field] or 0) + hold
    out[2 * c + 1] = out[2 * c + 1] + hold
  end
  if retain then
    set[#set + 1] = 'e'
    set[#set + 1] = string.format('%d', retain)
  end
  redis.call('HSET', key, unpack(set))
  if retain then
    redis.call('PEXPIRE', key, retain - now)
  end
end
redis.call('SET', KEYS[2], (landed and 's' or 'n') .. ARGV[4], 'PX', 300000)
if out[1] == -1 then
  redis.call('SET', KEYS[1], 'h' .. string.format('%d', hold_until), 'PX', hold_until - now)
end
return out
"""

# The six counters of admit_bill.SIX_RULES as (hash key, bucket length s, sliding, hold
# per call, use per call).
COUNTERS = [
    ("{b6}:w:mt:-:-:gpt-5:d", 86400, False, 5200, 1900),
    ("{b6}:w:pa:alice:-:-:w", 604800, False, 41600, 9375),
    ("{b6}:w:pa:alice:-:-:s3600", 3600, True, 1, 1),
    ("{b6}:w:pa:alice:-:-:mo", 2592000, False, 5200, 1900),
    ("{b6}:w:pm:alice:-:gpt-5:d", 86400, False, 5200, 1900),
    ("{b6}:w:pm:alice:-:gpt-5:s600", 600, True, 1, 1),
]


# KEYS: the new ticket's record, the settled ticket's record, one string per counter.
# ARGV[1]: packed doubles: now, minute, the settled call's minute, settled_until, n, then per
# counter: bucket start, previous bucket start (-1 none), hold, limit (0 none), carried,
# give-back, use added, retain-until. ARGV[2]: n. Answers the packed doubles {code, used and
# held per counter, the previous bucket's use per counter}.
PACKED = """
local n = tonumber(ARGV[2])
local v = {struct.unpack('<' .. string.rep('d', 5 + 8 * n), ARGV[1])}
local now, minute, back, settled_until = v[1], v[2], v[3], v[4]
local hold_until = minute * 60000
local mark = redis.call('GET', KEYS[2])
local landed = mark and string.byte(mark, 1) == 104 -- 'h'
local out, states = {-1}, {}
for c = 1, n do
  local a = 5 + (c - 1) * 8
  local bucket, previous, hold, limit = v[a + 1], v[a + 2], v[a + 3], v[a + 4]
  local blob = redis.call('GET', KEYS[2 + c])
  local start, used, before, until_ms, nh = bucket, 0, 0, 0, 0
  local holds = {}
  if blob then
    start, used, before, until_ms, nh = struct.unpack('<ddddd', blob)
    if nh > 0 then
      local h = {struct.unpack('<' .. string.rep('d', 2 * nh), blob, 41)}
      for i = 1, 2 * nh, 2 do
        if h[i] * 60000 > now then
          holds[#holds + 1] = h[i]
          holds[#holds + 1] = h[i + 1]
        end
      end
    end
    if start ~= bucket then
      before = (start == previous) and used or 0
      used, start = 0, bucket
    end
  end
  local held, at, at_back = 0, nil, nil
  for i = 1, #holds, 2 do
    if holds[i] == back then at_back = i end
    if holds[i] == minute then at = i end
  end
  if landed and at_back then
    local left = holds[at_back + 1] + v[a + 6]
    holds[at_back + 1] = left > 0 and left or 0
  end
  for i = 2, #holds, 2 do
    held = held + holds[i]
  end
  used = used + v[a + 7]
  if limit > 0 then
    local counted = used + held + v[a + 5]
    if counted >= limit or hold > limit - counted then
      out[1] = c - 1
    end
  end
  states[c] = {start, used, before, until_ms, holds, at, hold, v[a + 8]}
  out[2 * c], out[2 * c + 1] = used, held
  out[1 + 2 * n + c] = before
end
for c = 1, n do
  local s = states[c]
  local holds, at, hold, retain = s[5], s[6], s[7], s[8]
  if out[1] == -1 and hold > 0 then
    if at then
      holds[at + 1] = holds[at + 1] + hold
    else
      holds[#holds + 1] = minute
      holds[#holds + 1] = hold
    end
    out[2 * c + 1] = out[2 * c + 1] + hold
  end
  local nh = #holds / 2
  local blob = struct.pack('<ddddd' .. string.rep('d', 2 * nh), s[1], s[2], s[3],
    math.max(retain, s[4]), nh, unpack(holds))
  if retain > s[4] then
    redis.call('SET', KEYS[2 + c], blob, 'PX', retain - now)
  else
    redis.call('SET', KEYS[2 + c], blob, 'KEEPTTL')
  end
end
redis.call('SET', KEYS[2], (landed and 's' or 'n') .. string.format('%d', settled_until),
  'PX', 300000)
if out[1] == -1 then
  redis.call('SET', KEYS[1], 'h' .. string.format('%d', hold_until), 'PX', hold_until - now)
end
return struct.pack('<' .. string.rep('d', #out), unpack(out))
"""


def call_numbers(i: int) -> tuple[int, list[tuple[int, int, int, int, int, int, int]]]:
    """Call i's time, and per counter of COUNTERS: its bucket start, the previous bucket's
    start (-1: not a sliding window), hold, limit, give-back, use added, retain-until."""
    now = 1796645827868 + i * 500
    rows = []
    for _key, length, sliding, hold, use in COUNTERS:
        bucket = now // 1000 // length * length
        # holds that differ call to call, as real ones do; the give-back is the previous call's
        held, hold = (hold + ((i - 1) % 7) * 10, hold + (i % 7) * 10) if hold > 1 else (hold, hold)
        retain = (bucket + length) * 1000 + 86_400_000
        previous = bucket - length if sliding else -1
        give, added = (-held, use) if i else (0, 0)
        rows.append((bucket, previous, hold, 9000000000000, give, added, retain))
    return now, rows


def in_function(listing: str, name: str, calls: int) -> float | None:
    """What callgrind's inclusive `listing` gives function `name`, per call."""
    found = re.search(r"([\d,]+) \(\s*[\d.]+%\)\s+\S*:" + name + r"\b", listing)
    return int(found.group(1).replace(",", "")) / calls if found else None


def probe_packed(calls: int) -> float:
    """Instructions per carried admission of the packed probe, `calls` calls 0.5 s apart;
    checks the last answer's uses and holds."""
    answers = []

    def drive(client: redis.Redis) -> None:
        sha = client.script_load(PACKED)
        for i in range(calls):
            now, rows = call_numbers(i)
            minute, back = (now + 300_000) // 60_000, (now - 500 + 300_000) // 60_000
            keys = [f"{{b6}}:t:t-{i}", f"{{b6}}:t:t-{i - 1}"]
            keys += [c[0].replace(":w:", ":p:") for c in COUNTERS]
            numbers = [now, minute, back, now + 300_000, len(COUNTERS)]
            for bucket, previous, hold, limit, give, use, retain in rows:
                numbers += [bucket, previous, hold, limit, 0, give, use, retain]
            packed = struct.pack("<" + "d" * len(numbers), *numbers)
            answers.append(client.evalsha(sha, len(keys), *keys, packed, len(COUNTERS)))

    total, listing = under_callgrind(drive)
    last = struct.unpack("<" + "d" * (len(answers[-1]) // 8), answers[-1])
    _, rows = call_numbers(calls - 1)
    assert last[0] == -1, last
    for c, (_b, _p, hold, _l, _g, use, _r) in enumerate(rows):
        # every earlier call billed `use`; the last holds `hold`, not billed yet
        assert last[1 + 2 * c] == use * (calls - 1) and last[2 + 2 * c] == hold, (c, last)
    for name in ("scriptCall", "strtod"):
        part = in_function(listing, name, calls)
        if part is not None:
            print(f"  of the packed probe's, in {name}: {part:,.0f} per call")
    return total / calls


def probe(calls: int) -> float:
    """Instructions per carried admission of the probe, `calls` calls 0.5 s apart."""

    def drive(client: redis.Redis) -> None:
        sha = client.script_load(PROBE)
        for i in range(calls):
            now, rows = call_numbers(i)
            minute, back = (now + 300_000) // 60_000, (now - 500 + 300_000) // 60_000
            keys = [f"{{b6}}:t:t-{i}", f"{{b6}}:t:t-{i - 1}"] + [c[0] for c in COUNTERS]
            args = [now, minute, back, now + 300_000, len(COUNTERS)]
            for bucket, previous, hold, limit, give, use, retain in rows:
                before = f"u{previous}" if previous >= 0 else ""
                args += [f"u{bucket}", before, hold, limit, 0, give, use, retain]
            client.evalsha(sha, len(keys), *keys, *args)

    total, listing = under_callgrind(drive)
    for name in ("scriptCall", "strtod"):
        part = in_function(listing, name, calls)
        if part is not None:
            print(f"  of the probe's, in {name}: {part:,.0f} per call")
    return total / calls


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    layout = probe(calls)
    packed = probe_packed(calls)
    store = store_cost(calls)
    print(f"{'probe, one hash per owner and window':>40}: {layout:>10,.0f} instructions per call")
    print(f"{'probe, packed strings':>40}: {packed:>10,.0f} instructions per call")
    for way, instructions in store.items():
        print(f"{'the store today, ' + way:>40}: {instructions:>10,.0f} instructions per call")
    print(f"probe / the store as a function: {layout / store['function']:.3f}")
    print(f"packed probe / the store as a function: {packed / store['function']:.3f}")


if __name__ == "__main__":
    main()
