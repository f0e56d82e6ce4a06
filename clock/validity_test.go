package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/redlock/clock"
)

func TestValidity(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name    string
		ttl     time.Duration
		elapsed time.Duration
		factor  float64
		want    time.Duration
	}{
		{"spec example 10s", 10 * time.Second, 0, 0.01, 10*time.Second - 100*ms - 2*ms},
		{"elapsed counts", 10 * time.Second, 250 * ms, 0.01, 10*time.Second - 250*ms - 102*ms},
		{"no drift factor keeps the 2ms", time.Second, 10 * ms, 0, time.Second - 12*ms},
		{"tiny ttl is all drift", 2 * ms, 0, 0.01, -20 * time.Microsecond},
		{"1ms ttl is never valid", ms, 0, 0, -ms},
		{"3ms ttl barely valid", 3 * ms, 0, 0, ms},
		{"elapsed equals ttl", time.Second, time.Second, 0.01, -12 * ms},
		{"elapsed beyond ttl", time.Second, 3 * time.Second, 0.01, -2*time.Second - 12*ms},
		{"large factor", time.Second, 0, 0.49, 510*ms - 2*ms},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, clock.Validity(c.ttl, c.elapsed, c.factor))
		})
	}
}

func TestDrift(t *testing.T) {
	assert.Equal(t, 102*time.Millisecond, clock.Drift(10*time.Second, 0.01))
	assert.Equal(t, 2*time.Millisecond, clock.Drift(10*time.Second, 0))
}

func TestUntilIsValidityFromNow(t *testing.T) {
	start := time.Unix(1000, 0)
	until := clock.Until(start, 10*time.Second, 0.01)
	assert.Equal(t, start.Add(10*time.Second-102*time.Millisecond), until)
	for _, elapsed := range []time.Duration{0, 5 * time.Millisecond, 3 * time.Second, 10 * time.Second} {
		now := start.Add(elapsed)
		assert.Equal(t, until, now.Add(clock.Validity(10*time.Second, elapsed, 0.01)), "elapsed %v", elapsed)
	}
}

func TestFakeTimersFireInOrder(t *testing.T) {
	f := clock.NewFake(time.Unix(1000, 0))
	a := f.NewTimer(2 * time.Second).C()
	b := f.NewTimer(time.Second).C()
	now := f.NewTimer(0).C()
	assert.Len(t, now, 1, "NewTimer(0) fires at once")
	assert.Equal(t, 2, f.Waiters())

	f.Advance(999 * time.Millisecond)
	assert.Len(t, b, 0)
	f.Advance(time.Millisecond)
	assert.Equal(t, time.Unix(1001, 0), <-b)
	assert.Len(t, a, 0)
	f.Advance(5 * time.Second)
	assert.Equal(t, time.Unix(1006, 0), <-a)
	assert.Equal(t, 0, f.Waiters())
	assert.Equal(t, 6*time.Second, f.Since(time.Unix(1000, 0)))
}

func TestFakeTimerStop(t *testing.T) {
	f := clock.NewFake(time.Unix(1000, 0))
	a, b := f.NewTimer(time.Second), f.NewTimer(time.Second)
	assert.True(t, a.Stop())
	assert.False(t, a.Stop(), "stopped twice")
	assert.Equal(t, 1, f.Waiters())
	f.Advance(time.Second)
	assert.Len(t, a.C(), 0, "a stopped timer never fires")
	assert.Len(t, b.C(), 1)
	assert.False(t, b.Stop(), "already fired")
}

func TestRealTimer(t *testing.T) {
	tm := clock.Real{}.NewTimer(time.Millisecond)
	<-tm.C()
	assert.False(t, tm.Stop())
	assert.True(t, clock.Real{}.NewTimer(time.Hour).Stop())
}

func TestRealIsMonotonic(t *testing.T) {
	var c clock.Real
	t0 := c.Now()
	// A monotonic reading survives Round(0) only if present; Round(0) strips it.
	assert.NotEqual(t, t0.Round(0).String(), t0.String(), "Real.Now must carry a monotonic reading")
	assert.GreaterOrEqual(t, c.Since(t0), time.Duration(0))
}
