-- shared.lua: the readers of a key held shared (RLock), spliced in after
-- queue.lua into acquire_shared, extend_shared and release_shared, which
-- define MARKER before it.
-- While readers hold it, the lock key (KEYS[1]) holds the marker
-- "!readers" (node.SharedValue), which no token equals, so a writer's
-- SET NX, extend and release never take, lengthen or delete it; it lives
-- as long as its longest-lived reader. KEYS[3] (node.ReadersKey) is a
-- hash: per reader token, the end of its hold in the node's milliseconds
-- (TIME). A reader alone on the key, the common case, is held in the
-- value instead, the marker .. ":" .. its token, which equals no token
-- either; the key's expiry is then its hold's end, and no hash is kept.
-- A second reader moves it to the hash (acquire_shared).
-- Waiting readers queue with writers (queue.lua), each reader call under
-- a tag of its own that starts with "r" (client tags are hex; the redlock
-- client's is "r" .. client tag .. ":" .. call): a reader goes in when no
-- writer holds the key or has it reserved and no live writer is queued
-- before it, so readers and writers take turns in the order they came.
-- readers_last drops lapsed readers (and skip) and returns the latest
-- end among the others, 0 when none is left.
local function readers_last(rk, now, skip)
  local all = redis.call("HGETALL", rk)
  local last = 0
  for i = 1, #all, 2 do
    local e = tonumber(all[i + 1]) or 0
    if all[i] == skip or e <= now then
      redis.call("HDEL", rk, all[i])
    elseif e > last then
      last = e
    end
  end
  return last
end

-- writer_ahead returns the lease end of the first live writer queued
-- before ticket mine (any live writer when mine is nil), nil if none.
local function writer_ahead(wk, now, mine)
  local all = redis.call("HGETALL", wk)
  local first, lease
  for i = 1, #all, 2 do
    local tag = all[i]
    if tag ~= "#" and string.sub(tag, 1, 1) ~= "r" then
      local tk, le = string.match(all[i + 1], "^(%d+):(%d+)")
      tk, le = tonumber(tk), tonumber(le)
      if tk and le > now and (not mine or tk < mine) and (not first or tk < first) then
        first, lease = tk, le
      end
    end
  end
  return lease
end
