-- confirm_fence.lua: while the lock still holds the caller's token, raise its
-- fence counter to at least the fence the caller was granted.
-- KEYS[1]  the lock key
-- KEYS[2]  its fence counter (node.FenceKey)
-- ARGV[1]  the caller's token
-- ARGV[2]  the fence (a decimal integer)
-- ARGV[3]  the counter's TTL in milliseconds
-- Returns  1 raised (or already at least the fence), 0 the key holds another
--          token, -1 the key is absent; nothing changes then.
-- Done only under the token: a later SET NX on this node can succeed only
-- after this key is gone, so it reads a counter of at least the fence.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
  if tonumber(ARGV[2]) > c then
    redis.call("SET", KEYS[2], ARGV[2], "PX", ARGV[3])
  else
    redis.call("PEXPIRE", KEYS[2], ARGV[3])
  end
  return 1
elseif v then
  return 0
end
return -1
