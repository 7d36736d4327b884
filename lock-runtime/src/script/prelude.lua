-- Shared functions, prepended to every script that grants, renews or releases: `next_token`
-- (the fencing counter), `grant` (a free mutex to an owner), `grant_member` (a sorted-set lock),
-- `clock_us` and `now_ms`, `extend`, and the helpers of the lock family's sorted sets
-- (`foreign`, `expire`, `first_end`, the semaphore's `permits_held` and `capacity_in_force`,
-- the fair lock's `queue_head`).

-- The server clock in microseconds, read once per script call: one `TIME` however many grants
-- the call makes (a group of acquires, a release that hands the lock over). Tokens stay
-- strictly increasing (a grant takes the last token + 1 when the clock has not passed it).
local clock_read
local function clock_us()
  if not clock_read then
    local now = redis.call('TIME')
    clock_read = tonumber(now[1]) * 1000000 + tonumber(now[2])
  end
  return clock_read
end

-- The server clock in milliseconds.
local function now_ms()
  return math.floor(clock_us() / 1000)
end

-- Fencing epochs. Behind Sentinel the client sends each call that can issue a token the
-- failover epoch of the master it sends it to (the sentinels' `config-epoch` for the master,
-- read with its address and run id in one answer: `topology/sentinel.rs`), in the fencing
-- argument: `<retention ms>:<epoch>`; on Redis Cluster `<retention ms>:node`, and the node
-- reads its own (`node_epoch`); one server: `<retention ms>` alone. A token's floor is
-- then `EPOCH_BASE + epoch × EPOCH_SPAN + (clock − CLOCK_BASE)` instead of the clock alone, so
-- a grant under a later epoch outranks every grant under an earlier one (a deposed master that
-- kept granting, a promoted replica whose clock is behind), as long as the two servers' clocks
-- and the time between the grants differ by less than `EPOCH_SPAN` (about 4.8 hours) per epoch
-- between them. Every such floor is above every clock-only token (2^52 µs is in 2112), so
-- tokens never go backwards when a deployment, or a client of an older version, moves from one
-- way to the other (an older client's grant takes the last token + 1). The floors stay below
-- 2^53 (Lua's numbers are doubles) for epochs up to `(FLOOR_CEILING − EPOCH_BASE − (clock −
-- CLOCK_BASE)) / EPOCH_SPAN`: about 170,000 in 2076, 78,000 in 2126. A larger epoch counts as
-- that many (the tokens keep increasing, without ranking later epochs any higher); from 2168 on
-- the floor stays at `FLOOR_CEILING` and tokens increase by the counter alone, up to 2^53 − 1,
-- past which a grant is refused as for a counter that is not ours.
local EPOCH_BASE = 4503599627370496
local EPOCH_SPAN = 17179869184
local CLOCK_BASE = 1767225600000000
-- 2^53 − 2^32: room for 2^32 grants above the highest floor.
local FLOOR_CEILING = 9007194959773696

-- The epoch of the Redis Cluster node running the call: `cluster_my_epoch` of `CLUSTER INFO`,
-- its `configEpoch`, which a failover (and a slot's import) raises above every other node's,
-- so a promoted replica's is above its deposed master's; nil where it cannot be read (not a
-- cluster node, the command refused): the clock floor then, as before epochs.
--
-- `CLUSTER INFO` costs the server about 17 µs (it counts the states of all 16384 slots; the
-- other sources, `CLUSTER NODES` and `SHARDS`, as much), so the function library keeps what it
-- read for `NODE_EPOCH_KEPT_US` of the node's clock (an `EVAL` reads it on every call). That
-- is safe because these scripts write: a replica refuses them, so a replica promoted keeps
-- nothing from before its promotion, and reads its new epoch at its first grant; a master's
-- own epoch changes otherwise only when it imports a slot (with the slot's keys, counters
-- included) or settles a collision of epochs, neither of which loses a token.
local NODE_EPOCH_KEPT_US = 100000
local node_epoch_read = { at = nil, epoch = nil }
local function node_epoch()
  local clock = clock_us()
  local kept = node_epoch_read.at
  if kept and clock >= kept and clock - kept < NODE_EPOCH_KEPT_US then
    return node_epoch_read.epoch
  end
  local info = redis.pcall('CLUSTER', 'INFO')
  local epoch = nil
  if type(info) == 'string' then
    epoch = tonumber(string.match(info, 'cluster_my_epoch:(%d+)'))
  end
  node_epoch_read.at = clock
  node_epoch_read.epoch = epoch
  return epoch
end

-- The fencing argument read apart: the counter's retention (milliseconds, as sent) and the
-- epoch (`:node` on a cluster: the node's own, `node_epoch`), or nil without one.
local function fencing(arg)
  local colon = string.find(arg, ':', 1, true)
  if not colon then
    return arg, nil
  end
  local epoch = string.sub(arg, colon + 1)
  if epoch == 'node' then
    return string.sub(arg, 1, colon - 1), node_epoch()
  end
  return string.sub(arg, 1, colon - 1), tonumber(epoch)
end

-- The least token a grant may take now: the clock in microseconds, or with `epoch` its floor
-- (see "Fencing epochs" above).
local function token_floor(epoch)
  local clock = clock_us()
  if not epoch then
    return clock
  end
  local since = clock - CLOCK_BASE
  local most = math.max(0, math.floor((FLOOR_CEILING - EPOCH_BASE - since) / EPOCH_SPAN))
  return math.min(EPOCH_BASE + math.min(epoch, most) * EPOCH_SPAN + since, FLOOR_CEILING)
end

-- The fencing token last issued at `fence` (its digits, without a yield marker: see `yield`
-- below), or false when there is none: what the inspect scripts report.
local function last_token(fence)
  local counter = redis.pcall('GET', fence)
  if type(counter) == 'string' then
    return string.match(counter, '^(%-?%d+)') or false
  end
  return false
end

-- Makes `key` live at least `ms` more milliseconds (never shortens it).
local function extend(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- The reply for a key that holds data of another type, or nil when `result` (a `pcall`'s) is
-- no error. Errors other than WRONGTYPE (READONLY, OOM, …) are raised for the client to see.
local function foreign(result, key)
  if type(result) == 'table' and result.err then
    if not string.find(result.err, 'WRONGTYPE', 1, true) then
      return redis.error_reply(result.err)
    end
    return {-1, redis.call('TYPE', key)['ok']}
  end
  return nil
end

-- Publishes `message` on `channel` to wake waiters, after the change they are told about was
-- made. A refusal (an ACL user without `publish`) is no error of the call: the release (or
-- force-unlock, or capacity change) the caller asked for is done and stays done, and the
-- waiters it would have woken take their turn at their own retry timers. The refusal is in the
-- server's log (and its ACL log).
local function wake(channel, message)
  local sent = redis.pcall('PUBLISH', channel, message)
  if type(sent) == 'table' and sent.err then
    redis.log(redis.LOG_WARNING, 'lock script: no wake-up on ' .. channel .. ': ' .. sent.err)
  end
end

-- Removes the holders (or waiters' places) of sorted set `set` whose lease (or place) ended.
local function expire(set, now)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
end

-- Milliseconds until the first entry of sorted set `set` ends, or nil when it is empty.
local function first_end(set, now)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if first[2] then
    return math.max(1, tonumber(first[2]) - now)
  end
  return nil
end

-- Turns: when clients of several processes wait for one mutex, each client's tasks hand it on
-- among themselves at most `handoff_limit` times in a row (`handoff.rs`); then the client ends
-- its turn (`yield` below) and the client whose last turn is longest ago takes the next one.
-- The order lives on the fencing counter, after its digits, as a mark:
-- `<digits>:[+<current>,]<client>[,<client>…]:<until µs>`: the client whose turn it is (if its
-- turn began while the mark was live), then the clients whose turns ended last, most recent
-- first, who are refused the lock; `until` is when the mark lapses.

-- How long a mark outlives the last grant or turn's end, in microseconds (the client's
-- `handoff::YIELD`): a lock whose other waiters went away idles at most that long.
local TURN_LAPSE_US = 5000
-- The most clients a mark lists.
local TURNS_MAX = 64

-- The client id of an owner id (`<client>:<acquisition>`), or nil.
local function client_of(owner)
  return string.match(owner, '^(.*):')
end

-- A fencing counter's value read apart: its digits (nil when the value is not ours) and, when
-- it carries a mark that has not lapsed at `clock` (or any mark, with `lapsed_too`), the
-- clients whose turns ended last, the client whose turn it is (or nil) and when the mark
-- lapses.
local function read_counter(value, clock, lapsed_too)
  local digits, body, untils = string.match(value, '^(%-?%d+):([%w,+]+):(%d+)$')
  if not digits then
    return string.match(value, '^%-?%d+$')
  end
  if tonumber(untils) <= clock and not lapsed_too then
    return digits
  end
  local current, ended = nil, {}
  for id in string.gmatch(body, '[^,]+') do
    if string.sub(id, 1, 1) == '+' then
      current = string.sub(id, 2)
    else
      ended[#ended + 1] = id
    end
  end
  return digits, ended, current, untils
end

-- Puts `client` first among the turns that `ended`, keeping at most `keep` of them.
local function ended_turn(ended, client, keep)
  local order = {client}
  for _, id in ipairs(ended) do
    if #order >= keep then
      break
    end
    if id ~= client then
      order[#order + 1] = id
    end
  end
  return order
end

-- Whether `client` is among the turns that `ended`.
local function has_ended(ended, client)
  for _, id in ipairs(ended) do
    if id == client then
      return true
    end
  end
  return false
end

-- Whether a client other than the asking one waits for the lock: subscribed to its unlock
-- channel (`asking`: {channel, whether the asking client is subscribed}). Without `asking`
-- (a grant that does not tell), assumed so.
local function others_wait(asking)
  if not asking then
    return true
  end
  local subscribers = redis.call('PUBSUB', 'NUMSUB', asking[1])[2]
  return subscribers > (asking[2] and 1 or 0)
end

-- A mark's turns, written out.
local function turns_body(current, ended)
  local body = table.concat(ended, ',')
  if current then
    return '+' .. current .. (body == '' and '' or ',' .. body)
  end
  return body
end

-- `next_token`'s way for the common case, in fewer of Redis's calls: a token-issuing grant
-- whose counter is absent or holds plain digits (no turn mark) and is kept for a while. It
-- writes the clock and reads what was there in one `SET … KEEPTTL GET`. For any other value
-- there (a turn mark, foreign data, 2^53 and up) it returns nil and that value, which
-- `next_token` then handles as if it had read it, and puts back as it was (value and TTL) when
-- it is not ours. Returns nil alone, having written nothing, for a retention of 0 and for a
-- server error (WRONGTYPE, OOM, …): `next_token` then reads the counter itself.
--
-- The retention is refreshed when the counter is created, when it has run ahead of the clock
-- (each such grant writes last + 1 with the retention), and otherwise once the clock enters a
-- new tenth of the retention since the last token: so a counter in use is kept at least nine
-- tenths of its retention after its last grant. Its expiry cannot make tokens go backwards:
-- the counter is behind the clock whenever its retention is not refreshed, and a fresh counter
-- starts at the clock. (Against a read, a write with the retention and the clock: one Redis
-- call less, about 1.2 µs of the server's CPU per fenced grant in a `redis-cli --pipe`
-- harness on Redis 7.0; `next_token`'s general handling cost about 1.4 µs more.)
local function plain_next_token(fence, retention_ms, epoch)
  local retention = tonumber(retention_ms)
  if retention <= 0 then
    return nil
  end
  local token = token_floor(epoch)
  local last = redis.pcall('SET', fence, string.format('%d', token), 'KEEPTTL', 'GET')
  if not last then
    redis.call('PEXPIRE', fence, retention_ms)
    return token
  end
  if type(last) ~= 'string' then
    return nil
  end
  local n = string.len(last) <= 16 and string.match(last, '^%d+$') and tonumber(last)
  if not n or n >= 9007199254740991 then
    return nil, last
  end
  if n >= token then
    token = n + 1
    redis.call('SET', fence, string.format('%d', token), 'PX', retention_ms)
  else
    local tenth = retention * 100
    if math.floor(n / tenth) ~= math.floor(token / tenth) then
      redis.call('PEXPIRE', fence, retention_ms)
    end
  end
  return token
end

-- Bumps the fencing counter for a grant to `owner`; `handoff` when the grant hands the lock
-- over within the turn of the client that held it (a local hand-off: see `yield` below).
-- `asking`, for an acquire: {the lock's unlock channel, whether the owner's client is
-- subscribed to it}, to tell whether another client waits. `lazy`: a grant that issues no
-- token (tokens on demand, `token.lua`): it keeps the turns exactly as a token-issuing grant
-- would, but leaves the counter's digits as they are and writes nothing when no turn mark is
-- live (an uncontended lazy grant only reads the counter, usually absent), and returns 0.
--
-- Returns the new fencing token, or nil and a reply for the script to return as is (foreign
-- data at the fencing counter, a server error, or {0, ms} while the owner's client had one of
-- the last turns and another client waits: see `yield`).
--
-- Tokens are never below the server clock in microseconds: they keep increasing when the
-- counter is lost (first use, retention passed, a restart without persistence) and across a
-- failover to a replica whose counter lagged, as long as the servers' clocks agree to within
-- the time between the two grants. One grant per microsecond is far above any lock's
-- hand-over rate, so the counter does not run ahead of the clock. A token-issuing grant takes
-- `plain_next_token`'s way first (one write that reads the counter); a lazy grant, or a
-- counter that way does not handle, one read and one write of the counter (its retention is
-- set by the same SET; a retention of 0 keeps it).
local function next_token(fence, owner, fencing_arg, handoff, asking, lazy)
  local retention_ms, epoch = fencing(fencing_arg)
  local replaced = nil
  if not lazy then
    local token
    token, replaced = plain_next_token(fence, retention_ms, epoch)
    if token then
      return token
    end
  end
  local last = replaced
  if last == nil then
    last = redis.pcall('GET', fence)
  end
  if type(last) == 'table' then
    if not string.find(last.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply(last.err)
    end
    -- A hash, a list, …: not a counter. Nothing was written.
    return nil, {-1, redis.call('TYPE', fence)['ok']}
  end
  if lazy and not last then
    return 0
  end
  local clock = clock_us()
  local token = token_floor(epoch)
  -- The turn mark, when one is live.
  local mark = ''
  -- Whether a live mark was read (a lazy grant then writes the counter, even to clear it).
  local marked = false
  if last then
    -- Our counters are decimal integers well below 2^53 (Lua numbers are doubles), optionally
    -- followed by a turn mark (see "Turns" above).
    local digits, ended, current, untils = read_counter(last, clock)
    local n = digits and string.len(digits) <= 17 and tonumber(digits)
    if not n or n >= 9007199254740991 or n <= -9007199254740991 then
      if replaced then
        -- Not ours: put back as it was (`plain_next_token` wrote the clock there).
        redis.call('SET', fence, replaced, 'KEEPTTL')
      end
      return nil, {-1, 'string'}
    end
    marked = ended ~= nil
    if ended then
      if not handoff then
        -- A new turn. The turn before it ended with a plain release: it counts as ended.
        if current then
          ended = ended_turn(ended, current, math.max(#ended, 1))
          current = nil
        end
        local client = client_of(owner)
        if has_ended(ended, client) then
          if others_wait(asking) then
            -- This client had one of the last turns: a client waiting longer goes first.
            local kept = turns_body(nil, ended) .. ':' .. untils
            redis.call('SET', fence, digits .. ':' .. kept, 'KEEPTTL')
            return nil, {0, math.ceil((tonumber(untils) - clock) / 1000)}
          end
          -- Nobody else waits: no turns to take.
          ended = nil
        end
        current = client
      end
      if ended then
        -- Kept from lapsing while the lock changes hands among the waiting clients.
        local lapse = math.max(tonumber(untils), clock + TURN_LAPSE_US)
        mark = ':' .. turns_body(current, ended) .. ':' .. string.format('%d', lapse)
      end
    end
    if n >= token then
      token = n + 1
    end
    if lazy then
      if not marked and mark == '' then
        return 0
      end
      -- The digits stay: no token is issued.
      token = n
    end
  end
  if tonumber(retention_ms) > 0 then
    redis.call('SET', fence, string.format('%d', token) .. mark, 'PX', retention_ms)
  else
    -- Kept for ever: Redisson's token key, which Java services `INCR` (a TTL would let
    -- their tokens restart at 1).
    redis.call('SET', fence, string.format('%d', token) .. mark)
  end
  if lazy then
    return 0
  end
  return token
end

-- The mutex of this crate's layout is a string: its holder's owner id, then `WAITED` once a
-- client waits for it (a waiting attempt that found it held marks it: `acquire.lua`). A release
-- publishes the unlock message only when the mark is there, so a lock nobody waits for is
-- taken with a plain `SET NX PX` and released without a message. (A fair lock, and every lock
-- in Redisson's layout, is a hash of owner → hold count, and its release always publishes.)
local WAITED = '!'

-- Whether `value` (a string at a mutex key, its mark removed) is an owner id of this crate's
-- layout (`<client hex>:<n>`), not data of someone else's.
local function is_owner_id(value)
  return string.match(value, '^%x+:%d+$') ~= nil
end

-- The holder of a mutex string at `lock`: its owner id (nil when free) and whether a waiter
-- marked it; or nil, false and the reply for a key that is no mutex string: {0, pttl} for a
-- hash (a client of an earlier release of this crate, which kept the mutex as a hash, or a
-- fair lock of the same name: held, to be waited for), {-1, type} for anything else (a string
-- that is no owner id included), a server error (READONLY, …) as it is. `value`: the `GET` of
-- `lock` (its `pcall`), when the caller has read it already.
local function string_holder(lock, value)
  if value == nil then
    value = redis.pcall('GET', lock)
  end
  if type(value) == 'table' then
    if not string.find(value.err, 'WRONGTYPE', 1, true) then
      return nil, false, redis.error_reply(value.err)
    end
    local kind = redis.call('TYPE', lock)['ok']
    if kind == 'hash' then
      return nil, false, {0, redis.call('PTTL', lock)}
    end
    return nil, false, {-1, kind}
  end
  if not value then
    return nil, false
  end
  local marked = string.sub(value, -1) == WAITED
  if marked then
    value = string.sub(value, 1, -2)
  end
  if not is_owner_id(value) then
    return nil, false, {-1, 'string'}
  end
  return value, marked
end

-- Whether `owner` holds the hash lock at `lock` (a fair lock, or a mutex in Redisson's
-- layout): true or false; or nil and the reply for data of another type ({-1, type}, nothing
-- written) or for a server error (READONLY from a demoted master, OOM, …: the client sees it).
local function hash_holds(lock, owner)
  local mine = redis.pcall('HEXISTS', lock, owner)
  if type(mine) == 'table' then
    if not string.find(mine.err, 'WRONGTYPE', 1, true) then
      return nil, redis.error_reply(mine.err)
    end
    return nil, {-1, redis.call('TYPE', lock)['ok']}
  end
  return mine == 1
end

-- Grants a free mutex (or fair lock) to `owner`: a new fencing token (0 when `lazy`), the
-- hold, the lease (`handoff`, `asking`, `lazy`: see `next_token`). `plain`: the mutex string of
-- this crate's layout (marked `WAITED` when `waited`), else a hash.
local function grant(lock, fence, owner, lease_ms, retention_ms, handoff, asking, lazy, plain, waited)
  local token, reply = next_token(fence, owner, retention_ms, handoff, asking, lazy)
  if not token then
    return nil, reply
  end
  if plain then
    redis.call('SET', lock, waited and owner .. WAITED or owner, 'PX', lease_ms)
  else
    redis.call('HSET', lock, owner, 1)
    redis.call('PEXPIRE', lock, lease_ms)
  end
  return token
end

-- Grants the sorted-set lock `set` (a semaphore's or read/write lock's holders) to `owner`: a
-- new fencing token, and the holder's entry with its lease end. Returns the token, or nil and a
-- reply as `next_token` does (a client whose turn ended is refused: see "Turns", unless
-- `retake`, a retry of a grant already made, which the turns leave as they are).
local function grant_member(set, fence, owner, lease_ms, retention_ms, now, retake)
  local token, reply = next_token(fence, owner, retention_ms, retake)
  if not token then
    return nil, reply
  end
  redis.call('ZADD', set, now + tonumber(lease_ms), owner)
  extend(set, lease_ms)
  return token
end

-- The permits a semaphore holder's owner id (or member) carries: `#<permits>` at its end.
local function permits_of(member)
  return tonumber(string.match(member, '#(%d+)$')) or 1
end

-- The permits held in semaphore `set` by holders whose lease has not ended.
local function permits_held(set, now)
  local used = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', set, '(' .. now, '+inf')) do
    used = used + permits_of(member)
  end
  return used
end

-- A semaphore's capacity in force: the one stored at `stored` (a decimal string, set by an
-- operator), else `default`. Returns nil and a reply for data at `stored` that is not ours.
local function capacity_in_force(stored, default)
  local value = redis.pcall('GET', stored)
  local bad = foreign(value, stored)
  if bad then
    return nil, bad
  end
  if value and (not string.match(value, '^%d+$') or string.len(value) > 10) then
    return nil, {-1, 'string'}
  end
  return tonumber(value or default)
end

-- Fair-lock waiters: drops those whose place ended; returns the first one still queued, if
-- any. A queue entry without a place (written by something else) is dropped too.
local function queue_head(queue, places, now)
  local dead = redis.call('ZRANGEBYSCORE', places, '-inf', now, 'LIMIT', 0, 1000)
  for _, owner in ipairs(dead) do
    redis.call('ZREM', queue, owner)
    redis.call('ZREM', places, owner)
  end
  for _ = 1, 100 do
    local first = redis.call('ZRANGE', queue, 0, 0)[1]
    if not first or redis.call('ZSCORE', places, first) then
      return first
    end
    redis.call('ZREM', queue, first)
  end
  return nil
end

-- Ends `owner`'s client's turn at a lock if clients of other processes wait for it (more
-- subscribers of its `channel` than this client's own; see "Turns" above) and returns whether
-- it did: the client has handed the lock on locally as often as it may in a row, lets it fall
-- free and goes first among the ended turns, of which the mark keeps as many as wait (this
-- client included) less one. So the waiting client whose last turn is longest ago takes the
-- lock, whatever order Redis delivered the unlock message in. The mark lapses `yield_ms` from
-- now, or `TURN_LAPSE_US` after the next grant.
local function yield(channel, fence, owner, yield_ms, fencing_arg)
  local waiting = redis.call('PUBSUB', 'NUMSUB', channel)[2]
  if waiting <= 1 then
    return false
  end
  local retention_ms = fencing(fencing_arg)
  local last = redis.pcall('GET', fence)
  local client = client_of(owner)
  if type(last) == 'table' or not client then
    return true
  end
  if not last then
    -- No counter yet (the lock's grants issued no token): the mark starts one at 0, below
    -- every token (tokens are never below the server clock), kept as long as a counter is.
    local mark = '0:' .. client .. ':' .. string.format('%d', clock_us() + yield_ms * 1000)
    if tonumber(retention_ms) > 0 then
      redis.call('SET', fence, mark, 'PX', retention_ms)
    else
      redis.call('SET', fence, mark)
    end
    return true
  end
  local clock = clock_us()
  -- The order of the last turns, even from a lapsed mark: a turn passed between the tasks of
  -- one process in memory (without a grant in Redis to keep the mark from lapsing) still
  -- ends in its place in the cycle.
  local digits, ended = read_counter(last, clock, true)
  if not digits then
    return true
  end
  ended = ended_turn(ended or {}, client, math.min(waiting - 1, TURNS_MAX))
  local lapse = string.format('%d', clock + yield_ms * 1000)
  redis.call('SET', fence, digits .. ':' .. turns_body(nil, ended) .. ':' .. lapse, 'KEEPTTL')
  return true
end
