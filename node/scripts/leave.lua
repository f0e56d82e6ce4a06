-- leave.lua: take a waiter that gives up out of a key's queue; a key
-- reserved for it, or granted to it, goes to the next head. (queue.lua is prepended.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- ARGV[1]  the waiter's client tag (node.Key.Owner)
-- ARGV[2]  the grant it asked for (node.Key.Grant); "" (or absent): none
-- Returns  1.
pcall(queue_drop, KEYS[2], ARGV[1])
local v = redis.call("GET", KEYS[1])
if v == "~" .. ARGV[1] or (v == ARGV[2] and v ~= "") then
  hand_on(KEYS[1], KEYS[2], ARGV[1])
end
return 1
