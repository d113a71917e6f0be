-- The epoch fence (docs/redis.md, "The epoch fence"), prepended to reserve and settle after
-- common.lua. The caller appends the epoch key to KEYS and two arguments to ARGV: the
-- generation the guard trusts ('' for none yet) and one character per key: '1' a fenced
-- counter bucket, 'h' a fenced counter's holds, '0' not fenced (settle passes '' for both:
-- it checks nothing and lists what it adds to under the store's own generation). They are
-- taken off by fence_begin (which each fenced call runs first), so the script body sees its
-- own keys and arguments only.
--
-- The epoch is a hash: g generation (unique text), r run_id of the Redis process that wrote
-- it, t guard time it was written, w (a recovery's, for a while) guard time until which the
-- other guards may still be holding their open calls again under it, x<bucket> until when
-- the registry of that bucket is kept (bucket 'h' for the holds keys). A registry
-- `<epoch key>:<g>:<bucket>` lists every counter key of the bucket written in generation g,
-- with the time it is kept until: a listed key that is missing was lost. A bucket is listed
-- when use is added to it (settle) or a reserve finds it; a holds key when holds are placed
-- in it (it then keeps a `k` field, so giving its holds back never empties it). A key never
-- written is never listed.
-- What fence_begin takes off the call: the epoch key, the flags, the generation.
local FENCE_EPOCH, FENCE_FLAGS, FENCE_GEN
-- On a slot group's copy of the epoch, the generation comes as `<generation>@<need>`: the
-- copy's `h` (until when its entry in the list of groups lasts: groups.lua) must reach
-- `need` (guard time), else the reserve answers -8 and the guard extends both first.
local FENCE_NEED
-- The indices of the fenced keys ('1' or 'h'), found once: the checks below visit only these.
local FENCE_AT, FENCE_ON
-- The store's generation (the epoch's `g`) as this script read it (false: no epoch; nil: not
-- read yet). No script writes `g` but epoch.lua, so it is read once.
local EPOCH_G
-- fence_check's answer, once per call.
local fence_checked, fence_answer

