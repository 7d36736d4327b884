-- Read a lock's state without changing it.
--
-- KEYS[1]  lock hash, or the holders of a semaphore or read/write lock
--
-- Returns {1, pttl} when held (pttl is -1 for a foreign hash without TTL), {0, 0} when free,
-- {-1, type} for foreign data.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind == 'zset' then
  local now = now_ms()
  local last = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  if #last == 0 then
    return {0, 0}
  end
  return {1, math.max(1, tonumber(last[#last]) - now)}
end
if kind ~= 'hash' then
  return {-1, kind}
end
return {1, redis.call('PTTL', KEYS[1])}
