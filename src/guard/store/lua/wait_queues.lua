-- queue: fair FIFO wait queues. KEYS[1] = the store's ticket sequence; then, per queue, its
-- order (sorted set: ticket -> ticket number) and its liveness (sorted set: ticket -> alive
-- until, guard clock). ARGV = op (join | ahead | leave | length), now, alive_until, then for
-- join: only_if_busy (0/1) and each queue's max length; for ahead and leave: the ticket.
-- join answers {0, 0} clear, {1, ticket} joined, {2, index} full (0-based); ahead answers
-- the most waiters ahead in any queue, or -1 when the ticket is not in every queue.
local op = ARGV[1]
local now = tonumber(ARGV[2])
local alive = tonumber(ARGV[3])
local n = (#KEYS - 1) / 2

local function prune(i)
  local order, live = KEYS[2 * i], KEYS[2 * i + 1]
  local lapsed = redis.call('ZRANGEBYSCORE', live, '-inf', '(' .. ARGV[2])
  if #lapsed > 0 then
    redis.call('ZREM', order, unpack(lapsed))
    redis.call('ZREM', live, unpack(lapsed))
  end
  return redis.call('ZCARD', order)
end

local function keep(i)
  local ttl = alive - now + 60000
  if ttl < 60000 then
    ttl = 60000
  end
  redis.call('PEXPIRE', KEYS[2 * i], ttl)
  redis.call('PEXPIRE', KEYS[2 * i + 1], ttl)
end

if op == 'join' then
  local lens = {}
  local busy = false
  for i = 1, n do
    lens[i] = prune(i)
    if lens[i] > 0 then
      busy = true
    end
  end
  if ARGV[4] == '1' and not busy then
    return {0, 0}
  end
  for i = 1, n do
    if lens[i] >= tonumber(ARGV[4 + i]) then
      return {2, i - 1}
    end
  end
  local ticket = redis.call('INCR', KEYS[1])
  if ticket == 1 then
    -- A new sequence (first use, or the store lost it: restarted empty, keys removed)
    -- starts at Redis's clock in microseconds, past every number a lost one gave out
    -- (unless that clock stepped back), so a waiter from before never finds a new waiter's
    -- place under its own number. (Doubles hold these integers exactly: below 2^53.)
    local t = redis.call('TIME')
    ticket = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[1], ticket)
  end
  for i = 1, n do
    redis.call('ZADD', KEYS[2 * i], ticket, ticket)
    redis.call('ZADD', KEYS[2 * i + 1], alive, ticket)
    keep(i)
  end
  return {1, ticket}
elseif op == 'ahead' then
  local ticket = ARGV[4]
  local most = 0
  for i = 1, n do
    prune(i)
    local rank = redis.call('ZRANK', KEYS[2 * i], ticket)
    if not rank then
      return -1
    end
    if rank > most then
      most = rank
    end
  end
  for i = 1, n do
    redis.call('ZADD', KEYS[2 * i + 1], alive, ticket)
    keep(i)
  end
  return most
elseif op == 'leave' then
  for i = 1, n do
    redis.call('ZREM', KEYS[2 * i], ARGV[4])
    redis.call('ZREM', KEYS[2 * i + 1], ARGV[4])
  end
  return 0
end
return prune(1)
