-- acquire_fenced.lua: acquire.lua, and on success raise the key's fence counter.
-- KEYS[1]  the lock key
-- KEYS[2]  its fence counter (node.FenceKey)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the counter's TTL in milliseconds
-- KEYS[3]  the key's waiters (node.Key.Waiters, see queue.lua); absent
--          from clients before it
-- ARGV[4]  the waiter lease in milliseconds (node.WaiterLease)
-- Returns  {"OK", counter} when the key was set, the counter raised to
--          max(counter + 1, the node's TIME in microseconds); when the key
--          already held the caller's token (a retried command, see
--          acquire.lua), its TTL set again and {"OK", counter} as it stands;
--          otherwise the holder's PTTL in milliseconds, as acquire.lua.
-- A fenced attempt does not queue (it takes a free key in no order), but
-- its caller may be listening for the release: a refused one marks the
-- queue key (the ticket counter alone, for a lease), so that a release
-- that finds no waiter there announces the delete to all rather than
-- nothing (see release.lua).
-- The time seed keeps the counter above every value handed out before
-- when the counter is lost (restart without persistence, expiry), as long
-- as the node's clock does not step back. Microseconds since 1970 stay
-- below 2^53, so Lua's doubles hold them exactly.
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5; a no-op since)
end
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
    if c > 0 then
      return {"OK", c}
    end
  end
  if KEYS[3] then
    redis.pcall("HSETNX", KEYS[3], "#", 0)
    redis.pcall("PEXPIRE", KEYS[3], ARGV[4])
  end
  return redis.call("PTTL", KEYS[1])
end
local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if c + 1 > now then
  now = c + 1
end
redis.call("SET", KEYS[2], string.format("%d", now), "PX", ARGV[3])
return {"OK", now}
