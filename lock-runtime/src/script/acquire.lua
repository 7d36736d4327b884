-- Take the lock if it is free or already ours; otherwise report the holder's remaining lease.
--
-- KEYS[1]  the lock: this crate's mutex string (see `WAITED` in prelude.lua), or a hash
--          (field = owner id, value = hold count) in Redisson's layout
-- KEYS[2]  fencing counter
-- KEYS[3]  unlock channel (counted when clients take turns: see "Turns" in prelude.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[4]  '1' when the owner's client waits for the lock (is subscribed to its channel);
--          anything else (or nothing): it does not
-- ARGV[5]  '0' to take it without a fencing token (tokens on demand: `token.lua`); anything
--          else (or nothing) issues one
-- ARGV[6]  's' or nothing: the lock is this crate's mutex string; anything else: a hash
--          (Redisson's layout)
--
-- The arguments that are their defaults are left off the end: every argument costs the server
-- time on every call (a fenced grant of a free lock, the common case, is the first three only:
-- about 14 % less of the server's CPU per lock/unlock pair than with all six, in a
-- `redis-cli --pipe` harness on Redis 7.0).
--
-- Returns {1, token} when taken (token 0: none issued; retaking our own hold is idempotent,
-- so a retried acquire after a timeout is safe), {0, pttl} when another owner holds it (pttl
-- is -1 when a foreign key has no TTL), {-1, type} when a key holds data that is not ours
-- (nothing written).
--
-- A waiting attempt that finds the mutex string held marks it (`WAITED`), so its release
-- publishes; one that takes it marks it again when another client still waits.
local function acquire(lock, fence, channel, owner, lease_ms, retention_ms, waiting, fenced, model)
  local plain = model == nil or model == 's'
  local waited = false
  -- Whether the owner retakes its own hold (a retry after an unknown outcome): never refused
  -- for turns (see "Turns" in prelude.lua), so a reconciled attempt never leaves its hold.
  local retake = false
  if plain then
    local value = nil
    if waiting ~= '1' then
      -- Not waiting, so nothing to mark: take a free lock in the step that reads it (one call
      -- of Redis's fewer than a read and a write, the costliest part of a script), then issue
      -- the token. A lock that is not free is left as it was; a grant the counter refuses
      -- (foreign data there, or another client's turn) is taken back.
      value = redis.pcall('SET', lock, owner, 'NX', 'PX', lease_ms, 'GET')
      if value == false then
        local token, reply = next_token(fence, owner, retention_ms, nil, {channel, false},
          fenced == '0')
        if not token then
          redis.call('DEL', lock)
          return reply
        end
        return {1, token}
      end
    end
    local holder, marked, other = string_holder(lock, value)
    if other then
      return other
    end
    if holder and holder ~= owner then
      if waiting == '1' and not marked then
        redis.call('SET', lock, holder .. WAITED, 'KEEPTTL')
      end
      return {0, redis.call('PTTL', lock)}
    end
    retake = holder ~= nil
    waited = marked
  elseif redis.call('EXISTS', lock) == 1 then
    local mine, other = hash_holds(lock, owner)
    if other then
      return other
    end
    if not mine then
      return {0, redis.call('PTTL', lock)}
    end
    retake = true
  end

  local asking = {channel, waiting == '1'}
  if plain and waiting == '1' and not waited then
    -- Taken by a waiter: others may still wait (their marks went with the last holder).
    waited = others_wait(asking)
  end
  local token, reply = grant(lock, fence, owner, lease_ms, retention_ms, retake, asking,
    fenced == '0', plain, waited)
  if not token then
    return reply
  end
  return {1, token}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
