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

// Until returns the end of the validity of a lock whose commands were
// first sent at start: start + ttl − (ttl×factor + 2 ms). A node sets the
// key no earlier than start, so the key lives at least ttl past start by
// that node's clock; the drift allowance covers node clocks that run
// faster than the client's. For any later now it equals
// now + Validity(ttl, now−start, factor): the validity is counted from
// the moment it is measured, not subtracted twice.
func Until(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(ttl - Drift(ttl, factor))
}
