-- Take the read or the write side of a read/write lock, or re-take our own (idempotent).
--
-- KEYS[1]  holders: a sorted set, member = owner id ending in `#r` (a reader) or `#w` (the
--          writer), score = the holder's lease end in server milliseconds
-- KEYS[2]  fencing counter
-- KEYS[3]  waiting writers: a sorted set, member = owner id, score = the end of its place
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[4]  how long a waiting writer's place lasts without being refreshed, in milliseconds
--
-- Writers go first: while a writer waits, no new reader gets in, so a stream of readers cannot
-- starve it. A writer that cannot have the lock leaves its place (refreshed at every attempt);
-- a writer that died stops blocking readers when its place ends. Holders whose lease ended are
-- removed first, so a dead reader blocks a writer for its lease at most.
--
-- Returns {1, token} when taken, {0, ms} when not (ms: until the first lease or place that
-- blocks us ends), {-1, type} when a key holds data that is not a read/write lock.
local function acquire(set, fence, writers, owner, lease_ms, retention_ms, place_ms)
  local bad = foreign(redis.pcall('ZSCORE', set, owner), set)
    or foreign(redis.pcall('ZSCORE', writers, owner), writers)
  if bad then
    return bad
  end
  local now = now_ms()
  expire(set, now)
  expire(writers, now)
  if not redis.call('ZSCORE', set, owner) then
    if string.sub(owner, -2) == '#w' then
      if redis.call('ZCARD', set) > 0 then
        redis.call('ZADD', writers, now + tonumber(place_ms), owner)
        extend(writers, place_ms)
        return {0, first_end(set, now) or 1}
      end
    else
      local first = redis.call('ZRANGE', set, 0, 0)[1]
      local writing = first and string.sub(first, -2) == '#w'
      if writing or redis.call('ZCARD', writers) > 0 then
        -- Until the first lease or writer's claim that holds us back ends (a claim of a writer
        -- that died ends long before a holder's renewed lease).
        local wait = first_end(set, now)
        local claim = first_end(writers, now)
        if claim and (not wait or claim < wait) then
          wait = claim
        end
        return {0, wait or 1}
      end
    end
  end
  local token, reply = grant_member(set, fence, owner, lease_ms, retention_ms, now)
  if not token then
    return reply
  end
  redis.call('ZREM', writers, owner)
  return {1, token}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
