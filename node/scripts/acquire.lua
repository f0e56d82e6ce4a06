-- acquire.lua: SET NX PX, and on a key held by someone else, how long it has
-- left; a waiter also says it is waiting.
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey): a sorted set of client tags
--          scored by when their lease ends, in the node's milliseconds
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the caller's client tag (node.Key.Owner), "" for none
-- ARGV[4]  the waiter lease in milliseconds
-- Returns  "OK" (status) when the key was set, or already held the caller's
--          token (then its TTL is set to ARGV[2], as the SET would have);
--          otherwise the holder's PTTL in milliseconds (-1: the key has no
--          expiry), so that a waiter knows when the key expires without
--          another round trip.
-- A token is fresh for every attempt, so finding it means this very command
-- ran before: a Redis client that retried it after a lost reply. Answering
-- "taken" would leave the key behind, since a client does not roll back a
-- node that answered so.
-- A caller with a tag that finds the key taken is registered as waiting
-- until its lease ends (renewed by each attempt); a holder does not hand
-- its lock to a waiter of its own client (transfer.lua) while one of
-- another client waits. The set expires with its last lease. The sorted-set
-- commands go by redis.pcall: an ACL user without them still locks and
-- waits (TIME too); only the handoff between its goroutines is off
-- (transfer.lua).
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5; a no-op since)
end
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  if ARGV[3] ~= "" then
    redis.pcall("ZREM", KEYS[2], ARGV[3])
  end
  return {ok = "OK"}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  if ARGV[3] ~= "" then
    redis.pcall("ZREM", KEYS[2], ARGV[3])
  end
  return {ok = "OK"}
end
local t = ARGV[3] ~= "" and redis.pcall("TIME")
if t and t[1] then
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if type(redis.pcall("ZADD", KEYS[2], now + tonumber(ARGV[4]), ARGV[3])) == "number"
      and redis.call("PTTL", KEYS[2]) < tonumber(ARGV[4]) then
    redis.call("PEXPIRE", KEYS[2], ARGV[4])
  end
end
return redis.call("PTTL", KEYS[1])
