-- Read a lock's state without changing it.
--
-- KEYS[1]  lock hash
--
-- Returns {1, pttl} when locked (pttl is -1 for a foreign hash without TTL), {0, 0} when free,
-- {-1, type} for foreign data.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind ~= 'hash' then
  return {-1, kind}
end
return {1, redis.call('PTTL', KEYS[1])}
