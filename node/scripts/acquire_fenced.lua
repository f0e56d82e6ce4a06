-- acquire_fenced.lua: acquire.lua, and on success raise the key's fence counter.
-- KEYS[1]  the lock key
-- KEYS[2]  its fence counter (node.FenceKey)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the counter's TTL in milliseconds
-- KEYS[3]  the key's waiters (node.Key.Waiters, see queue.lua); absent
--          from clients before it
-- ARGV[4]  the waiter lease in milliseconds (node.WaiterLease)
-- ARGV[5]  the caller's client tag (node.Key.Owner) for a waiting attempt,
--          which queues as acquire.lua's does; "" (or absent): it does
--          not queue
-- ARGV[6]  the caller's ticket (node.Key.Ticket); 0 when it has none yet
-- Returns  {"OK", counter} when the key was set, the counter raised to
--          max(counter + 1, the node's TIME in microseconds); when the key
--          already held the caller's token (a retried command, see
--          acquire.lua), its TTL set again and {"OK", counter} as it stands;
--          otherwise, for a waiting attempt, {wait, ticket} as acquire.lua,
--          else the holder's PTTL in milliseconds.
-- A waiting attempt queues, takes a key reserved for it (its turn, see
-- hand_on in queue.lua; a fenced waiter asks for no grant: its fence
-- needs the confirm round, node.Fencer), and takes a free key only as
-- the head of the queue, so that releases that hand the key on serve it
-- in its turn like any other waiter. An attempt that does not queue
-- (a TryLock's, a Lock's first) takes a free key in no order and leaves
-- nothing where it is refused: a Lock that goes on waiting subscribes
-- and then queues with a waiting attempt, as an unfenced one does. (It
-- used to mark the queue key for a lease so that the release was
-- announced; since fenced waiters queue, that mark only outlived the
-- calls that made it.)
-- A token with a tombstone (node.TombKey) is never set, as in acquire.lua.
-- The time seed keeps the counter above every value handed out before
-- when the counter is lost (restart without persistence, expiry), as long
-- as the node's clock does not step back. Microseconds since 1970 stay
-- below 2^53, so Lua's doubles hold them exactly.
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5; a no-op since)
end
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
  if c > 0 then
    return {"OK", c}
  end
end
local tag = KEYS[3] and ARGV[5] or ""
if v ~= ARGV[1] and (not v or (tag ~= "" and v == "~" .. tag)) and
  redis.call("EXISTS", KEYS[1] .. ":dead:" .. ARGV[1]) == 1 then
  -- A tombstone (see acquire.lua): rolled back here before it ran; the
  -- key it would set nobody would release. Answered as taken, changing
  -- nothing. One EXISTS, only where the script could set the key.
  if tag == "" then
    return -2
  end
  return {redis.call("PTTL", KEYS[1]), tonumber(ARGV[6]) or 0}
end
if tag == "" then
  if v then
    return redis.call("PTTL", KEYS[1])
  end
elseif v == "~" .. tag then
  -- Reserved for the caller: take it and leave the queue, as acquire.lua
  -- (the counter of tickets reaches the caller's).
  local mine = tonumber(ARGV[6]) or 0
  if mine > 0 and (tonumber(redis.pcall("HGET", KEYS[3], "#")) or 0) < mine then
    redis.pcall("HSET", KEYS[3], "#", mine)
  end
  redis.pcall("HDEL", KEYS[3], tag)
  if redis.pcall("HLEN", KEYS[3]) == 1 then
    redis.call("DEL", KEYS[3])
  end
elseif v ~= ARGV[1] then
--[[libraries]]
  local wk = KEYS[3]
  local ok, head, mine, lease = pcall(function()
    local now = now_ms()
    local mine = queue_join(wk, tag, ARGV[6], tonumber(ARGV[4]), now)
    local h, hl = queue_head(wk, now, nil)
    if not h then
      return "", mine, 1
    end
    return h, mine, hl - now
  end)
  if v or (ok and head ~= tag) then
    if not ok then
      redis.pcall("HSETNX", wk, "#", 0)
      redis.pcall("PEXPIRE", wk, ARGV[4])
      return {redis.call("PTTL", KEYS[1]), 0}
    end
    if not v then
      return {lease, mine}
    end
    return {redis.call("PTTL", KEYS[1]), mine}
  end
  if ok then
    pcall(queue_drop, wk, tag)
  end
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if c + 1 > now then
  now = c + 1
end
redis.call("SET", KEYS[2], string.format("%d", now), "PX", ARGV[3])
return {"OK", now}
