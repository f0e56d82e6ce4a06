-- acquire.lua: set the lock key for a waiter, in its turn; otherwise say how
-- long it has left. (queue.lua is spliced in at
-- --[[libraries]], see node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the caller's client tag (node.Key.Owner); "" for a caller that
--          does not queue: then only SET NX PX and the holder's PTTL
-- ARGV[4]  the waiter lease in milliseconds
-- ARGV[5]  the caller's ticket (node.Key.Ticket); 0 when it has none yet
-- ARGV[6]  the grant the caller asks for (node.Key.Grant): the value a
--          release that hands the key on to it sets, for ARGV[7] ms;
--          "" (or absent) for a reservation instead (see hand_on)
-- ARGV[7]  how long a grant lasts, in milliseconds (node.GrantTTL): at
--          most the TTL and the waiter lease, so that a waiter that died
--          blocks the key for a lease at most; absent: ARGV[2] (clients
--          before it counted a grant for the whole TTL)
-- Returns  "OK" (status) when the key was set, or already held the caller's
--          token (then its TTL is set to ARGV[2], as the SET would have);
--          otherwise {wait, ticket}: wait is the holder's PTTL in
--          milliseconds (-1: no expiry), or, when the key is free but
--          another waiter heads the queue, what is left of that waiter's
--          lease (1 when every waiter has a key of the queue reserved, see
--          queue_head); ticket is the caller's ticket on this node (0: no
--          queue here). Without a tag, the PTTL alone.
-- A token is fresh for every attempt, so finding it means this very command
-- ran before: a Redis client that retried it after a lost reply. Answering
-- "taken" would leave the key behind, since a client does not roll back a
-- node that answered so.
-- A caller with a tag is queued (its lease renewed) unless it takes the key.
-- It takes the key when the key is reserved for it (see hand_on) or holds
-- the grant it asked for (its earlier attempt's registration was granted
-- before this attempt came), or is free and the caller heads the queue.
-- Its ticket: see queue_join.
-- A token with a tombstone (KEYS[1] .. ":dead:" .. token, node.TombKey,
-- see release.lua's ARGV[7]) is never set: this attempt was rolled back
-- here before it ran (it came late), and the key it would set nobody
-- would release. It is answered as taken. One EXISTS, only where the
-- script would set the key.
local key, wk, token, ttl, tag = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
local v = redis.call("GET", key)
if tag == "" then
  if v == token then
    redis.call("PEXPIRE", key, ttl)
    return {ok = "OK"}
  elseif v then
    return redis.call("PTTL", key)
  elseif redis.call("EXISTS", key .. ":dead:" .. token) == 1 then
    return -2 -- a tombstone: see above
  end
  redis.call("SET", key, token, "PX", ttl)
  return {ok = "OK"}
end
local grant, grantTTL = ARGV[6] or "", ARGV[7] or ttl
if v == token or v == "~" .. tag or (v == grant and grant ~= "") then
  -- Already the caller's (the same command run twice), or reserved for
  -- it (its turn, see hand_on), or holding the grant it asked for (an
  -- earlier attempt's registration was granted): take it and leave the
  -- queue, as below,
  -- before the libraries are defined (queue_drop inline; redis.pcall: a
  -- user without the hash commands has no entry to drop).
  if v == token then
    redis.call("PEXPIRE", key, ttl)
  elseif redis.call("EXISTS", key .. ":dead:" .. token) == 1 then
    return {redis.call("PTTL", key), tonumber(ARGV[5]) or 0} -- a tombstone: see above
  else
    redis.call("SET", key, token, "PX", ttl)
    -- As queue_join would: the counter reaches the caller's ticket, so
    -- that a waiter that queues here after it gets a larger one, as it
    -- would from any other node of a majority.
    local mine = tonumber(ARGV[5]) or 0
    if mine > 0 and (tonumber(redis.pcall("HGET", wk, "#")) or 0) < mine then
      redis.pcall("HSET", wk, "#", mine)
    end
  end
  redis.pcall("HDEL", wk, tag)
  if redis.pcall("HLEN", wk) == 1 then
    redis.call("DEL", wk) -- only the ticket counter is left
  end
  return {ok = "OK"}
end
--[[libraries]]
local ok, head, mine, lease = pcall(function()
  local now = now_ms()
  local mine = queue_join(wk, tag, ARGV[5], tonumber(ARGV[4]), now, grantTTL, token, grant)
  local h, hl = queue_head(wk, now, nil)
  if not h then
    -- Every waiter, the caller too, has a key of the queue reserved (a
    -- queue that serves several keys): the caller takes its own.
    return "", mine, 1
  end
  return h, mine, hl - now
end)
if not v and (not ok or head == tag) and redis.call("EXISTS", key .. ":dead:" .. token) == 0 then
  redis.call("SET", key, token, "PX", ttl)
  if ok then
    pcall(queue_drop, wk, tag)
  end
  return {ok = "OK"}
end
if not ok then
  -- Not queued (a user that may not run TIME): mark the queue key, as
  -- acquire_fenced.lua does, so that a release announces the delete.
  redis.pcall("HSETNX", wk, "#", 0)
  redis.pcall("PEXPIRE", wk, ARGV[4])
  return {redis.call("PTTL", key), 0}
end
if not v then
  return {lease, mine}
end
return {redis.call("PTTL", key), mine}
