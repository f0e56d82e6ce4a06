package redlock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides whether and how long Lock waits before its next
// attempt. Implementations must be safe for concurrent use; the ones in
// this package are stateless.
type RetryStrategy interface {
	// Backoff is called before each wait of a Lock call: after a failed
	// attempt, or while a lock of the same client holds the key and the
	// call waits for its handoff. attempt numbers those waits: 1 for the
	// first, then 2, 3..., each once, so that without handoffs it is the
	// number of attempts made. It returns the delay before the next
	// attempt, and false to give up.
	Backoff(attempt int) (time.Duration, bool)
}

// RetryFunc adapts a function to RetryStrategy.
type RetryFunc func(attempt int) (time.Duration, bool)

// Backoff calls f.
func (f RetryFunc) Backoff(attempt int) (time.Duration, bool) { return f(attempt) }

// NoRetry gives up after the first attempt; Lock then behaves like TryLock.
func NoRetry() RetryStrategy {
	return RetryFunc(func(int) (time.Duration, bool) { return 0, false })
}

// ExponentialBackoff retries forever (until the context ends) with "full
// jitter": the delay before attempt n+1 is uniform in [0, min(max,
// base×2^(n-1))]. The randomness is what desynchronises competing clients,
// as the Redlock description asks. base and max are clamped to at least
// 1 ms and max to at least base.
func ExponentialBackoff(base, max time.Duration) RetryStrategy {
	base = max1ms(base)
	if max < base {
		max = base
	}
	return RetryFunc(func(attempt int) (time.Duration, bool) {
		ceil := max
		if attempt < 1 {
			attempt = 1
		}
		if attempt <= 62 {
			if d := base << (attempt - 1); d > 0 && d < max && d>>(attempt-1) == base {
				ceil = d
			}
		}
		return time.Duration(rand.Int64N(int64(ceil) + 1)), true
	})
}

// LinearBackoff retries forever with a delay uniform in [d/2, d×3/2].
func LinearBackoff(d time.Duration) RetryStrategy {
	d = max1ms(d)
	return RetryFunc(func(int) (time.Duration, bool) {
		return d/2 + time.Duration(rand.Int64N(int64(d)+1)), true
	})
}

// LimitRetry bounds s to at most tries attempts in all (the first one
// included). tries < 1 counts as 1.
func LimitRetry(s RetryStrategy, tries int) RetryStrategy {
	return RetryFunc(func(attempt int) (time.Duration, bool) {
		if attempt >= tries {
			return 0, false
		}
		return s.Backoff(attempt)
	})
}

// DefaultRetry is the strategy Lock uses unless told otherwise:
// exponential backoff with full jitter from 10 ms up to 500 ms, with no
// limit on attempts: a Lock call waits until it holds the lock, its
// context ends, WithMaxWait's limit passes, or the nodes refuse in a way
// no retry changes. (It used to give up after 32 attempts, which a waiter
// behind a busy lock spent in about a second of wake-ups.)
func DefaultRetry() RetryStrategy {
	return ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond)
}

func max1ms(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return time.Millisecond
	}
	return d
}
