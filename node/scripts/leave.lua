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
if ARGV[2] == "*" then
  -- node.LeaveAll: the client leaves for good; its entry goes whatever
  -- grant it asks, and a key reserved for it or granted to any of its
  -- calls ("~" .. tag .. ":" .. id, node.GrantValue) is handed on. A
  -- client's readers' tag ("r" .. tag) takes out each of its reader
  -- calls' entries ("r" .. tag .. ":" .. call, see shared.lua).
  pcall(queue_drop, KEYS[2], ARGV[1])
  if string.sub(ARGV[1], 1, 1) == "r" then
    pcall(function()
      local p = ARGV[1] .. ":"
      for _, f in ipairs(redis.call("HKEYS", KEYS[2])) do
        if string.sub(f, 1, #p) == p then
          queue_drop(KEYS[2], f)
        end
      end
    end)
  end
  local v = redis.call("GET", KEYS[1])
  local mark = "~" .. ARGV[1]
  if v == mark or (v and string.sub(v, 1, #mark + 1) == mark .. ":") or (v == "~r" and string.sub(ARGV[1], 1, 1) == "r") then
    if v ~= mark and v ~= "~r" then
      drop_record(KEYS[1], v) -- a fenced grant's (queue.lua)
    end
    hand_on(KEYS[1], KEYS[2], ARGV[1])
  elseif not v and KEYS[2] == KEYS[1] .. ":waiters" then
    hand_on(KEYS[1], KEYS[2], ARGV[1], true)
  end
  return 1
end
local e = redis.pcall("HGET", KEYS[2], ARGV[1])
local mine = true
if ARGV[2] and ARGV[2] ~= "" and type(e) == "string" then
  local _, _, _, _, _, g = queue_entry(e)
  mine = not g or g == ARGV[2]
end
local v = redis.call("GET", KEYS[1])
if not mine then
  if v == ARGV[2] then
    drop_record(KEYS[1], v)
    hand_on(KEYS[1], KEYS[2], nil) -- the next call may be the head
  end
  return 1
end
pcall(queue_drop, KEYS[2], ARGV[1])
if v == "~" .. ARGV[1] or (v == ARGV[2] and v ~= "") or (v == "~r" and string.sub(ARGV[1], 1, 1) == "r") then
  -- (The readers' reservation, "~r": the next head decides, a reader
  -- that still comes or a writer; see hand_on.)
  if v == ARGV[2] then
    drop_record(KEYS[1], v) -- a fenced grant's (queue.lua)
  end
  hand_on(KEYS[1], KEYS[2], ARGV[1])
elseif not v and KEYS[2] == KEYS[1] .. ":waiters" then
  hand_on(KEYS[1], KEYS[2], ARGV[1], true)
end
return 1
