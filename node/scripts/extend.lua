-- extend.lua: re-set a lock's TTL only while it still holds the caller's token.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1 extended, 0 the key holds another token, -1 the key is absent.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
elseif v then
  return 0
end
return -1
