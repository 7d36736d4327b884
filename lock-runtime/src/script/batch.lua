-- Group commit: several mutex acquires and releases of one client, run in the order they were
-- queued while another of its writes was in flight. Follows `acquire.lua` and `release.lua`
-- (their functions, without their last lines), so each operation is exactly the one its own
-- script would have run.
--
-- ARGV  for each operation: 'a' (acquire), 'p' (a plain acquire: `SET NX PX GET`) or 'r'
--       (release), its key count, its argument count, its arguments
-- KEYS  each operation's keys, in the same order
--
-- Returns one reply per operation, as its own script would have replied; an operation that
-- raised an error (a server error its script does not turn into a reply) gets that error in its
-- place, and the operations after it still run.
local replies = {}
local key, arg = 1, 1
while arg <= #ARGV do
  local kind, keys, count = ARGV[arg], tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
  local args = {unpack(ARGV, arg + 3, arg + 2 + count)}
  local ok, reply
  if kind == 'a' then
    ok, reply = pcall(acquire, KEYS[key], KEYS[key + 1], KEYS[key + 2], unpack(args))
  elseif kind == 'p' then
    ok, reply = pcall(plain_acquire, KEYS[key], unpack(args))
  else
    -- Two keys without an heir (no fencing counter), three with one.
    local fence = nil
    if keys == 3 then
      fence = KEYS[key + 2]
    end
    ok, reply = pcall(release, KEYS[key], KEYS[key + 1], fence, unpack(args))
  end
  key = key + keys
  if not ok then
    -- `redis.call` raises its error as a table with `err`; anything else is a plain message.
    if type(reply) ~= 'table' or not reply.err then
      reply = redis.error_reply(tostring(reply))
    end
  end
  replies[#replies + 1] = reply
  arg = arg + 3 + count
end
return replies
