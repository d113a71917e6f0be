-- groups: the store's list of slot groups (groups.rs). KEYS[1] = the store's epoch, KEYS[2]
-- = the list (a hash: group tag -> the generation it was listed under).
--   join tag generation code -> {'stale'} when the store's epoch is not of `generation`;
--                               {'lost'} when `code` is -2 (the group's copy of the epoch is
--                               missing or of another process) and the group is listed under
--                               `generation` (its master lost it); else lists it under
--                               `generation` and answers {'join', the epoch's w or '0'} (the
--                               caller then writes the group's copy).
local op = ARGV[1]
if op ~= 'join' then
  return redis.error_reply('groups: unknown operation ' .. tostring(op))
end
local epoch = redis.call('HMGET', KEYS[1], 'g', 'w')
if epoch[1] ~= ARGV[3] then
  return {'stale'}
end
if ARGV[4] == '-2' and redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[3] then
  return {'lost'}
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return {'join', epoch[2] or '0'}
