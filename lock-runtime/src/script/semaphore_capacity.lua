-- Read, store or clear a semaphore's capacity; how many permits are free.
--
-- KEYS[1]  permit holders (see semaphore_acquire.lua)
-- KEYS[2]  stored capacity
-- KEYS[3]  unlock channel
-- ARGV[1]  the capacity while none is stored
-- ARGV[2]  'free', 'capacity', 'set' or 'clear'
-- ARGV[3]  the capacity to store ('set')
--
-- A change wakes every waiter (more permits may be free). Returns {1, capacity} for
-- 'capacity', else {1, free permits} (never below 0); {-1, type} for foreign data (nothing
-- written).
local function capacity(set, stored, channel, default_capacity, op, value)
  local bad = foreign(redis.pcall('ZCARD', set), set)
  if bad then
    return bad
  end
  -- Checked before any change: data at `stored` that is not ours is never overwritten.
  local cap, reply = capacity_in_force(stored, default_capacity)
  if not cap then
    return reply
  end
  if op == 'set' then
    redis.call('SET', stored, value)
    cap = tonumber(value)
  elseif op == 'clear' then
    redis.call('DEL', stored)
    cap = tonumber(default_capacity)
  end
  if op == 'capacity' then
    return {1, cap}
  end
  if op == 'set' or op == 'clear' then
    wake(channel, '*')
  end
  return {1, math.max(0, cap - permits_held(set, now_ms()))}
end

return capacity(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
