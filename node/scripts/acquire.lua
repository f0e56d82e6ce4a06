-- acquire.lua: SET NX PX, and on a key held by someone else, how long it has left.
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- Returns  "OK" (status) when the key was set; otherwise the holder's PTTL in
--          milliseconds (-1: the key has no expiry), so that a waiter knows
--          when the key expires without another round trip.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return {ok = "OK"}
end
return redis.call("PTTL", KEYS[1])
