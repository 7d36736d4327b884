-- Issues a fencing token to the holder of a lock taken without one (tokens on demand: a mutex's,
-- or a semaphore's permits passed in memory), checked in the same step: a token is issued only
-- to an owner that holds the lock at that moment.
--
-- KEYS[1]  the lock: this crate's mutex string, a semaphore's holders, or a hash (see
--          `acquire.lua`)
-- KEYS[2]  fencing counter
-- ARGV[1]  owner id
-- ARGV[2]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[3]  's': the lock is this crate's mutex string; 'z': this crate's semaphore (the
--          holders' sorted set, a member whose lease has not ended holds); anything else (or
--          nothing): a hash
--
-- Returns {1, token} (greater than every token issued before for the name: the counter and
-- the server clock, as for a grant; the turns are left as they are), {0, 0} when the owner
-- does not hold the lock, {-1, type} for foreign data (nothing written).
local function token(lock, fence, owner, retention_ms, model)
  if model == 's' then
    local holder, _, other = string_holder(lock)
    if other then
      return other[1] == 0 and {0, 0} or other
    end
    if holder ~= owner then
      return {0, 0}
    end
  elseif model == 'z' then
    local score = redis.pcall('ZSCORE', lock, owner)
    local bad = foreign(score, lock)
    if bad then
      return bad
    end
    if not score or tonumber(score) <= now_ms() then
      return {0, 0}
    end
  else
    local mine, other = hash_holds(lock, owner)
    if other then
      return other
    end
    if not mine then
      return {0, 0}
    end
  end
  -- Within the holder's turn: as for a hand-off, the turns stay.
  local issued, reply = next_token(fence, owner, retention_ms, true)
  if not issued then
    return reply
  end
  return {1, issued}
end

return token(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
