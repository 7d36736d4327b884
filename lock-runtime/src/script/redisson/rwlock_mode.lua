-- Shared by the scripts of Redisson's RReadWriteLock (prepended after prelude.lua): `mode_of`.

-- The lock's mode ('read', 'write', or false when there is no lock), or nil and the reply for
-- data that is not a read/write lock.
local function mode_of(lock)
  local mode = redis.pcall('HGET', lock, 'mode')
  local bad = foreign(mode, lock)
  if bad then
    return nil, bad
  end
  if not mode then
    if redis.call('EXISTS', lock) == 1 then
      -- A hash without a mode: an RLock's (a mutex), not a read/write lock.
      return nil, {-1, 'hash'}
    end
    return false
  end
  if mode ~= 'read' and mode ~= 'write' then
    return nil, {-1, 'hash'}
  end
  return mode
end

