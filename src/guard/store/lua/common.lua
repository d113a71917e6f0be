-- Shared by every usage_guard script (prepended to each). A counter bucket is a hash:
--   u         used (integer)
--   s         filled mark (reserved for filling from the logs)
--   e         retain-until, ms on the guard's clock (the counter is gone after it)
--   x         the generation under which it was lost before a bill recreated it (fence.lua)
--   l         a fence generation whose registry lists the bucket as kept at least until e
--             (fence_register_adds), so a bill need not read the registry; keep_until drops
--             it when it moves e
-- A counter's holds (of every bucket) are one hash beside it:
--   r<minute> holds that expire at the start of <minute> (minutes since the epoch)
--   k         present while the epoch fence lists the key (fence.lua): so the hash outlives
--             its last hold given back, and only a lost key is missing. Its value,
--             <generation>:<minute>, says that generation's registry lists the key at least
--             until that minute starts, so a reserve need not read the registry ('1' before)
-- A ticket's record is a string: h<until> its reservation landed and is held;
-- s<until> settled after its reservation landed; n<until> settled, nothing landed.
-- Times come from the caller's clock, never the server's, so a manual clock drives these
-- scripts exactly like the memory store. Amounts stay below 2^53, so Lua numbers are exact.

-- Small whole numbers by their text: the counts and indexes of a call's arguments, and '0',
-- the most common value.
local SMALL = {
  ['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4,
  ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8, ['9'] = 9,
}

-- The number a text argument or reply stands for; a small one by a look-up rather than
-- tonumber (which costs ~2,000 instructions: more than a command's reply field).
local function number_of(text)
  return SMALL[text] or tonumber(text)
end

-- The run_id of the Redis process running the script. A plain search, then the 40 characters
-- a run_id always has (CONFIG_RUN_ID_SIZE): a pattern searched from every position of the
-- ~1.5 kB answer costs more than the INFO command itself, and even one anchored there ~4,000
-- instructions. (epoch.lua reads it the same way: the two must agree.)
-- Kept in RUN_ID once read: an EVALSHA script reads it again at each call, while the
-- function library (scripts.rs) keeps it for the life of the Lua state that loaded it. That
-- state lives in one process's memory (a restarted process makes a new one; a promoted
-- replica runs its own, which read its own run_id), so what it keeps is always this
-- process's.
local RUN_ID = nil
local function run_id()
  if RUN_ID == nil then
    local info = redis.call('INFO', 'server')
    local at = string.find(info, 'run_id:', 1, true)
    RUN_ID = at and string.sub(info, at + 7, at + 46) or false
  end
  return RUN_ID or nil
end

-- The mark a fill writes (filled.lua, fill.lua), and a second mark also taken as filled (or
-- nil): the epoch's `g`, '0' without one. For a slot group's copy of the epoch (`copy`):
-- while the copy is missing or was written by another Redis process, '!<run_id>' (a fill
-- made on this process before the group was joined; a group whose master restarted or
-- failed over is filled again before it is trusted). Once the copy is this process's, its
-- `g`, and a '!<run_id>' mark of this same process is taken as filled too: that fill read
-- the ledger on data this process still holds (a loss takes the counter and its mark with
-- it, or changes the process), and filling it again would count twice a bill that reached
-- the ledger before the counter.
local function fill_generation(epoch, copy)
  if not copy then
    return redis.call('HGET', epoch, 'g') or '0', nil
  end
  local e = redis.call('HMGET', epoch, 'g', 'r')
  local here = run_id()
  local early = '!' .. (here or '')
  if not e[1] or e[2] ~= here then
    return early, nil
  end
  return e[1], early
end

-- Whether counter `key`'s fill mark is `generation` or `also` (fill_generation).
local function marked_filled(key, generation, also)
  local s = redis.call('HGET', key, 's')
  return s == generation or (also ~= nil and s == also)
end

-- An array of `n` slots (nil until set), sized once: a table grown one assignment at a time
-- is rehashed at every power of two, which inside Redis costs more than a command (a copy of
-- 60 arguments grown so cost ~40,000 instructions). `#` of it is not meaningful until every
-- slot is set.
local NOTHING = {}
local function array(n)
  return {unpack(NOTHING, 1, n)}
end

-- Counter buckets this script has read or written: key -> {used, retain-until (nil if none)},
-- as Redis holds them now (every write of `u` or `e` in these scripts keeps the entry so, or
-- drops it), so a bucket a carried bill just added to is not read again by the reservation.
local BUCKETS = {}

-- What the fence's check read of a fenced bucket, for the script's first use of it (every
-- write of the bucket comes after that use): its HMGET answer {x, u, s, e, l}. Taken
-- (dropped) by load_counter or counter_until.
local FENCE_READ = {}

-- The listing marks of the fenced keys as this script last read or wrote them (false: none):
-- a bucket's `l`, a holds hash's `k` (fence_register).
local LISTED = {}

-- Loads a counter bucket at `now` (deleting it when it is past its retention). Returns used,
-- 0 (holds live in the holds hash), retain-until (0 if none).
local function load_counter(key, now)
  local known = BUCKETS[key]
  if not known then
    local used, until_text
    local read = FENCE_READ[key]
    if read then
      FENCE_READ[key] = nil
      used, until_text = read[2], read[4]
    else
      local values = redis.call('HMGET', key, 'u', 'e')
      used, until_text = values[1], values[2]
    end
    known = {tonumber(used) or 0, tonumber(until_text)}
    BUCKETS[key] = known
  end
  local until_ms = known[2]
  if until_ms ~= nil and until_ms <= now then
    redis.call('DEL', key)
    BUCKETS[key] = {0, nil}
    LISTED[key] = false
    return 0, 0, 0
  end
  return known[1], 0, until_ms or 0
end

-- A counter bucket's retain-until at `now` (0 if none), as load_counter's third value (the
-- bucket deleted when it is past it), without reading its use; with it as stored (nil if
-- none) and the bucket's `l` field (the fence generation whose registry lists it as kept at
-- least that long: fence_register_adds).
local function counter_until(key, now)
  local stored, listing
  local read = FENCE_READ[key]
  if read then
    FENCE_READ[key] = nil
    stored, listing = read[4], read[5]
  else
    local values = redis.call('HMGET', key, 'e', 'l')
    stored, listing = values[1], values[2]
  end
  local until_ms = tonumber(stored)
  if until_ms ~= nil and until_ms <= now then
    redis.call('DEL', key)
    BUCKETS[key] = {0, nil}
    LISTED[key] = false
    return 0, nil, nil
  end
  return until_ms or 0, stored, listing
