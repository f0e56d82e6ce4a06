-- acquire_shared.lua: hold a lock key shared, as one of its readers.
-- (queue.lua and shared.lua are prepended.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- KEYS[3]  its readers (node.ReadersKey, see shared.lua)
-- ARGV[1]  the reader's token
-- ARGV[2]  the TTL in milliseconds
-- Returns  "OK" (status) when the token now holds the key shared, its hold
--          ending ARGV[2] from now (also when it held it already: the
--          same command run twice); otherwise the wait in milliseconds:
--          the writer's PTTL, or, when a writer waits in the queue, the
--          readers' PTTL (-1: no expiry) or what is left of the writer's
--          lease if there are none.
-- A writer that holds the key (its token) or for whom it is reserved
-- ("~" .. tag) keeps readers out. So does a live writer in the key's
-- queue: a waiting writer stops new readers, so a stream of readers
-- cannot starve it; a reader already in keeps its hold.
local key, wk, rk, token, ttl = KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2])
local v = redis.call("GET", key)
if v and v ~= MARKER then
  return redis.call("PTTL", key)
end
local now = now_ms()
if not redis.call("HGET", rk, token) and redis.call("EXISTS", wk) == 1 then
  local head, lease = queue_head(wk, now, nil)
  if head then
    if v then
      return redis.call("PTTL", key)
    end
    return math.max(1, lease - now)
  end
end
local last = math.max(readers_last(rk, now, token), now + ttl)
redis.call("HSET", rk, token, now + ttl)
redis.call("SET", key, MARKER, "PX", last - now)
redis.call("PEXPIRE", rk, last - now)
return {ok = "OK"}
