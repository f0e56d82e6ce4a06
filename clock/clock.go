// Package clock is the time source every Redlock measurement goes through.
//
// Lock validity is computed from a monotonic clock: a wall-clock step (NTP,
// an operator) on the client must never make a lock look valid for longer
// than it is. Real uses the runtime's monotonic reading; Fake lets unit tests
// move time by hand instead of sleeping.
package clock

import "time"

// Clock is a source of monotonic time.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. Times from Real carry a monotonic
	// reading, so Since and Sub on them are immune to wall-clock steps.
	Now() time.Time
	// Since returns the time elapsed since t, as measured by this clock.
	Since(t time.Time) time.Duration
	// After returns a channel that receives the current time once d has
	// elapsed on this clock. d <= 0 fires at once.
	After(d time.Duration) <-chan time.Time
}

// Real is the process's own clock. Its zero value is ready to use.
type Real struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t), monotonic when t came from Now.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
