-- announce.lua: keep, beside a lock key, what its holder announced (an
-- election's leader: package redlock's Election), only while the key
-- holds the holder's token; or withdraw it.
-- KEYS[1]  the lock key
-- KEYS[2]  the record (node.AnnounceKey)
-- ARGV[1]  the holder's token
-- ARGV[2]  the record's text; "" withdraws the record where it is the
--          token's (whatever the lock key holds)
-- ARGV[3]  the record's TTL in milliseconds (not with a withdrawal)
-- Returns  1 the record is the token's now (or withdrawn); 0 the lock key
--          holds another token (or, withdrawing, the record is another
--          token's or gone); -1 the lock key is absent. Nothing changed
--          but on 1. A change is announced on the record's release
--          channel (node.ReleaseChannel(KEYS[2])), with an empty message.
-- The record is the token, a newline and the text: a reader takes it
-- only where the lock key holds the same token (inspect_announce.lua),
-- so a late announce of a holder that has since lost the key never
-- passes for the next holder's, and a late withdrawal removes only its
-- own token's record.
local prefix = ARGV[1] .. "\n"
if ARGV[2] == "" then
  local r = redis.call("GET", KEYS[2])
  if r and string.sub(r, 1, #prefix) == prefix then
    redis.call("DEL", KEYS[2])
    redis.call("PUBLISH", KEYS[2] .. ":released", "")
    return 1
  end
  return 0
end
local v = redis.call("GET", KEYS[1])
if v ~= ARGV[1] then
  if v then
    return 0
  end
  return -1
end
redis.call("SET", KEYS[2], prefix .. ARGV[2], "PX", ARGV[3])
redis.call("PUBLISH", KEYS[2] .. ":released", "")
return 1
