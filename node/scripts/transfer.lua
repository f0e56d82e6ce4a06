-- transfer.lua: hand a lock from its holder to the next holder of the same
-- client in one step, unless a waiter of another client is waiting.
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see acquire.lua)
-- ARGV[1]  the holder's token
-- ARGV[2]  the successor's token
-- ARGV[3]  the TTL in milliseconds
-- ARGV[4]  the client tag of both (node.Key.Owner)
-- Returns  1 the key holds the successor's token for ARGV[3] ms (it held the
--          holder's token, or nothing, or the successor's already: the same
--          command run twice); 0 the key holds another token (nothing
--          changed); -1 a waiter of another client is waiting: the holder's
--          key is deleted (if it was there) and the release announced
--          (node.ReleaseChannel), so that the lock is free for that waiter,
--          as Release would have left it.
-- Waiters whose lease has ended are dropped first. A node where the waiters
-- cannot be read (an ACL user without TIME or the sorted-set commands) counts as
-- having waiters of other clients: the lock is released, never handed.
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5; a no-op since)
end
local v = redis.call("GET", KEYS[1])
if v == ARGV[2] then
  return 1
end
if v and v ~= ARGV[1] then
  return 0
end
local t = redis.pcall("TIME")
local others = 1
if t[1] then
  redis.pcall("ZREMRANGEBYSCORE", KEYS[2], "-inf", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  others = redis.pcall("ZCARD", KEYS[2])
end
if type(others) ~= "number" then
  others = 1
elseif others > 0 and type(redis.pcall("ZSCORE", KEYS[2], ARGV[4])) == "string" then
  others = others - 1
end
if others > 0 then
  if v then
    redis.call("DEL", KEYS[1])
    redis.pcall("PUBLISH", KEYS[1] .. ":released", "")
  end
  return -1
end
redis.pcall("ZREM", KEYS[2], ARGV[4])
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
return 1
