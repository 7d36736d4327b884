-- Group commit: the acquires of one client that queued while another was in flight, in one
-- call (one server or a Sentinel master; never a cluster, where keys of a call share a slot).
-- Follows acquire.lua's `acquire` function.
--
-- KEYS[2i-1], KEYS[2i]   lock hash and fencing counter of lock i
-- ARGV[1]                fencing counter retention in milliseconds
-- ARGV[2i], ARGV[2i+1]   owner id and lease in milliseconds for lock i
--
-- Returns one acquire.lua reply per lock, in order.
local replies = {}
for i = 1, #KEYS / 2 do
  replies[i] = acquire(KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i], ARGV[2 * i + 1], ARGV[1])
end
return replies
