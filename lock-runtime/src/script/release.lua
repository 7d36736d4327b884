-- Release our hold; then either hand the lock to a waiting task of the same client, or wake
-- a waiter of any client.
--
-- KEYS[1]  the lock: this crate's mutex string, or a hash (see `acquire.lua`)
-- KEYS[2]  unlock channel
-- KEYS[3]  fencing counter (only with ARGV[3]: a release without an heir sends two keys)
-- ARGV[1]  owner id
-- ARGV[2]  's' or absent: the lock is this crate's mutex string; anything else: a hash
--          (the common release, of a mutex string without an heir, is two keys and the owner
--          id: every key and argument costs the server time on every call)
-- ARGV[3]  (optional) the next owner: a task of the releasing client waiting for this lock
-- ARGV[4]  the next owner's lease in milliseconds
-- ARGV[5]  the fencing argument: the counter's retention in milliseconds, and behind Sentinel
--          `:<epoch>` (see "Fencing epochs" in prelude.lua)
-- ARGV[6]  '0' when the next owner takes the lock without a fencing token (see `acquire.lua`)
-- ARGV[7]  (optional) the releasing client has handed this lock on as often as it may in a row:
--          if another process waits for it (subscribes to its channel), let it fall free
--          instead, and keep it from this client's tasks until the clients waiting longer had
--          their turn (lapsing this many milliseconds after the last grant: `yield` in
--          prelude.lua)
--
-- Returns 1 (short for {1, 0}) when released (the key deleted once no owner is left, and the
-- unlock message published if a waiter marked the mutex string, always for a hash), {2, token} when released
-- and handed to ARGV[3] with this fencing token (no message: the lock never fell free; token
-- 0: none issued), {0, 0} when this owner does not hold the lock, {-1, type} for foreign data.
local function release(lock, channel, fence, owner, model, heir, lease_ms, retention_ms, fenced, yield_ms)
  local plain = model == nil or model == 's'
  local waited = true
  if plain then
    -- The common case first, in as few steps as the server can run: ours, marked or not.
    local value = redis.pcall('GET', lock)
    if value == owner then
      waited = false
    elseif value ~= owner .. WAITED then
      local _, _, other = string_holder(lock, value)
      if other and other[1] ~= 0 then
        -- Foreign data, or a server error.
        return other
      end
      -- Another owner's, or a hash (an earlier release's hold, a fair lock's): not ours.
      return {0, 0}
    end
    -- Deleted below unless handed over: the heir's grant overwrites the string (one write,
    -- not two).
  else
    local removed = redis.pcall('HDEL', lock, owner)
    if type(removed) == 'table' then
      if not string.find(removed.err, 'WRONGTYPE', 1, true) then
        -- READONLY (a demoted master), OOM, …: not foreign data; let the client see it.
        return redis.error_reply(removed.err)
      end
      return {-1, redis.call('TYPE', lock)['ok']}
    end
    if removed == 0 then
      return {0, 0}
    end
    if redis.call('EXISTS', lock) == 1 then
      return 1
    end
  end
  if heir and yield_ms and yield(channel, fence, owner, tonumber(yield_ms), retention_ms) then
    -- Others wait besides this client's own subscription: their turn.
    heir = nil
    waited = true
  end
  if heir then
    local token = grant(lock, fence, heir, lease_ms, retention_ms, true, nil, fenced == '0',
      plain, waited)
    if token then
      return {2, token}
    end
    -- The counter holds foreign data: release plainly; the waiter's own attempt reports it.
    waited = true
  end
  if plain then
    redis.call('DEL', lock)
  end
  if waited then
    wake(channel, '0')
  end
  -- {1, 0}, as a number: a table costs the server more to build and to send.
  return 1
end

return release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
