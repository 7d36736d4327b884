-- Extend many leases at once, only where the owner still holds the lock.
--
-- KEYS[i]    lock i: a mutex or fair lock hash, or the holders of a semaphore or read/write
--            lock (a sorted set with each holder's lease end)
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner id for KEYS[i]
--
-- Returns a list with one entry per key: 1 = renewed, 0 = no longer ours (gone, taken
-- over, its lease ended, or the key holds foreign data).
local renewed = {}
local now = nil
for i, key in ipairs(KEYS) do
  local owner = ARGV[i + 1]
  local held = redis.pcall('HEXISTS', key, owner)
  renewed[i] = 0
  if held == 1 then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  elseif type(held) == 'table' then
    local ends = redis.pcall('ZSCORE', key, owner)
    if type(ends) == 'string' then
      now = now or now_ms()
      if tonumber(ends) > now then
        redis.call('ZADD', key, 'XX', now + tonumber(ARGV[1]), owner)
        extend(key, ARGV[1])
        renewed[i] = 1
      end
    end
  end
end
return renewed
