-- release.lua: free a lock key only while it still holds the caller's token,
-- handing it to the head of its queue. (queue.lua is prepended.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- ARGV[1]  the caller's token
-- ARGV[2]  "1" for an Unlock: hand on and announce (see hand_on in
--          queue.lua); "0" for a rollback: delete quietly
-- Returns  1 freed, 0 the key holds another token, -1 the key is absent.
-- The announcement: "" on the key's release channel, KEYS[1] ..
-- ":released" (node.ReleaseChannel), when it was deleted; the head's tag
-- on the head's own channel (node.ReservedKey) when the key is reserved
-- for it. redis.pcall: an ACL user without the right to publish still
-- releases; its waiters poll.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  if ARGV[2] == "1" then
    hand_on(KEYS[1], KEYS[2], nil)
  else
    redis.call("DEL", KEYS[1])
  end
  return 1
elseif v then
  return 0
end
return -1
