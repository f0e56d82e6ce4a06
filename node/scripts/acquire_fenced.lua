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
-- ARGV[7]  the grant a waiting attempt asks for (node.Key.Grant; "" or
--          absent: a reservation), with
-- ARGV[8]  its TTL in milliseconds (node.GrantTTL),
-- ARGV[9]  the fence it proposes (node.Key.GrantFence; a decimal; "0":
--          none, and then no release grants it: it names the call),
-- ARGV[10] the record a grant keeps beside the key (node.Key.GrantRecord;
--          "": none) and
-- ARGV[11] that record's TTL in milliseconds: see hand_on in queue.lua,
--          which grants the key only where the fence counter is below
--          the proposal, raising it to the proposal
-- Returns  {"OK", counter} when the key was set, the counter raised to
--          max(counter + 1, the node's TIME in microseconds); when the key
--          already held the caller's token (a retried command, see
--          acquire.lua), its TTL set again and {"OK", counter} as it stands;
--          otherwise, for a waiting attempt, {wait, ticket, counter} (wait
--          and ticket as acquire.lua; counter the key's fence counter, 0
--          where it has none: what a proposal must exceed), else {PTTL,
--          0, counter} (the holder's PTTL in milliseconds; before, the
--          PTTL alone).
-- A waiting attempt queues, takes a key reserved for it (its turn, see
-- hand_on in queue.lua) or granted to it (the grant it asks for, given
-- before this attempt came; the counter is raised as for a free key and
-- the attempt's fence confirmed as any other), and takes a free key only
-- as the head of the queue, so that releases that hand the key on serve
-- it in its turn like any other waiter. An attempt that does not queue
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
local grant = tag ~= "" and ARGV[7] or ""
local mine = v == "~" .. tag or (grant ~= "" and v == grant)
if v ~= ARGV[1] and (not v or (tag ~= "" and mine)) and
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
    return {redis.call("PTTL", KEYS[1]), 0, tonumber(redis.call("GET", KEYS[2]) or "0") or 0}
  end
elseif mine then
  -- Reserved for the caller, or granted to it: take it and leave the
  -- queue, as acquire.lua (the counter of tickets reaches the caller's).
  local ticket = tonumber(ARGV[6]) or 0
  if ticket > 0 and (tonumber(redis.pcall("HGET", KEYS[3], "#")) or 0) < ticket then
    redis.pcall("HSET", KEYS[3], "#", ticket)
  end
  redis.pcall("HDEL", KEYS[3], tag)
  if redis.pcall("HLEN", KEYS[3]) == 1 then
    redis.call("DEL", KEYS[3])
  end
  if v == grant then
    -- A record the grant kept (an election's, see drop_record in
    -- queue.lua) goes: this attempt's confirm keeps its own.
    local r = redis.call("GET", KEYS[1] .. ":leader")
    if r and string.sub(r, 1, #v + 1) == v .. "\n" then
      redis.call("DEL", KEYS[1] .. ":leader")
      redis.pcall("PUBLISH", KEYS[1] .. ":leader:released", "")
    end
  end
elseif v ~= ARGV[1] then
--[[libraries]]
  local wk = KEYS[3]
  local ok, head, mine, lease = pcall(function()
    local now = now_ms()
    -- A grant is always a fenced one here ("0": no proposal, which no
    -- release grants: the grant only names the call for a Leave).
    local fence = nil
    if grant ~= "" then
      fence = {string.match(ARGV[9] or "", "^%d+$") or "0", ARGV[3], ARGV[11] or "0", ARGV[10] or ""}
    end
    local mine = queue_join(wk, tag, ARGV[6], tonumber(ARGV[4]), now, ARGV[8], ARGV[1], grant, fence)
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
    local c = tonumber(redis.call("GET", KEYS[2]) or "0") or 0
    if not v then
      return {lease, mine, c}
    end
    return {redis.call("PTTL", KEYS[1]), mine, c}
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
