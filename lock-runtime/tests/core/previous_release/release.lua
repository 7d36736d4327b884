-- The previous release's `release.lua` (commit 8bd097d), verbatim; it runs after `prelude.lua`
-- (see there).

-- Release our hold; then either hand the lock to a waiting task of the same client, or wake
-- a waiter of any client.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel
-- KEYS[3]  fencing counter
-- ARGV[1]  owner id
-- ARGV[2]  (optional) the next owner: a task of the releasing client waiting for this lock
-- ARGV[3]  the next owner's lease in milliseconds
-- ARGV[4]  fencing counter retention in milliseconds
-- ARGV[5]  (optional) the releasing client has handed this lock on as often as it may in a row:
--          if another process waits for it (subscribes to its channel), let it fall free
--          instead, and keep it from this client's tasks until the clients waiting longer had
--          their turn (lapsing this many milliseconds after the last grant: `yield` in
--          prelude.lua)
--
-- Returns {1, 0} when released (the key is deleted and the unlock message published once no
-- owner is left), {2, token} when released and handed to ARGV[2] with this fencing token (no
-- message: the lock never fell free), {0, 0} when this owner does not hold the lock, {-1, type}
-- for foreign data.
local function release(lock, channel, fence, owner, heir, lease_ms, retention_ms, yield_ms)
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
  if redis.call('EXISTS', lock) == 0 then
    if heir and yield_ms then
      local waiting = redis.call('PUBSUB', 'NUMSUB', channel)[2]
      if waiting > 1 then
        -- Others wait besides this client's own subscription: their turn.
        yield(fence, owner, tonumber(yield_ms), waiting)
        heir = nil
      end
    end
    if heir then
      local token = grant(lock, fence, heir, lease_ms, retention_ms, true)
      if token then
        return {2, token}
      end
      -- The counter holds foreign data: release plainly; the waiter's own attempt reports it.
    end
    wake(channel, '0')
  end
  return {1, 0}
end

return release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
