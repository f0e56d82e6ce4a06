package redlock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// call runs one call through b at now with the given outcome, as the
// client does (quick and quickDone first); it reports whether the call
// was let through.
func call(b *breaker, now time.Time, down bool) bool {
	ok, gen := b.quick()
	if !ok {
		ok, gen, _ = b.allow(now)
	}
	if ok && (down || !b.quickDone(gen)) {
		b.done(now, gen, down)
	}
	return ok
}

// TestBreakerQuietPath: the lock-free path answers only for a closed
// breaker with no failure counted, and with its current generation, so
// that a result from before a change of state is still dropped.
func TestBreakerQuietPath(t *testing.T) {
	b := newBreaker(Breaker{Failures: 2, Cooldown: time.Second, Span: -1})
	ok, gen := b.quick()
	require.True(t, ok)
	assert.True(t, b.quickDone(gen))
	require.True(t, call(b, t0, true))
	ok, _ = b.quick()
	assert.False(t, ok, "a failure is counted: the locked path")
	require.True(t, call(b, t0, false))
	require.True(t, call(b, t0, false))
	ok, _ = b.quick()
	assert.True(t, ok, "successes outnumber the failure: quiet again")
	require.True(t, call(b, t0, true))
	require.True(t, call(b, t0, true))
	assert.Equal(t, BreakerOpen, b.state)
	ok, _ = b.quick()
	assert.False(t, ok, "open")
	assert.False(t, b.quickDone(gen), "a call let through before the change")
	ok, probe, _ := b.allow(t0.Add(time.Second))
	require.True(t, ok, "the probe")
	ok, _ = b.quick()
	assert.False(t, ok, "half-open")
	b.done(t0.Add(time.Second), probe, false)
	ok, now := b.quick()
	require.True(t, ok, "closed by the probe")
	assert.NotEqual(t, gen, now, "a new generation")
}

// TestBreakerOpensAfterThreshold: failures open the breaker at the
// threshold; a success among them does not start the count over (a
// flapping node is skipped), but successes that outnumber the failures
// do (a node that answers most calls is not).
func TestBreakerOpensAfterThreshold(t *testing.T) {
	b := newBreaker(Breaker{Failures: 3, Cooldown: time.Second, Span: -1})
	assert.True(t, call(b, t0, true))
	assert.True(t, call(b, t0, true))
	assert.True(t, call(b, t0, false), "a success among failures")
	assert.Equal(t, BreakerClosed, b.state)
	ok, gen, _ := b.allow(t0)
	require.True(t, ok)
	tr := b.done(t0, gen, true)
	assert.Equal(t, transition{BreakerClosed, BreakerOpen}, tr, "three failures, one success: open")
	for range 100 {
		assert.False(t, call(b, t0.Add(999*time.Millisecond), true), "skipped while open")
	}
}

// TestBreakerFailingHalf: a node failing every other call is skipped; one
// that fails one call in three is not, however long it goes on.
func TestBreakerFailingHalf(t *testing.T) {
	b := newBreaker(Breaker{Failures: 3, Cooldown: time.Second, Span: -1})
	now := t0
	for i := range 300 {
		now = now.Add(time.Millisecond)
		require.True(t, call(b, now, i%3 == 0))
	}
	assert.Equal(t, BreakerClosed, b.state, "a third of 300 calls failed")
	for i := range 5 {
		now = now.Add(time.Millisecond)
		require.True(t, call(b, now, i%2 == 0))
	}
	assert.Equal(t, BreakerOpen, b.state, "failure, success, failure, success, failure")
}

// TestBreakerWindow: failures further apart than Window are forgotten.
func TestBreakerWindow(t *testing.T) {
	b := newBreaker(Breaker{Failures: 3, Window: 10 * time.Second, Span: -1})
	for _, at := range []time.Duration{0, 5, 16} { // the third comes 11s after the second
		require.True(t, call(b, t0.Add(at*time.Second), true))
	}
	assert.Equal(t, BreakerClosed, b.state)
	require.True(t, call(b, t0.Add(20*time.Second), true))
	require.True(t, call(b, t0.Add(29*time.Second), true))
	assert.Equal(t, BreakerOpen, b.state, "16s, 20s, 29s: each within 10s of the one before")
}

// TestBreakerSpan: failures that end together (a stall of this process
// times out every call in flight at once) count once, however many; a
// node that goes on failing opens the breaker after (Failures-1)*Span.
func TestBreakerSpan(t *testing.T) {
	b := newBreaker(Breaker{Failures: 3, Cooldown: time.Second, Span: 125 * time.Millisecond})
	for i := range 100 {
		require.True(t, call(b, t0.Add(time.Duration(i)*time.Millisecond), true), "a burst of timeouts")
	}
	assert.Equal(t, BreakerClosed, b.state, "100 failures within 100ms")
	for i := range 101 {
		require.True(t, call(b, t0.Add(100*time.Millisecond+time.Duration(i)*time.Microsecond), false))
	}
	now := t0.Add(time.Second)
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		require.True(t, call(b, now.Add(at), true))
	}
	assert.Equal(t, BreakerClosed, b.state, "101 answers ended the count; then three failures within 200ms count twice")
	require.True(t, call(b, now.Add(260*time.Millisecond), true))
	assert.Equal(t, BreakerClosed, b.state, "the fourth is 60ms after the last counted")
	require.True(t, call(b, now.Add(330*time.Millisecond), true))
	assert.Equal(t, BreakerOpen, b.state, "the fifth is 130ms after the last counted: three")
}

