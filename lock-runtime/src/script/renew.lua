-- Extend many leases at once, only where the owner still holds the lock.
--
-- KEYS[i]    lock i: this crate's mutex string (its holder's owner id, see `WAITED` in
--            prelude.lua), a mutex or fair lock hash, or the holders of a semaphore or read/write
--            lock (a sorted set with each holder's lease end), or Redisson's read/write lock
--            hash (see renew_redisson_reader)
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  owner id for KEYS[i]
--
-- Returns a list with one entry per key: 1 = renewed, 0 = no longer ours (gone, taken
-- over, its lease ended, or the key holds foreign data).

-- Semaphores in Redisson's layout (script/redisson/semaphore.rs), keyed on their owner ids,
-- which no other owner id resembles (a native one starts with its client's hex id):
-- `permits:<hex id>[,<hex id>…]#<n>` with KEYS[i] the `{N}:timeout` zset: Redisson's
-- updateLeaseTime for each id (binary in the zset), all or none: renewed while every id is
-- there and unexpired (score in epoch ms, the server's clock), else 0 (released by id,
-- reclaimed, force-released). Expired ids are left for the next reclaim. `plain:…#<n>`
-- with KEYS[i] = N (an RSemaphore's anonymous permits): the hold's own marker
-- `{N}:<owner>` (see plain_semaphore.lua), renewed while it is there.
-- Returns nil for any other owner id.
local function redisson_semaphore(key, owner, lease_ms, now)
  if string.sub(owner, 1, 6) == 'plain:' then
    local prefix = key
    if not string.find(key, '{', 1, true) then
      prefix = '{' .. key .. '}'
    end
    return redis.call('PEXPIRE', prefix .. ':' .. owner, lease_ms)
  end
  local list = string.match(owner, '^permits:([%x,]+)#%d+$')
  if not list then
    return nil
  end
  local ids = {}
  for hex in string.gmatch(list, '[^,]+') do
    local id = string.gsub(hex, '%x%x', function(cc) return string.char(tonumber(cc, 16)) end)
    local score = redis.pcall('ZSCORE', key, id)
    if type(score) ~= 'string' or tonumber(score) <= now then
      return 0
    end
    ids[#ids + 1] = id
  end
  for _, id in ipairs(ids) do
    redis.call('ZADD', key, 'XX', now + tonumber(lease_ms), id)
  end
  return 1
end

-- Layout::Redisson's read/write lock (script/redisson/rwlock.rs) is a hash with a `mode` field,
-- in which a reader's hold (a field not ending in `:write`) is also one timeout key per hold,
-- `<prefix>:<owner>:rwlock_timeout:<k>` for k = its count down to 1 (prefix `{N}`, or N when it
-- has its own tag). A Java reader's unlock keeps the hash only as long as the longest of every
-- reader's keys, so a reader renews its keys with the hash, as Redisson's read-lock renewal
-- does. Renewed only while every key of the hold is there; the hash is never shortened (other
-- readers' leases may be longer). Returns whether it renewed.
local function renew_redisson_reader(key, owner, lease_ms)
  local count = tonumber(redis.call('HGET', key, owner)) or 0
  local prefix = key
  if not string.find(key, '{', 1, true) then
    prefix = '{' .. key .. '}'
  end
  for k = count, 1, -1 do
    if redis.call('PEXPIRE', prefix .. ':' .. owner .. ':rwlock_timeout:' .. k, lease_ms) == 0 then
      return false
    end
  end
  extend(key, lease_ms)
  return count > 0
end

local renewed = {}
local now = nil
for i, key in ipairs(KEYS) do
  local owner = ARGV[i + 1]
  local held = 0
  -- 1 or 0 once decided.
  local decided = nil
  if string.sub(owner, 1, 8) == 'permits:' or string.sub(owner, 1, 6) == 'plain:' then
    now = now or now_ms()
    decided = redisson_semaphore(key, owner, ARGV[1], now)
  end
  if decided == nil then
    -- This crate's mutex first: one command when the key is one (a string).
    local value = redis.pcall('GET', key)
    if type(value) == 'string' then
      decided = 0
      if value == owner or value == owner .. WAITED then
        redis.call('PEXPIRE', key, ARGV[1])
        decided = 1
      end
    elseif not value then
      -- Gone.
      decided = 0
    else
      held = redis.pcall('HEXISTS', key, owner)
    end
  end
  renewed[i] = decided or 0
  if held == 1 then
    -- Only a Redisson-layout owner (a hyphenated client uuid) can be a Redisson reader: a
    -- native mutex's renewal costs no extra command.
    if string.find(owner, '-', 1, true) and string.sub(owner, -6) ~= ':write'
      and redis.call('HEXISTS', key, 'mode') == 1 then
      if renew_redisson_reader(key, owner, ARGV[1]) then
        renewed[i] = 1
      end
    else
      redis.call('PEXPIRE', key, ARGV[1])
      renewed[i] = 1
    end
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
