-- Read everything about a lock without changing it: who holds it and for how long, the fencing
-- token last issued, who waits, and a semaphore's stored capacity. Works for every member of
-- the family (a mutex is a string, a fair lock a hash, a read/write lock or semaphore a sorted
-- set; every lock of Redisson's layout is a hash);
-- data of another type is reported, never touched.
--
-- KEYS[1]  the lock (see `acquire.lua`), or the holders of a semaphore or read/write lock
-- KEYS[2]  fencing counter
-- KEYS[3]  unlock channel (only its subscribers are counted)
-- KEYS[4]  a fair lock's queue
-- KEYS[5]  a fair lock's places
-- KEYS[6]  a read/write lock's waiting writers
-- KEYS[7]  a semaphore's stored capacity
-- ARGV[1]  the most holders to list
--
-- Returns {type, pttl, holders, holder count, token, queued, writers, subscribers, capacity}:
-- `type` the Redis type at KEYS[1] ('none' when free); `pttl` the mutex's PTTL, or the ms until
-- the last live lease of the sorted set ends (0 when free); `holders` a flat list of owner id
-- and detail (a hash's value, '1' for the mutex string, or the ms left of a holder's lease) for up to ARGV[1] live
-- holders; `token` the counter's number or false; `queued` and `writers` the waiters whose
-- place is live; `subscribers` from PUBSUB NUMSUB; `capacity` the stored capacity or false.

-- Members of sorted set `key` scored after `now`; 0 for a missing key or data of another type.
local function live_count(key, now)
  local n = redis.pcall('ZCOUNT', key, '(' .. now, '+inf')
  if type(n) == 'number' then
    return n
  end
  return 0
end

local function inspect(lock, fence, channel, queue, places, writers, stored, max_holders)
  local limit = tonumber(max_holders)
  local now = now_ms()
  local kind = redis.call('TYPE', lock)['ok']
  local pttl = 0
  local holders = {}
  local count = 0
  if kind == 'string' then
    -- This crate's mutex (its holder's owner id), or someone else's string: no holders.
    local holder = string_holder(lock)
    if holder then
      pttl = redis.call('PTTL', lock)
      count = 1
      holders = {holder, '1'}
    end
  elseif kind == 'hash' then
    pttl = redis.call('PTTL', lock)
    count = redis.call('HLEN', lock)
    local fields
    if count <= limit then
      fields = redis.call('HGETALL', lock)
    else
      -- Not ours (a lock hash has one field): list a bounded page instead of all of it.
      fields = redis.call('HSCAN', lock, 0, 'COUNT', limit)[2]
    end
    for i = 1, math.min(#fields, 2 * limit), 2 do
      holders[#holders + 1] = fields[i]
      holders[#holders + 1] = fields[i + 1]
    end
  elseif kind == 'zset' then
    count = redis.call('ZCOUNT', lock, '(' .. now, '+inf')
    local live = redis.call('ZRANGEBYSCORE', lock, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
    for i = 1, #live, 2 do
      holders[#holders + 1] = live[i]
      holders[#holders + 1] = string.format('%d', math.max(1, tonumber(live[i + 1]) - now))
    end
    local last = redis.call('ZRANGE', lock, -1, -1, 'WITHSCORES')
    if count > 0 and last[2] then
      pttl = math.max(1, tonumber(last[2]) - now)
    end
  end
  local token = last_token(fence)
  local capacity = redis.pcall('GET', stored)
  if type(capacity) ~= 'string' or not string.match(capacity, '^%d+$') or string.len(capacity) > 10 then
    capacity = false
  end
  local queued = 0
  if redis.call('TYPE', queue)['ok'] == 'zset' then
    queued = live_count(places, now)
  end
  local subscribers = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  return {kind, pttl, holders, count, token, queued, live_count(writers, now), subscribers, capacity}
end

return inspect(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], ARGV[1])