// TestBreakerAnswersNeverTrip: an answered call (taken, absent, refused
// credentials) is not a failure, however many there are.
func TestBreakerAnswersNeverTrip(t *testing.T) {
	b := newBreaker(Breaker{})
	for range 1000 {
		require.True(t, call(b, t0, false))
	}
	assert.Equal(t, BreakerClosed, b.state)
}

func TestBreakerProbeAndCooldown(t *testing.T) {
	b := newBreaker(Breaker{Failures: 1, Cooldown: time.Second, MaxCooldown: 3 * time.Second, Span: -1})
	now := t0
	require.True(t, call(b, now, true)) // opens for 1 s
	assert.False(t, call(b, now.Add(999*time.Millisecond), false))

	now = now.Add(time.Second)
	ok, gen, tr := b.allow(now)
	require.True(t, ok, "one probe after the cooldown")
	assert.Equal(t, transition{BreakerOpen, BreakerHalfOpen}, tr)
	assert.False(t, call(b, now, false), "a second call while the probe is in flight")
	assert.Equal(t, transition{BreakerHalfOpen, BreakerOpen}, b.done(now, gen, true), "failed probe re-opens")

	// 2 s now, then 3 s (capped).
	assert.False(t, call(b, now.Add(1999*time.Millisecond), false))
	now = now.Add(2 * time.Second)
	require.True(t, call(b, now, true))
	assert.False(t, call(b, now.Add(2999*time.Millisecond), false))
	now = now.Add(3 * time.Second)
	require.True(t, call(b, now, true))
	assert.False(t, call(b, now.Add(2999*time.Millisecond), false), "capped at MaxCooldown")
	now = now.Add(3 * time.Second)

	ok, gen, _ = b.allow(now)
	require.True(t, ok)
	assert.Equal(t, transition{BreakerHalfOpen, BreakerClosed}, b.done(now, gen, false), "a good probe closes")
	assert.True(t, call(b, now, false))
	// The cooldown starts over after a close.
	require.True(t, call(b, now, true))
	assert.True(t, call(b, now.Add(time.Second), false))
}

// TestBreakerDropsStaleResults: a call let through before the breaker
// opened, returning during the half-open probe, decides nothing.
func TestBreakerDropsStaleResults(t *testing.T) {
	b := newBreaker(Breaker{Failures: 1, Cooldown: time.Second, Span: -1})
	_, slow, _ := b.allow(t0) // a call that will return late
	require.True(t, call(b, t0, true))
	ok, probe, _ := b.allow(t0.Add(time.Second))
	require.True(t, ok)
	b.done(t0.Add(time.Second), slow, false)
	assert.Equal(t, BreakerHalfOpen, b.state, "the late success did not close the breaker")
	b.done(t0.Add(time.Second), probe, false)
	assert.Equal(t, BreakerClosed, b.state)
}

// TestBreakerOneProbeUnderConcurrency: of many calls racing when the
// cooldown ends, exactly one is the probe.
func TestBreakerOneProbeUnderConcurrency(t *testing.T) {
	b := newBreaker(Breaker{Failures: 1, Cooldown: time.Second, Span: -1})
	require.True(t, call(b, t0, true))
	var wg sync.WaitGroup
	var mu sync.Mutex
	through := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _, _ := b.allow(t0.Add(time.Second)); ok {
				mu.Lock()
				through++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, through)
}

func TestBreakerDisabled(t *testing.T) {
	assert.Nil(t, newNodeBreakers(Breaker{Failures: -1}, 3, time.Second))
	var b *breaker
	ok, _, _ := b.allow(t0)
	assert.True(t, ok, "a nil breaker lets everything through")
}

// TestBreakerUnsentCallsSayNothing: a call that was let through but never
// sent (the lock's previous command on the node had not returned) neither
// counts as a success nor closes the breaker, and an unsent probe
// lets the next call probe. Counted as successes, the releases queued
// behind timed-out acquires would outnumber the failures on every cycle, and a
// blackholed node was never skipped once the run had to span 250ms.
func TestBreakerUnsentCallsSayNothing(t *testing.T) {
	b := newBreaker(Breaker{Failures: 3, Cooldown: time.Second, Span: 125 * time.Millisecond})
	for i := range 7 {
		now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		require.True(t, call(b, now, true))
		if i < 6 {
			require.Equal(t, BreakerClosed, b.state, "the failures span %v", now.Sub(t0))
			ok, gen, _ := b.allow(now)
			require.True(t, ok)
			b.unsent(now, gen)
		}
	}
	assert.Equal(t, BreakerOpen, b.state, "a failure every 50ms, unsent calls between them: open at 300ms")

	probeAt := b.reopen
	ok, gen, _ := b.allow(probeAt)
	require.True(t, ok, "the probe")
	assert.Equal(t, transition{BreakerHalfOpen, BreakerOpen}, b.unsent(probeAt, gen), "an unsent probe")
	ok, gen, _ = b.allow(probeAt)
	require.True(t, ok, "the next call probes at once")
	assert.Equal(t, transition{BreakerHalfOpen, BreakerClosed}, b.done(probeAt, gen, false))
}
