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
	// NewTimer returns a timer that fires once d has elapsed on this
	// clock. d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the clock's time once, when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing and releases it. It reports
	// false if the timer had already fired or been stopped.
	Stop() bool
}

// Real is the process's own clock. Its zero value is ready to use.
type Real struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t), monotonic when t came from Now.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
