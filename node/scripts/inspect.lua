-- inspect.lua: read a lock's token, remaining TTL and readers in one
-- atomic step.
-- KEYS[1]  the lock key
-- KEYS[2]  its readers (node.ReadersKey)
-- Returns  {token or false, PTTL in ms, live readers}; PTTL is -2 when the
--          key is absent; readers counts the holds of a key held shared
--          (value "!readers", also returned for a reader alone) that have
--          not ended in the node's time.
local v = redis.call("GET", KEYS[1])
local n = 0
if v and string.sub(v, 1, 9) == "!readers:" then
  -- A reader alone, held in the value (see shared.lua): live while
  -- the key is.
  v, n = "!readers", 1
elseif v == "!readers" then
  local ok, c = pcall(function()
    local t = redis.call("TIME")
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local all = redis.call("HGETALL", KEYS[2])
    local live = 0
    for i = 2, #all, 2 do
      if tonumber(all[i]) > now then
        live = live + 1
      end
    end
    return live
  end)
  if ok then
    n = c
  end
end
return {v, redis.call("PTTL", KEYS[1]), n}
