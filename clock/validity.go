package clock

import "time"

// precision is the fixed part of the drift allowance: 1 ms for Redis' own
// expiry precision plus 1 ms of minimum drift for tiny TTLs. The reference
// Ruby client and its ports add the same 2 ms; go-redsync leaves it out.
const precision = 2 * time.Millisecond

// Drift is the part of a TTL a client must give up to allow for the nodes'
// clocks running faster than its own: ttl×factor + 2 ms.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + precision
}

// Validity returns how long a lock taken with ttl is still safe to use when
// elapsed has passed between sending the first command and counting the
// quorum:
//
//	validity = ttl − elapsed − (ttl×factor + 2 ms)
//
// A result <= 0 means the lock must be treated as not acquired. The result
// is never clamped, so callers can tell "barely" from "long" expired.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}
