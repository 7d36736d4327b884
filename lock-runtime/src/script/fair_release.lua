-- Release our hold of a fair lock, or leave its queue; then wake the waiter whose turn it is.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- KEYS[3]  queue (see fair_acquire.lua)
-- KEYS[4]  places
-- ARGV[1]  owner id
--
-- The message names the next waiter (its owner id), so only that waiter wakes, in whichever
-- process it waits; '1' wakes one waiter of any process when the queue is empty.
--
-- Returns {1, 0} when released, {0, 0} when this owner did not hold it (its place, if any, is
-- gone either way), {-1, type} for foreign data.
local function release(lock, channel, queue, places, owner)
  local removed = redis.pcall('HDEL', lock, owner)
  local bad = foreign(removed, lock)
  if bad then
    return bad
  end
  -- The waiter whose turn it is: the head once waiters whose place ended are dropped (the raw
  -- head may be one of them). When that turn moves on (this owner leaves it, or dropping the
  -- dead ones gave it to a waiter nobody told), the new head is woken by name.
  local now = now_ms()
  local raw_first = redis.call('ZRANGE', queue, 0, 0)[1]
  local first = queue_head(queue, places, now)
  local turn_moved = first == owner or (raw_first ~= nil and raw_first ~= first)
  redis.call('ZREM', queue, owner)
  redis.call('ZREM', places, owner)
  if (removed == 1 or turn_moved) and redis.call('EXISTS', lock) == 0 then
    wake(channel, queue_head(queue, places, now) or '1')
  end
  if removed == 1 then
    return {1, 0}
  end
  return {0, 0}
end

return release(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
