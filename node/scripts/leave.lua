-- leave.lua: take a waiter that gives up out of a key's queue; a key
-- reserved for it (or, for a reader, for the readers), or granted to it,
-- goes to the next head, and so does
-- a key of its own queue that is absent where others still wait (the
-- rollback of the leaver's last attempt may have deleted it quietly, the
-- leaver heading the queue then, see release.lua's ARGV[4]); with no one
-- left, nothing is announced. A record a fenced grant kept for the
-- leaver goes with its grant (drop_record). (queue.lua is prepended.)
-- KEYS[1]  the lock key
-- KEYS[2]  its waiters (node.WaitersKey, see queue.lua)
-- ARGV[1]  the waiter's client tag (node.Key.Owner)
-- ARGV[2]  the grant it asked for (node.Key.Grant); "" (or absent): none;
--          "*" (node.LeaveAll): the client leaves for good, see below
-- Returns  1.
-- The queue knows a waiter by its client's tag; a Leave with a grant
-- names its call (the grant is fresh for each call, node.GrantValue).
-- An entry that asks for another grant is the client's next call's,
-- registered before this Leave came (a Leave may run late): it stays,
-- and so does a key reserved for the client, which that call takes.
local all = ARGV[2] == "*"
local v = redis.call("GET", KEYS[1])
if not all and ARGV[2] and ARGV[2] ~= "" then
  local e = redis.pcall("HGET", KEYS[2], ARGV[1])
  local g = nil
  if type(e) == "string" then
    g = select(6, queue_entry(e))
  end
  if g and g ~= ARGV[2] then
    -- The entry is a later call's of the client: it stays, and so does
    -- a key reserved for the client; only the grant named goes on.
    if v == ARGV[2] then
      drop_record(KEYS[1], v)
      hand_on(KEYS[1], KEYS[2], nil) -- the next call may be the head
    end
    return 1
  end
end
pcall(queue_drop, KEYS[2], ARGV[1])
if all and string.sub(ARGV[1], 1, 1) == "r" then
  -- node.LeaveAll of a client's readers' tag ("r" .. tag) takes out
  -- each of its reader calls' entries ("r" .. tag .. ":" .. call, see
  -- shared.lua).
  pcall(function()
    local p = ARGV[1] .. ":"
    for _, f in ipairs(redis.call("HKEYS", KEYS[2])) do
      if string.sub(f, 1, #p) == p then
        queue_drop(KEYS[2], f)
      end
    end
  end)
end
-- A key reserved for the leaver, granted to the call named (to any of
-- the client's calls, "~" .. tag .. ":" .. id, node.GrantValue, for
-- node.LeaveAll), or the readers' reservation ("~r": the next head
-- decides, a reader that still comes or a writer; see hand_on) goes to
-- the next head; so does an absent key of the key's own queue.
local mark = "~" .. ARGV[1]
local granted
if all then
  granted = v and string.sub(v, 1, #mark + 1) == mark .. ":"
else
  granted = v == ARGV[2] and v ~= ""
end
if v == mark or granted or (v == "~r" and string.sub(ARGV[1], 1, 1) == "r") then
  if granted then
    drop_record(KEYS[1], v) -- a fenced grant's (queue.lua)
  end
  hand_on(KEYS[1], KEYS[2], ARGV[1])
elseif not v and KEYS[2] == KEYS[1] .. ":waiters" then
  hand_on(KEYS[1], KEYS[2], ARGV[1], true)
end
return 1
