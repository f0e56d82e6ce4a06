-- queue.lua: the waiter queue of a lock key, spliced into every script that
-- reads or changes it (acquire, release, transfer, leave) at its line
-- --[[libraries]] (prepended to one without that line).
-- KEYS[2] of those scripts (node.WaitersKey) is a hash: per waiting client
-- tag (node.Key.Owner), "<ticket>:<lease end>", the lease end in the node's
-- milliseconds (TIME); field "#" holds the last ticket given out. The head
-- of the queue is the live waiter with the lowest ticket, the lower tag
-- breaking ties. Tickets are agreed by the waiter across nodes (the
-- largest one a majority gave it, see acquire.lua), so the nodes order
-- the waiters registered on them the same way.
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

-- queue_head drops lapsed entries and returns the head among the waiters
-- other than skip: its tag and lease end (nil when there is none).
local function queue_head(wk, now, skip)
  local all = redis.call("HGETALL", wk)
  local head, ht, hl
  for i = 1, #all, 2 do
    local tag = all[i]
    if tag ~= "#" then
      local tk, lease = string.match(all[i + 1], "^(%d+):(%d+)$")
      tk, lease = tonumber(tk), tonumber(lease)
      if not tk or lease <= now then
        queue_drop(wk, tag)
      elseif tag ~= skip and (not head or tk < ht or (tk == ht and tag < head)) then
        head, ht, hl = tag, tk, lease
      end
    end
  end
  return head, hl
end

-- queue_join queues tag, or renews its place, for lease milliseconds from
-- now, and returns its ticket: ticket when it is not 0 (a waiter sends the
-- largest any node gave it), else the one it has here, else the next one.
-- The counter is raised to the ticket, so that a waiter that queues after
-- this one is queued on a majority gets a larger one from any majority.
local function queue_join(wk, tag, ticket, lease, now)
  local mine = tonumber(ticket)
  if mine == 0 then
    local e = redis.call("HGET", wk, tag)
    local tk, le = string.match(e or "", "^(%d+):(%d+)$")
    if tk and tonumber(le) > now then
      mine = tonumber(tk)
    else
      mine = redis.call("HINCRBY", wk, "#", 1)
    end
  end
  if tonumber(redis.call("HGET", wk, "#") or "0") < mine then
    redis.call("HSET", wk, "#", mine)
  end
  redis.call("HSET", wk, tag, mine .. ":" .. (now + lease))
  redis.call("PEXPIRE", wk, lease)
  return mine
end

-- hand_on frees KEYS[1] (held by the caller): where a waiter other than
-- skip is queued, it reserves the key for the head (value "~" .. tag,
-- for what is left of the head's lease) and names it on the head's own
-- channel, key .. ":" .. tag .. ":released" (node.ReservedKey), so that
-- only the head's client hears it and only the head may take it;
-- otherwise it deletes the key and announces it to all on the release
-- channel. A head that is a reader (its tag starts with "r", see
-- shared.lua) needs no reservation: the key is deleted and announced to
-- all, and the readers queued before the first writer go in together.
local function hand_on(key, wk, skip)
  local ok, head, left = pcall(function()
    if redis.call("EXISTS", wk) == 0 then
      return nil
    end
    local now = now_ms()
    local h, lease = queue_head(wk, now, skip)
    if h then
      return h, lease - now
    end
  end)
  if ok and head and string.sub(head, 1, 1) ~= "r" then
    redis.call("SET", key, "~" .. head, "PX", left)
    redis.pcall("PUBLISH", key .. ":" .. head .. ":released", head)
  else
    redis.call("DEL", key)
    redis.pcall("PUBLISH", key .. ":released", "")
  end
end
