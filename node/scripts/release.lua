-- release.lua: free a lock key only while it still holds the caller's token,
-- handing it to the head of its queue. (queue.lua is spliced in at
-- --[[libraries]], see node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.Key.Waiters, see queue.lua)
-- ARGV[1]  the caller's token
-- ARGV[2]  "1" for an Unlock: hand on and announce where anyone is
--          queued (see hand_on in queue.lua), delete unannounced where
--          no one is (see the common case below); "0" for a rollback:
--          where anyone is queued, hand on to the head, the caller's
--          client included (its waiting attempt is its next), announced
--          on the head's channel only; where no one is (or only a mark,
--          see acquire_fenced.lua), delete quietly. A waiter queued there would
--          otherwise wait for a key that is free and that no release
--          announces, and the racers that failed together would split
--          the nodes again on their next attempts
-- ARGV[3]  the caller's client tag (node.Key.Owner; "" or absent: none):
--          an Unlock hands the key on to the head other than that
--          client, whose next holder takes it from it in its turn
--          (node.Handoffer.Transfer), and whose place there may be a
--          stale registration that no waiting call would claim; on a
--          lock's own queue and on a semaphore's line alike
-- ARGV[4]  a rollback's ticket ("0" or absent: none): the rolled-back
--          attempt was a waiting one (node.Key.Requeue) that set the key
--          here as the head of a queue, and left it; where it frees the
--          key, the caller's client is queued again with this ticket for
--          ARGV[5] milliseconds, as its attempt had been on the nodes that
--          refused it. Otherwise a node where such attempts take a free
--          key (it was not reserved there for the majority's next holder)
--          ends with an empty queue, and every waiter's attempt takes it
--          and rolls it back again. Where the caller is then the head, the
--          key is deleted quietly (its wait goes on); else it is handed on.
--          On a lock's own queue and on a semaphore's line alike: an
--          attempt that sets a slot drops its caller from the line there,
--          and a release of any slot there would pass it over
-- ARGV[5]  the lease of that registration, in milliseconds
-- ARGV[6]  the grant that attempt asked for ("" or absent: none): the
--          registration asks for it again, with the rolled-back token as
--          its registering attempt's and the lease as its TTL (a client
--          sends it only where node.GrantTTL of its TTL is the lease), so
--          that a release here grants the key as the refusing nodes would
-- ARGV[7]  a tombstone's lifetime in milliseconds ("0" or absent: none),
--          sent where the caller's previous command here (an acquire or
--          a transfer that may set the key to ARGV[1]) timed out after
--          it was sent and may still run: the release leaves
--          KEYS[1] .. ":dead:" .. ARGV[1] (node.TombKey) for that long,
--          whether the key holds ARGV[1] or not (an acquire and a
--          reseed of the token may both be on their way), and acquire.lua and
--          transfer.lua never set the key to a token that has one. Only
--          this path writes it; the common case reads no more.
-- KEYS[3]  the key's record (node.AnnounceKey; optional: a lock that keeps
--          one, an election's, node.Key.Record): removed where it is the
--          caller's token's, whatever the key holds, and the removal
--          announced on its release channel, so that the record goes with
--          the key (a Resign, a failed campaign's rollback) and never
--          outlives it; a late release removes only its own token's.
-- Returns  1 freed, 0 the key holds another token, -1 the key is absent.
-- An Unlock that finds the key absent where waiters are queued on the
-- lock's own queue hands it on all the same (see hand_on): the releaser's
-- lock did not hold this node (its keys expired, or the majority that
-- granted it did not include the node), and without a release here the
-- node's waiters would find their turn only by attempts that take the
-- free key against the majority's holder. A free key may be taken by
-- anyone, so handing it to the head is as safe as that head's SET NX.
-- The announcement: "" on the key's release channel, KEYS[1] ..
-- ":released" (node.ReleaseChannel), when it was deleted where a queue
-- was there (or could not be read) but no head to hand on to; the head's tag
-- on the head's own channel (node.ReservedKey) when the key is reserved
-- for it, or the grant message (see hand_on) when it is granted to it.
-- redis.pcall: an ACL user without the right to publish still releases;
-- its waiters poll.
-- A lock held by a grant (its token starts with "~", node.GrantValue):
-- its owner's registration asking for that grant goes, also where the
-- key is not its own (not granted here yet), so that it is not granted
-- once the lock is gone.
local v = redis.call("GET", KEYS[1])
-- Whether KEYS[2] is the key's own queue, not a semaphore's line: asked
-- only where the key does not hold the caller's token.
local own = v ~= ARGV[1] and KEYS[2] == KEYS[1] .. ":waiters"
if KEYS[3] then
  local r = redis.call("GET", KEYS[3])
  if r and string.sub(r, 1, #ARGV[1] + 1) == ARGV[1] .. "\n" then
    redis.call("DEL", KEYS[3])
    redis.call("PUBLISH", KEYS[3] .. ":released", "")
  end
end
if ARGV[7] and ARGV[7] ~= "0" then
  redis.call("SET", KEYS[1] .. ":dead:" .. ARGV[1], "", "PX", ARGV[7])
end
if v ~= ARGV[1] and string.sub(ARGV[1], 1, 1) ~= "~" then
  if v then
    return 0
  end
  local n = ARGV[2] == "1" and own and redis.pcall("HLEN", KEYS[2])
  if type(n) ~= "number" or n == 0 then
    return -1
  end
end
-- (Only a rollback sends ARGV[4]: an Unlock's common case below reads
-- no more than before.)
local requeue = ARGV[4] and ARGV[2] ~= "1" and (tonumber(ARGV[4]) or 0) > 0 and (ARGV[3] or "") ~= ""
-- The common case, before the libraries are defined (each definition
-- costs the script a closure per call): no one queued, the key is
-- freed, and not announced, not even for an Unlock: a waiter registers
-- in the queue with each waiting attempt (one that does not queue, a
-- fenced lock's or a user's without TIME, marks the queue key with the
-- ticket counter alone, see acquire_fenced.lua), and one that is
-- subscribed but has not tried since makes that attempt once its
-- subscription is confirmed, which finds the key free. (The PUBLISH
-- cost the node as much as the rest of this path.) HLEN, not EXISTS: a
-- user that may not run the hash commands cannot queue its waiters, and
-- takes hand_on's path, which announces the delete to all.
if v == ARGV[1] and not requeue then
  if redis.pcall("HLEN", KEYS[2]) == 0 then
    redis.call("DEL", KEYS[1])
    return 1
  end
end
--[[libraries]]
if string.sub(ARGV[1], 1, 1) == "~" then
  -- A lock held by a grant: its owner's registration that asks for it
  -- goes, whether the node granted it or not (a re-seed may have set it).
  pcall(queue_forget_grant, KEYS[2], ARGV[3], ARGV[1])
end
if v ~= ARGV[1] then
  if v and ARGV[2] == "1" and v == "~" .. (ARGV[3] or "") and string.sub(ARGV[1], 1, 1) == "~" and
    redis.pcall("HEXISTS", KEYS[2], ARGV[3]) == 0 then
    -- Reserved for the caller's client, whose call unlocks a lock it
    -- held by grants elsewhere (a fenced grant's proposal had been
    -- passed here, so this node reserved): with no call of the client
    -- queued here any more (its entry went just above), nothing would
    -- take the reservation, which would keep the next waiter out for
    -- the rest of a lease. It is handed on.
    hand_on(KEYS[1], KEYS[2], ARGV[3], false)
    return 0
  end
  if v then
    return 0
  end
  if ARGV[2] == "1" and own then
    -- Absent here, while waiters are queued (see above; a lock held
    -- by a grant comes here unchecked, and its forget may have taken
    -- the last entry).
    local n = redis.pcall("HLEN", KEYS[2])
    if type(n) == "number" and n > 0 then
      hand_on(KEYS[1], KEYS[2], ARGV[3] ~= "" and ARGV[3] or nil, false)
    end
  end
  return -1
end
if requeue then
  local ok, head = pcall(function()
    local now = now_ms()
    queue_join(KEYS[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), now, ARGV[5], ARGV[1], ARGV[6])
    return queue_head(KEYS[2], now, nil)
  end)
  if ok and head == ARGV[3] then
    redis.call("DEL", KEYS[1])
    return 1
  end
end
local skip = nil
if ARGV[2] == "1" and ARGV[3] and ARGV[3] ~= "" then
  skip = ARGV[3]
end
hand_on(KEYS[1], KEYS[2], skip, ARGV[2] ~= "1")
return 1
