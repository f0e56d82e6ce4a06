-- release.lua: delete a lock only while it still holds the caller's token, and
-- tell waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  "1" to announce the delete, "0" not to
-- Returns  1 deleted, 0 the key holds another token, -1 the key is absent.
-- An announced delete is published on the key's release channel,
-- KEYS[1] .. ":released" (node.ReleaseChannel), so that waiters wake at once.
-- redis.pcall: an ACL user without the right to publish still releases; its
-- waiters fall back to polling.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  redis.call("DEL", KEYS[1])
  if ARGV[2] == "1" then
    redis.pcall("PUBLISH", KEYS[1] .. ":released", "")
  end
  return 1
elseif v then
  return 0
end
return -1
