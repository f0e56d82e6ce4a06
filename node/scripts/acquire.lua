-- acquire.lua: SET NX PX, and on a key held by someone else, how long it has left.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- Returns  "OK" (status) when the key was set, or already held the caller's
--          token (then its TTL is set to ARGV[2], as the SET would have);
--          otherwise the holder's PTTL in milliseconds (-1: the key has no
--          expiry), so that a waiter knows when the key expires without
--          another round trip.
-- A token is fresh for every attempt, so finding it means this very command
-- ran before: a Redis client that retried it after a lost reply. Answering
-- "taken" would leave the key behind, since a client does not roll back a
-- node that answered so.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {ok = "OK"}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return {ok = "OK"}
end
return redis.call("PTTL", KEYS[1])
