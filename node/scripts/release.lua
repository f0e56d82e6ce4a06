-- release.lua: delete a lock only while it still holds the caller's token.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- Returns  1 deleted, 0 the key holds another token, -1 the key is absent.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  redis.call("DEL", KEYS[1])
  return 1
elseif v then
  return 0
end
return -1
