-- release_shared.lua: end a reader's hold. (queue.lua and shared.lua are
-- spliced in at --[[libraries]], see node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey)
-- KEYS[3]  its readers (node.ReadersKey)
-- ARGV[1]  the reader's token
-- ARGV[2]  "1" for an Unlock, "0" for a rollback, as release.lua
-- ARGV[3]  a tombstone's lifetime in milliseconds ("0" or absent: none),
--          as release.lua's ARGV[7]: KEYS[1] .. ":dead:" .. ARGV[1]
--          (node.TombKey), whether the token holds anything here or not;
--          acquire_shared.lua never adds a token that has one
-- Returns  1 released, 0 a writer holds the key, -1 the token held nothing
--          here.
-- The last reader out frees the key as release.lua does: for an Unlock
-- it hands it to the head of the queue (a waiting writer); a rollback
-- hands it on as well, announced on the head's channel only; with no one
-- queued, both delete it unannounced. Otherwise the marker
-- lives on for the remaining readers, as long as the last of them.
local key, wk, rk, token = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local MARKER = "!readers" -- node.SharedValue; shared.lua uses it
if ARGV[3] and ARGV[3] ~= "0" then
  redis.call("SET", key .. ":dead:" .. token, "", "PX", ARGV[3])
end
local v = redis.call("GET", key)
if v ~= MARKER then
  if v ~= MARKER .. ":" .. token then
    -- Another reader alone (see acquire_shared), a writer, or no one.
    return (v and string.sub(v, 1, #MARKER + 1) ~= MARKER .. ":") and 0 or -1
  end
  -- This reader alone, held in the value: the last reader out, as below.
  if redis.pcall("HLEN", wk) == 0 then
    redis.call("DEL", key)
    return 1
  end
end
local all = redis.call("HGETALL", rk)
if #all == 2 and all[1] == token and redis.pcall("HLEN", wk) == 0 then
  -- The last reader out, no one queued (the common case, before the
  -- libraries are defined: each definition costs the script a closure
  -- per call): free the key, unannounced, as release.lua's common case
  -- (which says why). redis.pcall: a user that may not run HLEN takes
  -- hand_on's path. The hold is live without asking TIME: the marker
  -- expires with the last reader's hold (every script that adds,
  -- extends or removes a reader sets it so), and this token is the only
  -- reader.
  redis.call("DEL", rk, key)
  return 1
end
--[[libraries]]
if v ~= MARKER then
  hand_on(key, wk, nil, ARGV[2] ~= "1") -- this reader alone, someone queued
  return 1
end
local now = now_ms()
local mine = tonumber(redis.call("HGET", rk, token) or "0")
local last = readers_last(rk, now, token)
if last > 0 then
  -- The hash lives no longer than the marker: a reader alone on the
  -- key after it (which never writes the hash) would leave it behind.
  redis.call("SET", key, MARKER, "PX", last - now)
  redis.call("PEXPIRE", rk, last - now)
else
  redis.call("DEL", rk)
  hand_on(key, wk, nil, ARGV[2] ~= "1")
end
if mine > now then
  return 1
end
return -1
