-- Shared by acquire.lua and release.lua (prepended to both): grant a free lock to an owner.
--
-- Returns the new fencing token, or nil and a reply for the script to return as is (foreign
-- data at the fencing counter, or a server error).
--
-- Tokens are never below the server clock in microseconds: they keep increasing when the
-- counter is lost (first use, retention passed, a restart without persistence) and across a
-- failover to a replica whose counter lagged, as long as the servers' clocks agree to within
-- the time between the two grants. One grant per microsecond is far above any lock's
-- hand-over rate, so the counter does not run ahead of the clock. One read and one write of
-- the counter per grant (its retention is set by the same SET).
local function grant(lock, fence, owner, lease_ms, retention_ms)
  local last = redis.pcall('GET', fence)
  if type(last) == 'table' then
    if not string.find(last.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply(last.err)
    end
    -- A hash, a list, …: not a counter. Nothing was written.
    return nil, {-1, redis.call('TYPE', fence)['ok']}
  end
  local now = redis.call('TIME')
  local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
  if last then
    -- Our counters are decimal integers well below 2^53 (Lua numbers are doubles).
    if not string.match(last, '^%-?%d+$') or string.len(last) > 17 then
      return nil, {-1, 'string'}
    end
    local n = tonumber(last)
    if n >= 9007199254740991 or n <= -9007199254740991 then
      return nil, {-1, 'string'}
    end
    if n >= token then
      token = n + 1
    end
  end
  redis.call('SET', fence, string.format('%d', token), 'PX', retention_ms)
  redis.call('HSET', lock, owner, 1)
  redis.call('PEXPIRE', lock, lease_ms)
  return token
end

