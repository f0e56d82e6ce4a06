-- queue.lua: the waiter queue of a lock key, spliced into every script that
-- reads or changes it (acquire, release, transfer, leave) at its line
-- --[[libraries]] (prepended to one without that line).
-- KEYS[2] of those scripts (node.Key.Waiters) is a hash: per waiting
-- client tag (node.Key.Owner), "<ticket>:<lease end>", the lease end in
-- the node's milliseconds (TIME), followed by ":<end>" while a key is
-- reserved for that waiter until end (hand_on), or by
-- "::<ttl>:<token>:<grant>" for a waiter that asked to be granted the key
-- directly (acquire.lua's ARGV[6], node.Key.Grant): the grant TTL
-- (ARGV[7]) and token of the attempt that registered it last; or by
-- "::<ttl>,<fence>,<counter ttl>,<record ttl>:<token>:<grant>\n<record>"
-- for a fenced waiter's grant (acquire_fenced.lua, node.Key.GrantFence):
-- the fence it proposes, the TTLs of the fence counter and of the
-- record, and the record's text (an election's; "": none). Field "#"
-- holds the last ticket given out. The head of the queue is the live waiter with the
-- lowest ticket, the lower tag breaking ties, among those no key is
-- reserved for. A queue is a lock's own when KEYS[2] is KEYS[1] ..
-- ":waiters" (node.WaitersKey); otherwise it serves several keys (a
-- semaphore's slots, node.Key.Queue), a waiter takes one key at a time,
-- and hand_on, release.lua and transfer.lua treat it as such. Tickets
-- are agreed by the waiter across nodes (the largest one a majority gave
-- it, see acquire.lua), so the nodes order the waiters registered on
-- them the same way.
-- Every queue command goes through pcall in the scripts: an ACL user
-- without TIME or the hash commands still locks and waits, in no order.
if redis.replicate_commands then
  redis.replicate_commands() -- TIME before a write (Redis < 5; a no-op since)
end

local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- queue_drop removes tag's entry; the hash goes once no waiter is left.
local function queue_drop(wk, tag)
  redis.call("HDEL", wk, tag)
  if redis.call("HLEN", wk) <= 1 then
    redis.call("DEL", wk)
  end
end

-- queue_entry parses an entry: ticket, lease end, the end of the
-- reservation for it (0: none), and for a waiter that asked for a grant
-- its TTL, the registering attempt's token and the grant (nil: none),
-- and for a fenced grant {fence, counter TTL, record TTL, record text},
-- as strings (nil: an unfenced one; a fence keeps its digits: Lua's
-- tostring of a double above 10^14 would not); nil for a malformed one.
local function queue_entry(e)
  e = e or ""
  local nl = string.find(e, "\n", 1, true) -- only a fenced grant's entry has one
  if nl then
    local head, text = string.sub(e, 1, nl - 1), string.sub(e, nl + 1)
    local tk, lease, gttl, f, ct, rt, t, g = string.match(head, "^(%d+):(%d+)::(%d+),(%d+),(%d+),(%d+):([^:]+):(.+)$")
    if not tk then
      return nil
    end
    return tonumber(tk), tonumber(lease), 0, tonumber(gttl), t, g, {f, ct, rt, text}
  end
  local tk, lease, gttl, t, g = string.match(e, "^(%d+):(%d+)::(%d+):([^:]+):(.+)$")
  if tk then
    return tonumber(tk), tonumber(lease), 0, tonumber(gttl), t, g
  end
  local rs
  tk, lease, rs = string.match(e, "^(%d+):(%d+):?(%d*)$")
  return tonumber(tk), tonumber(lease), tonumber(rs) or 0
end

-- queue_forget_grant drops tag's entry where it asks for grant: the lock
-- that grant stands for is done with this node (release.lua).
local function queue_forget_grant(wk, tag, grant)
  local e = redis.call("HGET", wk, tag)
  if e and tag ~= "" and select(6, queue_entry(e)) == grant then
    queue_drop(wk, tag)
  end
end

-- queue_head drops lapsed entries and returns the head among the waiters
-- other than skip that no key is reserved for: its tag, lease end,
-- ticket, and the grant it asked for, as queue_entry (nil: none; nil
-- when there is no head).
local function queue_head(wk, now, skip)
  local all = redis.call("HGETALL", wk)
  local head, ht, hl, hgt, hgtok, hg, hf
  for i = 1, #all, 2 do
    local tag = all[i]
    if tag ~= "#" then
      local tk, lease, rs, gttl, gtok, g, f = queue_entry(all[i + 1])
      if not tk or lease <= now then
        queue_drop(wk, tag)
      elseif tag ~= skip and rs <= now and (not head or tk < ht or (tk == ht and tag < head)) then
        head, ht, hl, hgt, hgtok, hg, hf = tag, tk, lease, gttl, gtok, g, f
      end
    end
  end
  return head, hl, ht, hgt, hgtok, hg, hf
end

-- queue_join queues tag, or renews its place, for lease milliseconds from
-- now, and returns its ticket: ticket when it is not 0 (a waiter sends the
-- largest any node gave it), else the one it has here, else the next one.
-- The counter is raised to the ticket, so that a waiter that queues after
-- this one is queued on a majority gets a larger one from any majority.
-- A reservation for it that has not ended is kept; grant (nil or "":
-- none) is the value the waiter asks a release to set the key to for
-- gttl milliseconds when it hands the key on to it (see hand_on), token
-- the registering attempt's, fence (nil: none) a fenced grant's
-- {fence, counter TTL, record TTL, record text} (see queue_entry).
local function queue_join(wk, tag, ticket, lease, now, gttl, token, grant, fence)
  local mine = tonumber(ticket)
  local tk, le, rs = queue_entry(redis.call("HGET", wk, tag))
  if not tk or le <= now then
    rs = 0
  end
  if mine == 0 then
    if tk and le > now then
      mine = tk
    else
      mine = redis.call("HINCRBY", wk, "#", 1)
    end
  end
  if tonumber(redis.call("HGET", wk, "#") or "0") < mine then
    redis.call("HSET", wk, "#", mine)
  end
  local e = mine .. ":" .. (now + lease)
  if rs > now then
    e = e .. ":" .. rs
  elseif grant and grant ~= "" and fence then
    e = e .. "::" .. gttl .. "," .. fence[1] .. "," .. fence[2] .. "," .. fence[3] .. ":" .. token .. ":" .. grant .. "\n" .. fence[4]
  elseif grant and grant ~= "" then
    e = e .. "::" .. gttl .. ":" .. token .. ":" .. grant
  end
  redis.call("HSET", wk, tag, e)
  redis.call("PEXPIRE", wk, lease)
  return mine
end

-- drop_record deletes the record beside key (key .. ":leader",
-- node.AnnounceKey) where a fenced grant kept it for token (see hand_on)
-- and the grant is going without a release that would take it: handed
-- on by a Leave, or taken by its waiter's acquire, whose confirm keeps
-- its own. The change is announced as announce.lua's.
local function drop_record(key, token)
  local r = redis.call("GET", key .. ":leader")
  if r and string.sub(r, 1, #token + 1) == token .. "\n" then
    redis.call("DEL", key .. ":leader")
    redis.pcall("PUBLISH", key .. ":leader:released", "")
  end
end

-- hand_on frees KEYS[1] (held by the caller): where a waiter other than
-- skip is queued, it reserves the key for the head (value "~" .. tag,
-- for what is left of the head's lease; where the queue serves other
-- keys too, the head's entry records it, so that another key of the
-- queue goes to the next head) and names it on
-- the head's own channel, key .. ":" .. tag .. ":released"
-- (node.ReservedKey), so that only the head's client hears it and only
-- the head may take it; otherwise it deletes the key and, unless quiet,
-- announces it to all on the release channel. A head that is a reader
-- (its tag starts with "r", see shared.lua) gets a reservation for the
-- readers, value "~r" (node.ReadersReserved), for what is left of its
-- lease, announced to all (unless quiet): the readers queued before the
-- first writer go in together (acquire_shared.lua), and a writer's
-- plain SET NX, which does not look at the queue, finds the key taken.
-- (A free key let any writer's first try in ahead of them, for as long
-- as writers kept coming.)
-- A head of a lock's own queue that asked for a grant (queue_join) is
-- given the key instead: its value becomes the grant, for the grant's
-- TTL, the head leaves the queue, and the grant is announced on the
-- head's channel, the message naming the grant and the attempt that
-- registered it, grant .. ":" .. token (node.GrantMessage): the waiter
-- holds the key here without another command (node.Key.Grant).
-- A fenced grant (node.Key.GrantFence) is given only where the key's
-- fence counter (key .. ":fence", node.FenceKey) exists and is below the
-- fence the waiter proposed: the counter is raised to that fence with
-- the key, and a record the waiter sent (an election's) is kept beside
-- the key (key .. ":leader", node.AnnounceKey) as announce.lua keeps it.
-- Elsewhere (the counter has reached the proposal, or is gone) the key
-- is reserved for the head instead, and its fenced acquire takes it.
-- So every node that grants it sets the same fence, above the counter
-- it had: the fence of a grant by a majority needs no confirm round
-- (see Client.granted).
local function hand_on(key, wk, skip, quiet)
  local ok, head, left, grant, msg, fence = pcall(function()
    if redis.call("EXISTS", wk) == 0 then
      return nil
    end
    local now = now_ms()
    local h, lease, tk, gttl, gtok, g, f = queue_head(wk, now, skip)
    if not h and not quiet and redis.call("HLEN", wk) == 1 then
      -- Only the ticket counter: a mark of a waiter that does not
      -- queue (see acquire_fenced.lua), which this announcement serves
      -- (a quiet one leaves it for the next).
      redis.call("DEL", wk)
    end
    if not h then
      return nil
    elseif string.sub(h, 1, 1) == "r" then
      return h, lease - now
    end
    if wk ~= key .. ":waiters" then
      -- A queue that serves other keys too (a lock's own queue is
      -- node.WaitersKey(key); a semaphore's line is named otherwise):
      -- the next release of one of them goes to the next head.
      redis.call("HSET", wk, h, tk .. ":" .. lease .. ":" .. lease)
    elseif g and (not f or (tonumber(redis.call("GET", key .. ":fence")) or math.huge) < tonumber(f[1])) then
      queue_drop(wk, h)
      return h, gttl, g, g .. ":" .. gtok, f
    end
    return h, lease - now
  end)
  if ok and head and string.sub(head, 1, 1) == "r" then
    redis.call("SET", key, "~r", "PX", math.max(1, left))
    if not quiet then
      redis.pcall("PUBLISH", key .. ":released", "")
    end
  elseif ok and head then
    if grant then
      redis.call("SET", key, grant, "PX", left)
      if fence then
        redis.call("SET", key .. ":fence", fence[1], "PX", fence[2])
        if fence[4] ~= "" then
          redis.call("SET", key .. ":leader", grant .. "\n" .. fence[4], "PX", fence[3])
          redis.pcall("PUBLISH", key .. ":leader:released", "")
        end
      end
      redis.pcall("PUBLISH", key .. ":" .. head .. ":released", msg)
      return
    end
    redis.call("SET", key, "~" .. head, "PX", left)
    redis.pcall("PUBLISH", key .. ":" .. head .. ":released", head)
  else
    redis.call("DEL", key)
    if not quiet then
      redis.pcall("PUBLISH", key .. ":released", "")
    end
  end
end
