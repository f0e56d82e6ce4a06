-- acquire_shared.lua: hold a lock key shared, as one of its readers.
-- (queue.lua and shared.lua are spliced in at --[[libraries]], see
-- node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- KEYS[3]  its readers (node.ReadersKey, see shared.lua)
-- ARGV[1]  the reader's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the reader call's queue tag ("r" ..., see shared.lua); "" for an attempt
--          that does not queue
-- ARGV[4]  the waiter lease in milliseconds
-- ARGV[5]  the reader's ticket; 0 when it has none yet
-- Returns  "OK" (status) when the token now holds the key shared, its hold
--          ending ARGV[2] from now (also when it held it already: the
--          same command run twice); otherwise {wait, ticket} as
--          acquire.lua: wait is the key's PTTL (a writer's, or the
--          readers' while a writer waits before this one), or what is
--          left of that writer's lease when the key is free.
-- A token with a tombstone (KEYS[1] .. ":dead:" .. token, node.TombKey,
-- left by release_shared.lua's ARGV[3]) is never added: this attempt was
-- rolled back here before it ran (it came late), as in acquire.lua. It is
-- answered as taken. The common case asks in the EXISTS it makes anyway.
-- A reader alone on a free key is written into the key's value, MARKER ..
-- ":" .. token (see shared.lua), with no readers hash and no TIME: the
-- value's expiry is its hold's. A second reader moves it to the hash.
-- A writer that holds the key (its token) or has it reserved ("~" .. tag)
-- keeps readers out, and so does a live writer queued before the reader
-- (any live writer, for a reader not queued): a waiting writer stops new
-- readers, so a stream of readers cannot starve it; readers queued
-- before it go first, so a stream of writers cannot starve them.
local key, wk, rk, token, ttl, tag = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[3]
local MARKER = "!readers" -- node.SharedValue; shared.lua uses it
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5)
end
local SOLE = MARKER .. ":"
local dead = key .. ":dead:" .. token
if redis.call("EXISTS", wk, dead) == 0 and redis.call("SET", key, SOLE .. token, "NX", "PX", ttl) then
  -- Free, no one queued (the common case, before the libraries are
  -- defined: each definition costs the script a closure per call): the
  -- only reader, held in the value.
  return {ok = "OK"}
end
local v = redis.call("GET", key)
if v == "~r" then
  -- Reserved for the readers at the head of the queue (hand_on): free
  -- to a reader that no writer queued before it stops, below.
  v = nil
end
--[[libraries]]
local now = now_ms()
if v == SOLE .. token then
  -- This reader alone already: the same command run twice; its hold
  -- ends ttl from now, as the first run set it.
  redis.call("PEXPIRE", key, ttl)
  return {ok = "OK"}
elseif v and string.sub(v, 1, #SOLE) == SOLE then
  -- One reader, held in the value: it moves to the hash, its hold
  -- ending with the key, which then holds the marker. A key in its
  -- last millisecond (PTTL 0) is as good as free.
  local left = redis.call("PTTL", key)
  if left > 0 then
    redis.call("HSET", rk, string.sub(v, #SOLE + 1), now + left)
    redis.call("PEXPIRE", rk, left)
    redis.call("SET", key, MARKER, "PX", left)
    v = MARKER
  elseif left == 0 then
    v = nil
  end
end
if v == MARKER and redis.call("HGET", rk, token) then
  tag = "" -- the same command run twice: renew it
else
  local mine
  if tag ~= "" then
    mine = queue_join(wk, tag, ARGV[5], tonumber(ARGV[4]), now)
  end
  local blocked
  if v and v ~= MARKER then
    blocked = redis.call("PTTL", key)
  elseif redis.call("EXISTS", wk) == 1 then
    local lease = writer_ahead(wk, now, mine)
    if lease then
      if v then
        blocked = redis.call("PTTL", key)
      else
        blocked = math.max(1, lease - now)
      end
    end
  end
  if blocked then
    return {blocked, mine or 0}
  end
end
if redis.call("EXISTS", dead) == 1 then
  -- A tombstone: see above. Its queue entry, if any, stays as a
  -- waiting attempt's would.
  return {math.max(1, redis.call("PTTL", key)), tonumber(ARGV[5]) or 0}
end
if tag ~= "" then
  queue_drop(wk, tag)
end
local last = now + ttl
if v then
  -- (A free key has no live reader: the marker outlives every hold.)
  last = math.max(readers_last(rk, now, token), last)
end
redis.call("HSET", rk, token, now + ttl)
redis.call("SET", key, MARKER, "PX", last - now)
redis.call("PEXPIRE", rk, last - now)
return {ok = "OK"}
