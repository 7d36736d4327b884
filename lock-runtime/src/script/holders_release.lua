-- Release our hold of a semaphore or read/write lock, or stop waiting as a writer; wake as
-- many waiters as can now go.
--
-- KEYS[1]  holders (see semaphore_acquire.lua and rw_acquire.lua)
-- KEYS[2]  unlock channel
-- KEYS[3]  (read/write lock only) waiting writers; or, for a semaphore's release that ends the
--          releasing client's turn (ARGV[2]), the fencing counter
-- ARGV[1]  owner id
-- ARGV[2]  (optional, a semaphore) the releasing client has passed these permits on in memory
--          as often as it may in a row: if another process waits (subscribes to the channel),
--          keep the semaphore from this client's grants until the clients waiting longer had
--          their turn (lapsing this many milliseconds after the last grant: `yield` in
--          prelude.lua, as `release.lua` does for a mutex)
-- ARGV[3]  (with ARGV[2]) the fencing argument: the counter's retention in milliseconds
--
-- The message says how many waiters each process wakes: a semaphore's freed permits (never a
-- thundering herd), or '*' (all of them) once a read/write lock is free or a waiting writer
-- that held readers back is gone.
--
-- Returns {1, 0} when released, {0, 0} when this owner held nothing, {-1, type} for foreign
-- data.
local function release(set, channel, writers, owner, yield_ms, fencing_arg)
  local fence = nil
  if yield_ms then
    fence, writers = writers, nil
  end
  local removed = redis.pcall('ZREM', set, owner)
  local bad = foreign(removed, set)
  if bad then
    return bad
  end
  if fence and removed == 1 then
    -- If others wait besides this client's own subscription: their turn.
    yield(channel, fence, owner, tonumber(yield_ms), fencing_arg)
  end
  local left = 0
  if writers then
    left = redis.call('ZREM', writers, owner)
  end
  local message = nil
  if removed == 1 then
    local permits = string.match(owner, '#(%d+)$')
    if permits then
      message = permits
    elseif redis.call('ZCARD', set) == 0 then
      message = '*'
    end
  elseif left == 1 and redis.call('ZCARD', writers) == 0 then
    message = '*'
  end
  if message then
    wake(channel, message)
  end
  if removed == 1 then
    return {1, 0}
  end
  return {0, 0}
end

return release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3])
