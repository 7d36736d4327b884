-- Group commit: the releases of one client that queued while another was in flight, in one
-- call (one server or a Sentinel master; never a cluster). Follows release.lua's `release`
-- function; no hand-off.
--
-- KEYS[2i-1], KEYS[2i]   lock hash and unlock channel of lock i
-- ARGV[i]                owner id for lock i
--
-- Returns one release.lua reply per lock, in order.
local replies = {}
for i = 1, #ARGV do
  replies[i] = release(KEYS[2 * i - 1], KEYS[2 * i], nil, ARGV[i])
end
return replies
