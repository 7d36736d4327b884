-- Extend many leases at once, only where the owner still holds the lock.
--
-- KEYS[i]    lock hash i
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner id for KEYS[i]
--
-- Returns a list with one entry per key: 1 = renewed, 0 = no longer ours (gone, taken
-- over, or the key holds foreign data).
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.pcall('HEXISTS', key, ARGV[i + 1]) == 1 then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
