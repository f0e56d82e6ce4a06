-- announce.lua: keep, beside a lock key, what its holder announced (an
-- election's leader: package redlock's Election), only while the key
-- holds the holder's token.
-- KEYS[1]  the lock key
-- KEYS[2]  the record (node.AnnounceKey)
-- ARGV[1]  the holder's token
-- ARGV[2]  the record's text
-- ARGV[3]  the record's TTL in milliseconds
-- Returns  1 the record is the token's now; 0 the lock key holds another
--          token; -1 the lock key is absent. Nothing changed but on 1. A
--          change is announced on the record's release channel
--          (node.ReleaseChannel(KEYS[2])), with an empty message.
-- The record is the token, a newline and the text: a reader takes it
-- only where the lock key holds the same token (inspect_announce.lua),
-- so a late announce of a holder that has since lost the key never
-- passes for the next holder's. The record goes with the key: a release
-- of a key that keeps one removes it where it is the token's
-- (its third key in release.lua).
local v = redis.call("GET", KEYS[1])
if v ~= ARGV[1] then
  if v then
    return 0
  end
  return -1
end
redis.call("SET", KEYS[2], ARGV[1] .. "\n" .. ARGV[2], "PX", ARGV[3])
redis.call("PUBLISH", KEYS[2] .. ":released", "")
return 1
