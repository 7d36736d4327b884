-- The previous release's `acquire.lua` (commit 8bd097d), verbatim; it runs after `prelude.lua`
-- (see there).

-- Take the lock if it is free or already ours; otherwise report the holder's remaining lease.
--
-- KEYS[1]  lock hash (field = owner id, value = hold count)
-- KEYS[2]  fencing counter
-- KEYS[3]  unlock channel (counted when clients take turns: see "Turns" in prelude.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  fencing counter retention in milliseconds
-- ARGV[4]  '1' when the owner's client waits for the lock (is subscribed to its channel)
--
-- Returns {1, token} when taken (retaking our own hold is idempotent, so a retried acquire
-- after a timeout is safe), {0, pttl} when another owner holds it (pttl is -1 when a
-- foreign key has no TTL), {-1, type} when a key holds data that is not ours (nothing written).
local function acquire(lock, fence, channel, owner, lease_ms, retention_ms, waiting)
  if redis.call('EXISTS', lock) == 1 then
    local mine = redis.pcall('HEXISTS', lock, owner)
    if type(mine) == 'table' then
      if not string.find(mine.err, 'WRONGTYPE', 1, true) then
        -- Not foreign data: READONLY (a demoted master), OOM, …; let the client see it.
        return redis.error_reply(mine.err)
      end
      return {-1, redis.call('TYPE', lock)['ok']}
    end
    if mine == 0 then
      return {0, redis.call('PTTL', lock)}
    end
  end

  local token, reply = grant(lock, fence, owner, lease_ms, retention_ms, nil, {channel, waiting == '1'})
  if not token then
    return reply
  end
  return {1, token}
end

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
