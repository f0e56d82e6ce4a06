-- leave.lua: take a waiter that gives up out of a key's queue; a key
-- reserved for it goes to the next head. (queue.lua is prepended.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- ARGV[1]  the waiter's client tag (node.Key.Owner)
-- Returns  1.
pcall(queue_drop, KEYS[2], ARGV[1])
if redis.call("GET", KEYS[1]) == "~" .. ARGV[1] then
  hand_on(KEYS[1], KEYS[2], ARGV[1])
end
return 1