-- Starts a fenced call: takes the fence's key and arguments off KEYS and ARGV, and sets every
-- value above for this call alone (a function of the library runs in one Lua state for its
-- life, so nothing of the previous call may stay).
local function fence_begin()
  FENCE_EPOCH = table.remove(KEYS)
  FENCE_FLAGS = table.remove(ARGV)
  FENCE_GEN = table.remove(ARGV)
  FENCE_NEED = nil
  local at = string.find(FENCE_GEN, '@', 1, true)
  if at then
    FENCE_NEED = tonumber(string.sub(FENCE_GEN, at + 1))
    FENCE_GEN = string.sub(FENCE_GEN, 1, at - 1)
  end
  -- (Plain searches, one per flag: a pattern tried at every position costs ~200
  -- instructions a character.)
  FENCE_AT = {}
  at = string.find(FENCE_FLAGS, '1', 1, true)
  while at do
    FENCE_AT[#FENCE_AT + 1] = at
    at = string.find(FENCE_FLAGS, '1', at + 1, true)
  end
  at = string.find(FENCE_FLAGS, 'h', 1, true)
  while at do
    FENCE_AT[#FENCE_AT + 1] = at
    at = string.find(FENCE_FLAGS, 'h', at + 1, true)
  end
  FENCE_ON = #FENCE_AT > 0
  EPOCH_G = nil
  fence_checked, fence_answer = false, nil
end

-- The store's generation: EPOCH_G, read with one HGET the first time.
local function store_generation()
  if EPOCH_G == nil then
    EPOCH_G = redis.call('HGET', FENCE_EPOCH, 'g') or false
  end
  return EPOCH_G
end

-- The registry bucket of KEYS[i]: 'h' for a holds key, else the key's bucket.
local function fence_bucket(i, key)
  if string.sub(FENCE_FLAGS, i, i) == 'h' then
    return 'h'
  end
  return string.match(key, ':(%-?%d+)$') or '0'
end

-- nil when every fenced key can be trusted; else the reserve's answer: -2 the epoch is
-- missing or was written by another Redis process, -3 the guard's generation is not the
-- store's (it reads the epoch again), -7 a recovery wrote it moments ago and other guards
-- may still be holding their open calls again (until its `w`: the first reserve past it
-- drops `w`), -8 a group's copy lasts less than FENCE_NEED, -4 a key the epoch expects is
-- missing.
local function fence_check_now(now)
  if not FENCE_ON then
    return nil
  end
  local epoch = redis.call('HMGET', FENCE_EPOCH, 'g', 'r', 'w', 'h')
  EPOCH_G = epoch[1]
  if not epoch[1] or epoch[2] ~= run_id() then
    return -2
  end
  if epoch[1] ~= FENCE_GEN then
    return -3
  end
  if epoch[3] then
    if tonumber(epoch[3]) > now then
      return -7
    end
    redis.call('HDEL', FENCE_EPOCH, 'w')
  end
  if FENCE_NEED and (not epoch[4] or tonumber(epoch[4]) < FENCE_NEED) then
    return -8
  end
  for _, i in ipairs(FENCE_AT) do
    local flag = string.sub(FENCE_FLAGS, i, i)
    local missing = false
    if flag == '1' then
      -- A bucket always has one of u, s, e; x is set by a bill that recreated it after it was
      -- lost (fence_lost): the loss still counts while that generation is trusted.
      -- What is read is kept for the script's first use of the bucket (FENCE_READ).
      local v = redis.call('HMGET', KEYS[i], 'x', 'u', 's', 'e', 'l')
      if v[1] == FENCE_GEN then
        return -4
      end
      missing = not (v[2] or v[3] or v[4])
      FENCE_READ[KEYS[i]], LISTED[KEYS[i]] = v, v[5]
    elseif flag == 'h' then
      -- (not read whole: a carried bill gives holds back before the reservation reads it)
      missing = redis.call('EXISTS', KEYS[i]) == 0
      LISTED[KEYS[i]] = false -- load_holds sets its `k`
    end
    if missing then
      local bucket = fence_bucket(i, KEYS[i])
      local registry = FENCE_EPOCH .. ':' .. FENCE_GEN .. ':' .. bucket
      local listed = redis.call('HGET', registry, KEYS[i])
      if listed and tonumber(listed) > now then
        return -4
      end
      local kept = redis.call('HGET', FENCE_EPOCH, 'x' .. bucket)
      if kept and tonumber(kept) > now and redis.call('EXISTS', registry) == 0 then
        return -4
      end
    end
  end
  return nil
end

local function fence_check(now)
  -- Once per script: carry.lua checks before its settles, and the reservation it then runs
  -- takes that answer (the store as the reservation found it).
  if fence_checked then
    return fence_answer
  end
  fence_checked = true
  fence_answer = fence_check_now(now)
  return fence_answer
end

-- Lists `key` in the registry of `bucket` under generation `gen` until `until_ms` (never
-- lowered), and keeps the registry (and its entry in the epoch) as long. Returns whether
-- the entry was written.
local function fence_list(gen, bucket, key, until_ms, now)
  local registry = FENCE_EPOCH .. ':' .. gen .. ':' .. bucket
  local listed = redis.call('HGET', registry, key)
  if listed and tonumber(listed) >= until_ms then
    return false
  end
  local text = string.format('%d', until_ms)
  redis.call('HSET', registry, key, text)
  local field = 'x' .. bucket
  local kept = tonumber(redis.call('HGET', FENCE_EPOCH, field) or '0')
  if until_ms > kept then
    if kept == 0 then
      -- a new bucket: forget the registries whose time is over
      local flat = redis.call('HGETALL', FENCE_EPOCH)
      for j = 1, #flat, 2 do
        if string.sub(flat[j], 1, 1) == 'x' and tonumber(flat[j + 1]) <= now then
          redis.call('HDEL', FENCE_EPOCH, flat[j])
        end
      end
    end
    redis.call('HSET', FENCE_EPOCH, field, text)
    local ttl = math.max(until_ms - now, 1000)
    if redis.call('PTTL', registry) < ttl then
      redis.call('PEXPIRE', registry, string.format('%d', ttl))
    end
  end
  return true
end

-- After a reserve (whose fence_check passed): lists each fenced key in `kept` (its KEYS index
-- -> until when it is kept: a bucket found; a holds key holds were placed in, until `minute`
-- starts). A bucket whose `l` is the generation, or a holds hash whose `k` is
-- <generation>:<minute>, is listed that long already (LISTED, as the check and load_holds read
-- them): the registry is not read. Else the key is listed and marked so (`k` also keeps the
-- holds hash: its presence mark).
local function fence_register(kept, now, minute)
  if not FENCE_ON then
    return
  end
  local mark = nil
  for _, i in ipairs(FENCE_AT) do
    local key = KEYS[i]
    local until_ms = kept[i]
    if until_ms and until_ms > now then
      local bucket = fence_bucket(i, key)
      if bucket == 'h' then
        mark = mark or (FENCE_GEN .. ':' .. minute)
        if LISTED[key] ~= mark then
          fence_list(FENCE_GEN, bucket, key, until_ms, now)
          redis.call('HSET', key, 'k', mark)
          LISTED[key] = mark
        end
      elseif LISTED[key] ~= FENCE_GEN then
        fence_list(FENCE_GEN, bucket, key, until_ms, now)
        redis.call('HSET', key, 'l', FENCE_GEN)
        LISTED[key] = FENCE_GEN
      end
    end
  end
end

-- The generation under which counter bucket `key`, missing now and about to be recreated by
-- a bill, was lost: the registry of the store's generation lists it as kept past `now`; nil
-- when it was never listed or its time was over. The bill marks the recreated bucket with it
-- (field x), so the fence still sees the loss (fence_check_now) until a recovery writes a new
-- generation: a recreated key holding one bill's use must not read as the counter.
local function fence_lost(key, now)
  local gen = store_generation()
  if not gen then
    return nil
  end
  local bucket = string.match(key, ':(%-?%d+)$') or '0'
  local listed = redis.call('HGET', FENCE_EPOCH .. ':' .. gen .. ':' .. bucket, key)
  if listed and tonumber(listed) > now then
    return gen
  end
  return nil
end

-- After a settle added use to the `count` buckets keys[k], keys[k + 1]...: lists each (its
-- retain-until in `added`, by position from 1) under the store's generation, if it has an
-- epoch (without one, fenced reserves are refused anyway), and records that generation in
-- the bucket's `l`. `listed` (its `l`, for the buckets whose retain-until did not move)
-- skips those already listed under that generation.
local function fence_register_adds(keys, k, count, added, listed, now)
  local gen = nil
  for i = 1, count do
    local key, until_ms = keys[k + i - 1], added[i]
    if until_ms > now then
      if gen == nil then
        gen = store_generation()
      end
      if not gen then
        return
      end
      if listed[i] ~= gen then
        fence_list(gen, string.match(key, ':(%-?%d+)$') or '0', key, until_ms, now)
        redis.call('HSET', key, 'l', gen)
        if LISTED[key] ~= nil then
          LISTED[key] = gen
        end
      end
    end
  end
end

-- Adds use to `count` counter buckets as a bill does (settle.lua, settle_parts.lua): the i-th
-- (from 0) is keys[k + i], its amount args[a + 2i] and its retain-until args[a + 2i + 1]
-- (texts). A bucket lost and recreated by this add is marked so (fence_lost); each is kept
-- until its retain-until (never shortened) and listed in the fence's registry
-- (fence_register_adds: a bucket's `l` says it is listed already).
local function fence_add_use(keys, k, args, a, count, now)
  local added, listed = array(count), array(count)
  for i = 0, count - 1 do
    local key = keys[k + i]
    local retain_text = args[a + 2 * i + 1]
    local current, stored, listing = counter_until(key, now)
    local lost = current == 0 and fence_lost(key, now)
    local used = redis.call('HINCRBY', key, 'u', args[a + 2 * i])
    if lost then
      redis.call('HSET', key, 'x', lost)
    end
    -- The same retain-until as stored (every bill of a bucket but its first): nothing moves.
    if retain_text == stored then
      added[i + 1] = current
      listed[i + 1] = listing
      BUCKETS[key] = {used, current}
    else
      local retain = tonumber(retain_text)
      local moved = keep_until(key, retain, current, now)
      if not moved then
        listed[i + 1] = listing
      end
      added[i + 1] = math.max(retain, current)
      BUCKETS[key] = {used, (moved and retain) or tonumber(stored)}
    end
  end
  fence_register_adds(keys, k, count, added, listed, now)
end
