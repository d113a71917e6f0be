-- epoch: KEYS[1] = the epoch, KEYS[2] = the recovery lock; ARGV[1] = the operation.
--   read                        -> {generation or '', 1 if written by this Redis process}
--   write gen now token mode pattern hold_again_until [ttl]
--                               -> 'ok', or why not: 'unlocked' (token given and the lock is
--                                  not its), 'exists' / 'counters' (mode 'adopt': an epoch,
--                                  or a counter matching `pattern`, is already there);
--                                  hold_again_until ('0': none) is kept in the epoch's `w`
--                                  (fence.lua: fenced reserves wait until then); mode
--                                  'join' (a slot group's copy) writes nothing when the copy
--                                  is of `gen` and this process already (another guard joined
--                                  it meanwhile: its time, `h`, stays), else keeps the copy
--                                  `ttl` ms (the time its entry is about to get, and more)
--   unlock token                -> 1 if the lock was the token's and is now gone
--   horizon gen until ttl       -> (a slot group's copy of the epoch) when the copy is of
--                                  `gen`: raises its `h` to `until` (the time its entry in
--                                  the list of groups lasts, groups.lua `list`), and then
--                                  keeps the copy `ttl` ms from now (past `h`: never
--                                  shorter than its entry); 1, else 0 (nothing written)
local function run_id()
  -- As common.lua's (the two must read the same): a plain search, then the run_id's 40
  -- characters.
  local info = redis.call('INFO', 'server')
  local at = string.find(info, 'run_id:', 1, true)
  return at and string.sub(info, at + 7, at + 46)
end
local op = ARGV[1]
if op == 'read' then
  local e = redis.call('HMGET', KEYS[1], 'g', 'r')
  if not e[1] then
    return {'', 0}
  end
  return {e[1], (e[2] == run_id()) and 1 or 0}
elseif op == 'write' then
  if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[4] then
    return 'unlocked'
  end
  if ARGV[5] == 'join' then
    local e = redis.call('HMGET', KEYS[1], 'g', 'r')
    if e[1] == ARGV[2] and e[2] == run_id() then
      return 'ok'
    end
  end
  if ARGV[5] == 'adopt' then
    if redis.call('EXISTS', KEYS[1]) == 1 then
      return 'exists'
    end
    local cursor = '0'
    repeat
      local page = redis.call('SCAN', cursor, 'MATCH', ARGV[6], 'COUNT', 1000)
      if #page[2] > 0 then
        return 'counters'
      end
      cursor = page[1]
    until cursor == '0'
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'g', ARGV[2], 'r', run_id(), 't', ARGV[3])
  if ARGV[7] ~= '0' then
    redis.call('HSET', KEYS[1], 'w', ARGV[7])
  end
  if ARGV[5] == 'join' then
    redis.call('PEXPIRE', KEYS[1], ARGV[8])
  end
  return 'ok'
elseif op == 'horizon' then
  local e = redis.call('HMGET', KEYS[1], 'g', 'h')
  if e[1] ~= ARGV[2] then
    return 0
  end
  if not e[2] or tonumber(e[2]) < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'h', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
  return 1
elseif op == 'unlock' then
  if redis.call('GET', KEYS[2]) == ARGV[2] then
    return redis.call('DEL', KEYS[2])
  end
  return 0
end
return redis.error_reply('epoch: unknown operation ' .. tostring(op))
