-- Read Redisson's RReadWriteLock (Layout::Redisson) without changing it, in the shape of
-- inspect.lua's reply, so that `Lock::info` reads it as it reads every lock.
--
-- KEYS[1]  the lock hash N
-- KEYS[2]  fencing counter (redisson_lock_token:{N})
-- KEYS[3]  channel redisson_rwlock:{N} (only its subscribers are counted)
-- KEYS[4]  every reader's timeout key prefix: `{N}`, or N when it has its own tag
-- ARGV[1]  the most holders to list
--
-- Returns {type, pttl, holders, holder count, token, 0, 0, subscribers, false}: `holders` a flat
-- list of field and milliseconds left, for every field but `mode` (a writer's: the hash's
-- PTTL; a reader's: its longest timeout key, or the hash's PTTL when it has none left).
local function inspect(lock, fence, channel, prefix, max_holders)
  local limit = tonumber(max_holders)
  local kind = redis.call('TYPE', lock)['ok']
  local pttl = 0
  local holders = {}
  local count = 0
  if kind == 'hash' then
    pttl = redis.call('PTTL', lock)
    count = redis.call('HLEN', lock)
    if redis.call('HEXISTS', lock, 'mode') == 1 then
      count = count - 1
    end
    local fields
    if count <= limit then
      fields = redis.call('HGETALL', lock)
    else
      fields = redis.call('HSCAN', lock, 0, 'COUNT', limit)[2]
    end
    for i = 1, #fields, 2 do
      local field = fields[i]
      if field ~= 'mode' and #holders < 2 * limit then
        local left = -3
        local holds = tonumber(fields[i + 1])
        if holds and string.sub(field, -6) ~= ':write' then
          -- At most a bounded number of probes per reader (a read-only look).
          for k = holds, math.max(1, holds - 99), -1 do
            local ttl = redis.call('PTTL', prefix .. ':' .. field .. ':rwlock_timeout:' .. k)
            if ttl > left then
              left = ttl
            end
          end
        end
        if left <= 0 then
          left = pttl
        end
        holders[#holders + 1] = field
        holders[#holders + 1] = string.format('%d', left)
      end
    end
  end
  local token = last_token(fence)
  local subscribers = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  return {kind, pttl, holders, count, token, 0, 0, subscribers, false}
end

return inspect(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1])
