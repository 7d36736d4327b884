-- Take permits of a semaphore, or re-take our own (idempotent for the same owner id).
--
-- KEYS[1]  permit holders: a sorted set, member = owner id ending in `#<permits>`, score = the
--          holder's lease end in server milliseconds
-- KEYS[2]  fencing counter
-- KEYS[3]  stored capacity (a decimal string without TTL), when an operator set one
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[4]  the capacity while none is stored
--
-- Holders whose lease ended are removed first: a crashed process's permits come back when its
-- lease ends. Returns {1, token} when taken, {0, ms} when too few permits are free (ms: until
-- the first holder's lease ends), {3, capacity} when the request is larger than the capacity
-- (checked after the re-take: an owner still holding gets {1, token} whatever the capacity),
-- {-1, type} when a key holds data that is not a semaphore (nothing written).
local function acquire(set, fence, stored, owner, lease_ms, retention_ms, default_capacity)
  local bad = foreign(redis.pcall('ZSCORE', set, owner), set)
  if bad then
    return bad
  end
  local capacity, reply = capacity_in_force(stored, default_capacity)
  if not capacity then
    return reply
  end
  local now = now_ms()
  expire(set, now)
  -- A re-take (the same owner id, its lease not ended) needs no capacity: it is a retry of an
  -- acquire that was granted, and must say so even after the capacity went down meanwhile.
  local retake = redis.call('ZSCORE', set, owner)
  if not retake then
    local wanted = permits_of(owner)
    if wanted > capacity then
      return {3, capacity}
    end
    if permits_held(set, now) + wanted > capacity then
      return {0, first_end(set, now) or 1}
    end
  end
  local token
  token, reply = grant_member(set, fence, owner, lease_ms, retention_ms, now, retake)
  if not token then
    return reply
  end
  return {1, token}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
