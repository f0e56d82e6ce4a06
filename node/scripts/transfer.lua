-- transfer.lua: hand a lock from its holder to the next holder of the same
-- client in one step, unless a waiter of another client is queued.
-- (queue.lua is spliced in at
-- --[[libraries]], see node.LuaScripts.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.Key.Waiters, see queue.lua)
-- ARGV[1]  the holder's token
-- ARGV[2]  the successor's token
-- ARGV[3]  the TTL in milliseconds
-- ARGV[4]  the client tag of both (node.Key.Owner)
-- A key whose queue serves other keys too (KEYS[2] is not KEYS[1] ..
-- ":waiters": a semaphore's slot, node.Key.Queue) is treated alike: a
-- waiter of another client that heads the line (no slot reserved for it
-- yet) gets the slot, reserved for it as release.lua does, so that a
-- client passing its slots from one call to the next cannot keep the
-- line waiting (stop 53's starved semaphore waits had such handoffs
-- among their overtakes).
-- Returns  1 the key holds the successor's token for ARGV[3] ms (it held the
--          holder's token, or nothing, or the successor's already: the same
--          command run twice); 0 the key holds another token (nothing
--          changed); -1 a waiter of another client is queued (or the queue
--          cannot be read): the holder's key, if it was there, is freed as
--          an Unlock's release.lua frees it (reserved for the head of the
--          queue), so that the other client goes first; where the key was
--          gone and the queue could be read, it is handed to the head
--          all the same, as release.lua does for an Unlock.
--          0 also where the successor's token has a tombstone
--          (node.TombKey): its rollback ran first; nothing changed.
local v = redis.call("GET", KEYS[1])
if v == ARGV[2] then
  return 1
end
if redis.call("EXISTS", KEYS[1] .. ":dead:" .. ARGV[2]) == 1 then
  -- The successor's token has a tombstone (see release.lua's ARGV[7]):
  -- its rollback ran here before this transfer, which came late. Nothing
  -- changes: the holder's release frees its key.
  return 0
end
local other = v and v ~= ARGV[1]
if other and string.sub(ARGV[1], 1, 1) ~= "~" then
  return 0
end
-- No one queued (the common case: the client's next holder waits for
-- the handoff without queueing on the nodes), answered before the
-- libraries are defined. HLEN, not EXISTS: a user that may not run the
-- hash commands cannot read the queue, and takes the path below, which
-- releases.
-- (A holder whose lock came by a grant not given here yet, other, goes
-- below: as in release.lua, its registration asking for it goes.)
if not other and redis.pcall("HLEN", KEYS[2]) == 0 then
  redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
  return 1
end
--[[libraries]]
if string.sub(ARGV[1], 1, 1) == "~" then
  -- The registration asking for the holder's grant goes, whatever the
  -- key holds here.
  pcall(queue_forget_grant, KEYS[2], ARGV[4], ARGV[1])
end
if other then
  return 0
end
local ok, others = pcall(function()
  local h = queue_head(KEYS[2], now_ms(), ARGV[4])
  return h ~= nil
end)
if not ok or others then
  -- Also where the key is gone from this node (it expired here, or the
  -- majority that made the holder did not include this node): the
  -- waiter at the head gets it now, as from an Unlock (release.lua),
  -- instead of finding its turn here only by attempts that take the free
  -- key against the majority's holder. A free key may be taken by
  -- anyone, so handing it to the head is as safe as that head's SET NX.
  if ok or v then
    hand_on(KEYS[1], KEYS[2], ARGV[4])
  end
  return -1
end
pcall(queue_drop, KEYS[2], ARGV[4])
redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
return 1
