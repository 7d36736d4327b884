-- Delete the lock whoever holds it (every reader and permit holder too), and wake every waiter;
-- or, given the holders an operator saw, only while exactly those hold it.
--
-- KEYS[1]  the lock: this crate's mutex string, a hash (a fair lock, Redisson's layout), or
--          the holders of a semaphore or read/write lock
-- KEYS[2]  unlock channel
-- ARGV[1]  (optional) the message; `*` (wake every waiter) by default
-- ARGV[2]  (optional) how many holders must hold it: with ARGV[3..], the lock is deleted only
--          if its holders (those whose lease has not ended) are exactly these owner ids
--
-- Returns {1, 0} when a lock was deleted, {0, 0} when it was free, {0, 1} when its holders
-- were not the given ones (nothing changed), {-1, type} for foreign data.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
-- The mutex string's holder.
local holder = nil
if kind == 'string' then
  holder = string_holder(KEYS[1])
  if not holder then
    return {-1, kind}
  end
elseif kind ~= 'hash' and kind ~= 'zset' then
  return {-1, kind}
end
local expected = tonumber(ARGV[2])
if expected then
  local now = now_ms()
  local function holds(owner)
    if holder then
      return holder == owner
    end
    if kind == 'hash' then
      return redis.call('HEXISTS', KEYS[1], owner) == 1
    end
    local ends = redis.call('ZSCORE', KEYS[1], owner)
    return ends ~= false and ends ~= nil and tonumber(ends) > now
  end
  local count
  if holder then
    count = 1
  elseif kind == 'hash' then
    count = redis.call('HLEN', KEYS[1])
  else
    count = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  end
  if count == 0 then
    return {0, 0}
  end
  if count ~= expected then
    return {0, 1}
  end
  for i = 3, 2 + expected do
    if not holds(ARGV[i]) then
      return {0, 1}
    end
  end
end
redis.call('DEL', KEYS[1])
wake(KEYS[2], ARGV[1] or '*')
return {1, 0}
