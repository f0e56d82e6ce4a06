-- extend_shared.lua: lengthen a reader's hold while it still has one.
-- (queue.lua and shared.lua are spliced in at --[[libraries]], see
-- node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its readers (node.ReadersKey)
-- ARGV[1]  the reader's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1 the token holds the key shared (its hold now ends at least
--          ARGV[2] from now), 0 a writer holds the key, -1 the token holds
--          nothing here. Never shortened, as extend.lua.
local key, rk, token, ttl = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local MARKER = "!readers" -- node.SharedValue; shared.lua uses it
local v = redis.call("GET", key)
if v ~= MARKER then
  if v == MARKER .. ":" .. token then
    -- This reader alone, held in the value (see acquire_shared).
    if redis.call("PTTL", key) < ttl then
      redis.call("PEXPIRE", key, ttl)
    end
    return 1
  end
  -- Another reader alone, a writer, or no one.
  return (v and string.sub(v, 1, #MARKER + 1) ~= MARKER .. ":") and 0 or -1
end
--[[libraries]]
local now = now_ms()
local e = tonumber(redis.call("HGET", rk, token) or "0")
if e <= now then
  return -1
end
if e < now + ttl then
  redis.call("HSET", rk, token, now + ttl)
end
if redis.call("PTTL", key) < ttl then
  redis.call("PEXPIRE", key, ttl)
end
if redis.call("PTTL", rk) < ttl then
  redis.call("PEXPIRE", rk, ttl)
end
return 1