end

-- The live holds of a counter at `now` (its holds hash), and whether it has the field `field`
-- (then a reserve already kept the hash as long as that field's holds: live_at_least).
-- Deletes the expired and negative fields. A reservation (`field` not '') also deletes those
-- of other minutes given back to zero (a missing field reads zero): kept until their minute
-- was over, a counter with steady calls held a field per minute a hold expires in (~16),
-- each read by every call. Its own minute's zero stays, so the next hold of that minute
-- needs neither an HDEL nor a new time to live; a read (`field` '') keeps every zero for the
-- reservation that follows it.
-- The caller passes a `field` whose minute is not over (else ''), so its name need not be
-- converted.
local function load_holds(key, now, field)
  local flat = redis.call('HGETALL', key)
  local held, dead, has = 0, nil, false
  for i = 1, #flat, 2 do
    local name, value = flat[i], flat[i + 1]
    local live = name == field
    if name == 'k' then -- the fence's presence mark, not a hold
      if LISTED[key] ~= nil then
        LISTED[key] = value
      end
    elseif not live then
      local minute = tonumber(string.sub(name, 2))
      live = minute ~= nil and minute * 60000 > now
      if not live then
        dead = dead or {}
        dead[#dead + 1] = name
      end
    end
    if live then
      local amount = number_of(value)
      if amount < 0 or (amount == 0 and name ~= field and field ~= '') then
        dead = dead or {}
        dead[#dead + 1] = name
      else
        held = held + amount
        has = has or name == field
      end
    end
  end
  if dead then
    redis.call('HDEL', key, unpack(dead))
  end
  return held, has
end

-- Ticket records this script read or wrote: key -> {state, until} (false: none), so a record
-- read twice in one step (carry.lua, then its reservation) is fetched once.
local TICKETS = {}

-- Starts a call: forgets what the previous call of the same Lua state read (a function of the
-- library runs in one state for its life: these tables would outlive the call).
local function begin_call()
  BUCKETS, FENCE_READ, LISTED, TICKETS = {}, {}, {}, {}
end

-- The state of a ticket record at `now`: 'h', 's', 'n', or nil (none, or expired).
local function ticket_state(key, now)
  local seen = TICKETS[key]
  if seen == nil then
    seen = false
    local value = redis.call('GET', key)
    if value then
      seen = {string.sub(value, 1, 1), tonumber(string.sub(value, 2))}
    end
    TICKETS[key] = seen
  end
  if not seen or seen[2] == nil or seen[2] <= now then
    return nil
  end
  return seen[1]
end

-- Sets a key's time to live to at least `until_ms - now` (at least 1 s); never shortens it.
-- (A whole number below 2^53 passed to redis.call is sent exactly, so no string.format.)
local function live_at_least(key, until_ms, now)
  local ttl = until_ms - now
  if ttl < 1000 then
    ttl = 1000
  end
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

-- Writes a ticket record `state` kept until `until_ms` (guard clock).
local function set_ticket(key, state, until_ms, now)
  local ttl = until_ms - now
  if ttl < 1000 then
    ttl = 1000
  end
  redis.call('SET', key, state .. string.format('%d', until_ms), 'PX', ttl)
  TICKETS[key] = {state, until_ms}
end

-- Keeps a counter until at least `until_ms` (guard clock), given its current retain-until
-- `current` (from load_counter): when that moves later, records it in `e` (dropping `l`: the
-- registry lists it for less now) and sets the key's time to live from the caller's `now`.
-- Neither is ever shortened. Returns whether it moved.
local function keep_until(key, until_ms, current, now)
  if until_ms <= current then
    return false
  end
  redis.call('HSET', key, 'e', string.format('%d', until_ms))
  redis.call('HDEL', key, 'l')
  LISTED[key] = false
  live_at_least(key, until_ms, now)
  local known = BUCKETS[key]
  if known then
    known[2] = until_ms
  end
  return true
end
