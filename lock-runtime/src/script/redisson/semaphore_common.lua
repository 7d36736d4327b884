-- Redisson's semaphores' count N, shared by permits.lua and plain_semaphore.lua (prepended to
-- each, after prelude.lua).

-- Foreign data at N (anything but a decimal string of at most 15 characters): {-1, type},
-- else nil.
local function check_count(count)
  local value = redis.pcall('GET', count)
  local bad = foreign(value, count)
  if bad then
    return bad
  end
  if value and (not string.match(value, '^%-?%d+$') or string.len(value) > 15) then
    return {-1, 'string'}
  end
  return nil
end

-- Java's trySetPermits with the handle's capacity: N is set (and published) when absent.
local function ensure(count, channel, capacity)
  if not redis.call('GET', count) then
    redis.call('SET', count, capacity)
    redis.call('PUBLISH', channel, capacity)
  end
end

