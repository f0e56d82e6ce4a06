-- inspect_announce.lua: read a lock key's token and remaining TTL and
-- what its holder announced (announce.lua), in one atomic step.
-- KEYS[1]  the lock key
-- KEYS[2]  the record (node.AnnounceKey)
-- Returns  {token or false, PTTL in ms, text or false}; PTTL is -2 when
--          the key is absent; the text is false unless the record is the
--          token's.
local v = redis.call("GET", KEYS[1])
local text = false
if v then
  local r = redis.call("GET", KEYS[2])
  local prefix = v .. "\n"
  if r and string.sub(r, 1, #prefix) == prefix then
    text = string.sub(r, #prefix + 1)
  end
end
return {v, redis.call("PTTL", KEYS[1]), text}
