-- Redisson's RPermitExpirableSemaphore: every operation a Rust handle needs, written from its
-- on-Redis contract (see semaphore.rs for the keys and the owner ids).
--
-- KEYS[1]  {N}:timeout: zset, 16-byte binary permit id -> expiry (epoch ms, server clock)
-- KEYS[2]  N: the available permits, a decimal string
-- KEYS[3]  redisson_sc:{N}: the channel; every payload is a count
-- KEYS[4]  redisson_lock_token:{N}: the fencing counter (no TTL)
-- ARGV[1]  the operation: acquire, release, force, free, capacity, set, inspect
--
-- Replies are {code, detail} as this crate's own scripts' ({-1, type} for foreign data,
-- nothing written), except inspect's, which has inspect.lua's shape.

-- Redisson's "never expires" score (a Java permit acquired without a lease).
local NEVER = '922337203685477'

local function unhex(hex)
  return (string.gsub(hex, '%x%x', function(cc) return string.char(tonumber(cc, 16)) end))
end

local function tohex(bin)
  return (string.gsub(bin, '.', function(c) return string.format('%02x', string.byte(c)) end))
end

-- The binary permit ids of an owner id `permits:<hex>[,<hex>…]#<n>`, or nil.
local function permit_ids(owner)
  local list, n = string.match(owner, '^permits:([%x,]+)#(%d+)$')
  if not list then
    return nil
  end
  local ids = {}
  for hex in string.gmatch(list, '[^,]+') do
    if string.len(hex) ~= 32 then
      return nil
    end
    ids[#ids + 1] = unhex(string.lower(hex))
  end
  if #ids ~= tonumber(n) then
    return nil
  end
  return ids
end

-- Foreign data at either key: {-1, type}, else nil.
local function check(timeout, count)
  local kind = redis.call('TYPE', timeout)['ok']
  if kind ~= 'zset' and kind ~= 'none' then
    return {-1, kind}
  end
  return check_count(count)
end

-- Redisson's reclaim step: up to `limit` (-1: all) expired permits go back to N; the new
-- count is published when positive.
local function reclaim(timeout, count, channel, now, limit)
  local expired = redis.call('ZRANGEBYSCORE', timeout, 0, now, 'LIMIT', 0, limit)
  if #expired == 0 then
    return
  end
  for i = 1, #expired, 1000 do
    redis.call('ZREM', timeout, unpack(expired, i, math.min(i + 999, #expired)))
  end
  local value = redis.call('INCRBY', count, #expired)
  if value > 0 then
    redis.call('PUBLISH', channel, value)
  end
end

local function available(count)
  return tonumber(redis.call('GET', count) or '0')
end

local function acquire(timeout, count, channel, fence, owner, lease_ms, retention_ms, capacity)
  local bad = check(timeout, count)
  if bad then
    return bad
  end
  local ids = permit_ids(owner)
  if not ids then
    return redis.error_reply('ERR not a permit owner id: ' .. owner)
  end
  local now = now_ms()
  local expiry = now + tonumber(lease_ms)
  local live, present = 0, 0
  for _, id in ipairs(ids) do
    local score = redis.call('ZSCORE', timeout, id)
    if score then
      present = present + 1
      if tonumber(score) > now then
        live = live + 1
      end
    end
  end
  if live == #ids then
    -- A retry of an acquisition that took them (its reply was lost): ours, renewed.
    local token, reply = next_token(fence, owner, retention_ms)
    if not token then
      return reply
    end
    for _, id in ipairs(ids) do
      redis.call('ZADD', timeout, 'XX', expiry, id)
    end
    return {1, token}
  end
  if present > 0 then
    -- Taken once, and partly expired since: give them back before asking afresh.
    local back = 0
    for _, id in ipairs(ids) do
      back = back + redis.call('ZREM', timeout, id)
    end
    local value = redis.call('INCRBY', count, back)
    if back > 0 and value > 0 then
      redis.call('PUBLISH', channel, value)
    end
  end
  ensure(count, channel, capacity)
  reclaim(timeout, count, channel, now, #ids)
  local free = available(count)
  local total = free + redis.call('ZCARD', timeout)
  -- Refused only above both the capacity in force and the handle's: below the handle's, a
  -- count that Java drained (`drainPermits`, `addPermits(-k)`) makes us wait for permits to
  -- come back, as Java's `acquire` does.
  if #ids > total and #ids > tonumber(capacity) then
    return {3, math.max(0, total)}
  end
  if free >= #ids then
    local token, reply = next_token(fence, owner, retention_ms)
    if not token then
      return reply
    end
    redis.call('DECRBY', count, #ids)
    for _, id in ipairs(ids) do
      redis.call('ZADD', timeout, expiry, id)
    end
    local ttl = redis.call('PTTL', count)
    if ttl > 0 then
      redis.call('PEXPIRE', timeout, ttl)
    end
    return {1, token}
  end
  -- Busy: until the first lease ends (Java's wait hint), or -1 (poll) when it never does.
  local first = redis.call('ZRANGE', timeout, 0, 0, 'WITHSCORES')
  if first[2] and first[2] ~= NEVER then
    return {0, math.max(1, tonumber(first[2]) - now)}
  end
  return {0, -1}
end

-- Releases our permits. One permit publishes the new count (Redisson's release of one id),
-- several publish how many were released (its release of many). {0, 0} when some were not
-- ours any more (released by someone else, or expired and reclaimed).
local function release(timeout, count, channel, owner)
  local bad = check(timeout, count)
  if bad then
    return bad
  end
  local ids = permit_ids(owner)
  if not ids then
    return {0, 0}
  end
  reclaim(timeout, count, channel, now_ms(), -1)
  local removed = 0
  for _, id in ipairs(ids) do
    removed = removed + redis.call('ZREM', timeout, id)
  end
  if removed > 0 then
    local value = redis.call('INCRBY', count, removed)
    if #ids == 1 then
      redis.call('PUBLISH', channel, value)
    else
      redis.call('PUBLISH', channel, removed)
    end
  end
  if removed < #ids then
    return {0, 0}
  end
  return {1, 0}
end

-- Every leased permit back to N (force_release_all); publishes the new count.
local function force(timeout, count, channel)
  local bad = check(timeout, count)
  if bad then
    return bad
  end
  reclaim(timeout, count, channel, now_ms(), -1)
  local held = redis.call('ZCARD', timeout)
  if held == 0 then
    return {0, 0}
  end
  redis.call('DEL', timeout)
  local value = redis.call('INCRBY', count, held)
  redis.call('PUBLISH', channel, value)
  return {1, 0}
end

-- free: availablePermits; capacity: getPermits; set: setPermits(value). Replies {1, free}
-- ({1, total} for capacity).
local function capacity(timeout, count, channel, op, default_capacity, value)
  local bad = check(timeout, count)
  if bad then
    return bad
  end
  ensure(count, channel, default_capacity)
  reclaim(timeout, count, channel, now_ms(), -1)
  local free = available(count)
  if op == 'free' then
    return {1, math.max(0, free)}
  end
  local total = free + redis.call('ZCARD', timeout)
  if op == 'capacity' then
    return {1, math.max(0, total)}
  end
  local target = tonumber(value)
  if total ~= target then
    free = redis.call('INCRBY', count, target - total)
    redis.call('PUBLISH', channel, target)
  end
  return {1, math.max(0, free)}
end

-- inspect.lua's reply: {type, pttl, holders (hex id, ms left), live count, token, 0, 0,
-- subscribers, total}. Read only.
local function inspect(timeout, count, channel, fence, max_holders)
  local now = now_ms()
  local kind = redis.call('TYPE', timeout)['ok']
  local holders, live, pttl = {}, 0, 0
  if kind == 'zset' then
    live = redis.call('ZCOUNT', timeout, '(' .. now, '+inf')
    local page = redis.call('ZRANGEBYSCORE', timeout, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(max_holders))
    for i = 1, #page, 2 do
      holders[#holders + 1] = tohex(page[i])
      holders[#holders + 1] = string.format('%d', math.max(1, tonumber(page[i + 1]) - now))
    end
    local last = redis.call('ZRANGE', timeout, -1, -1, 'WITHSCORES')
    if live > 0 and last[2] then
      pttl = last[2] == NEVER and -1 or math.max(1, tonumber(last[2]) - now)
    end
  end
  local token = last_token(fence)
  local total = false
  local value = redis.pcall('GET', count)
  if type(value) == 'string' and string.match(value, '^%-?%d+$') and (kind == 'zset' or kind == 'none') then
    local leased = kind == 'zset' and redis.call('ZCARD', timeout) or 0
    total = string.format('%d', math.max(0, tonumber(value) + leased))
  end
  local subscribers = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  return {kind, pttl, holders, live, token, 0, 0, subscribers, total}
end

local op = ARGV[1]
if op == 'acquire' then
  return acquire(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
elseif op == 'release' then
  return release(KEYS[1], KEYS[2], KEYS[3], ARGV[2])
elseif op == 'force' then
  return force(KEYS[1], KEYS[2], KEYS[3])
elseif op == 'inspect' then
  return inspect(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2])
end
return capacity(KEYS[1], KEYS[2], KEYS[3], op, ARGV[2], ARGV[3])
