-- extend.lua: lengthen a lock's TTL only while it still holds the caller's token.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1 held by the token (TTL now at least ARGV[2]), 0 the key holds
--          another token, -1 the key is absent.
-- The TTL is never shortened: an extend that reaches the node late (its
-- caller timed out, TCP delivered it anyway) must not cut short a later,
-- longer one that this node counted for.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  if redis.call("PTTL", KEYS[1]) < tonumber(ARGV[2]) then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
  end
  return 1
elseif v then
  return 0
end
return -1
