-- confirm_fence.lua: while the lock still holds the caller's token, raise its
-- fence counter to at least the fence the caller was granted, and, for an
-- election's campaign, keep the leader's record beside it in the same step.
-- KEYS[1]  the lock key
-- KEYS[2]  its fence counter (node.FenceKey)
-- ARGV[1]  the caller's token
-- ARGV[2]  the fence (a decimal integer)
-- ARGV[3]  the counter's TTL in milliseconds
-- KEYS[3]  the record (node.AnnounceKey; optional, with ARGV[4] and ARGV[5])
-- ARGV[4]  the record's text (optional): kept as announce.lua keeps it
-- ARGV[5]  the record's TTL in milliseconds (optional)
-- Returns  1 raised (or already at least the fence), and the record kept;
--          0 the key holds another token, -1 the key is absent; nothing
--          changes then.
-- Done only under the token: a later SET NX on this node can succeed only
-- after this key is gone, so it reads a counter of at least the fence. A
-- record kept here is the token's (see announce.lua), so a confirm that
-- runs late, after the key has gone, keeps none.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
  if tonumber(ARGV[2]) > c then
    redis.call("SET", KEYS[2], ARGV[2], "PX", ARGV[3])
  else
    redis.call("PEXPIRE", KEYS[2], ARGV[3])
  end
  if KEYS[3] and ARGV[4] and ARGV[4] ~= "" then
    redis.call("SET", KEYS[3], ARGV[1] .. "\n" .. ARGV[4], "PX", ARGV[5])
    redis.call("PUBLISH", KEYS[3] .. ":released", "")
  end
  return 1
elseif v then
  return 0
end
return -1
