-- inspect.lua: read a lock's token and remaining TTL in one atomic step.
-- KEYS[1]  the lock key
-- Returns  {token or false, PTTL in ms}; PTTL is -2 when the key is absent.
return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1])}
