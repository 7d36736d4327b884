-- A fenced value at KEYS[1]: a hash with the field `token` (the newest accepted fencing token,
-- in decimal) and the field `value` (absent until the first 'set'). Nothing else may be there.
--
-- ARGV[1]: 'get', 'advance' or 'set'; ARGV[2]: the token ('advance', 'set'); ARGV[3]: the value
-- ('set').
-- Replies: {'ok', token or nil, value or nil}, {'stale', newest token}, {'foreign', what}.

local key = KEYS[1]
local op = ARGV[1]

-- Tokens are u64 in canonical decimal (no sign, no leading zero): compare them as strings,
-- by length first. Lua numbers are doubles, exact only up to 2^53.
local function is_token(s)
  return s ~= false and #s <= 20 and string.match(s, '^%d+$') ~= nil
    and (#s == 1 or string.sub(s, 1, 1) ~= '0')
end
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local kind = redis.call('TYPE', key)['ok']
local last, value = false, false
if kind == 'hash' then
  local got = redis.call('HMGET', key, 'token', 'value')
  last, value = got[1], got[2]
  if not is_token(last) then
    return {'foreign', 'a hash without a fencing token'}
  end
  local fields = 1
  if value then fields = 2 end
  if redis.call('HLEN', key) ~= fields then
    return {'foreign', 'a hash with fields other than token and value'}
  end
elseif kind ~= 'none' then
  return {'foreign', 'a ' .. kind}
end

if op == 'get' then
  return {'ok', last, value}
end
local token = ARGV[2]
if last and older(token, last) then
  return {'stale', last}
end
if op == 'set' then
  redis.call('HSET', key, 'token', token, 'value', ARGV[3])
else
  redis.call('HSET', key, 'token', token)
end
return {'ok', token, false}
