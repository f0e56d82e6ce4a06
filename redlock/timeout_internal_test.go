package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/redlock/node"
)

// TestDefaultNodeTimeout: TTL/200 within [20ms, 250ms], and always below
// the TTL.
func TestDefaultNodeTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       50 * time.Millisecond,
		2 * time.Second:        20 * time.Millisecond,
		time.Second:            20 * time.Millisecond,
		100 * time.Second:      250 * time.Millisecond,
		40 * time.Millisecond:  10 * time.Millisecond,
		100 * time.Millisecond: 20 * time.Millisecond,
	} {
		got := defaultNodeTimeout(ttl)
		assert.Equal(t, want, got, "TTL %v", ttl)
		assert.Less(t, got, ttl)
	}
}

// lateNode is a node whose late replies came in at a set time.
type lateNode struct {
	node.Node
	last time.Time
}

func (n *lateNode) Addr() string                         { return "late:1" }
func (n *lateNode) LastLate() (time.Time, time.Duration) { return n.last, 30 * time.Millisecond }

// TestSlowButAnsweringNodeIsNotDown: timeouts of a node whose late replies
// keep coming never open its breaker; once they stop, timeouts count.
func TestSlowButAnsweringNodeIsNotDown(t *testing.T) {
	n := &lateNode{last: time.Now()}
	c, err := New([]node.Node{n}, WithNodeTimeout(50*time.Millisecond), WithBreaker(Breaker{Failures: 2, Span: -1}))
	assert.NoError(t, err)
	defer c.Close()
	timeout := &node.Error{Addr: "late:1", Op: "acquire", Kind: node.ErrTimeout}
	for range 5 {
		_, gen := c.allow(0)
		c.record(0, gen, timeout)
	}
	assert.Equal(t, BreakerClosed, c.health.breakers[0].state, "slow but answering")

	// Waits for a pooled connection are not excused: they shed load.
	poolWait := &node.Error{Addr: "late:1", Op: "acquire", Kind: node.ErrTimeout, Err: node.ErrPoolWait}
	n.last = time.Now()
	for range 2 {
		_, gen := c.allow(0)
		c.record(0, gen, poolWait)
	}
	assert.Equal(t, BreakerOpen, c.health.breakers[0].state, "saturated: skipped")
	c.health.breakers[0] = newBreaker(Breaker{Failures: 2, Span: -1})

	n.last = time.Now().Add(-time.Second) // the late replies stopped
	for range 2 {
		_, gen := c.allow(0)
		c.record(0, gen, timeout)
	}
	assert.Equal(t, BreakerOpen, c.health.breakers[0].state, "silent: down")
}

// TestRoundTripEstimate: a fast node's timeout is the floor; a slow one's
// follows its round trips (RFC 6298), doubles after late timeouts until a
// reply comes in time, and never passes the ceiling.
func TestRoundTripEstimate(t *testing.T) {
	const lo, hi = 50 * time.Millisecond, 500 * time.Millisecond
	var fast, slow, silent rtt
	assert.Equal(t, lo, fast.timeout(lo, hi), "no sample yet: the floor")
	for range 20 {
		fast.sample(300 * time.Microsecond)
		slow.sample(80 * time.Millisecond)
	}
	assert.Equal(t, lo, fast.timeout(lo, hi))
	d := slow.timeout(lo, hi)
	assert.Equal(t, 80*time.Millisecond+lo/2, d, "steady 80ms round trips: the margin is half the floor, not their (zero) deviation")

	slow.late()
	assert.Equal(t, 2*d, slow.timeout(lo, hi), "a late reply doubles it")
	for range 10 {
		slow.late()
	}
	assert.Equal(t, hi, slow.timeout(lo, hi), "at most the ceiling")
	slow.sample(80 * time.Millisecond)
	assert.Equal(t, d, slow.timeout(lo, hi), "a reply in time ends the doubling")

	silent.late()
	assert.Equal(t, 2*lo, silent.timeout(lo, hi), "doubling works before any sample too")
}

// TestFinishBackoffStopsAtTheNodeTimeout: a release that keeps failing
// is retried after 20 ms, then twice as long each time, but never more
// than the node's timeout apart, so that it is done within about two
// timeouts of the node answering again (the release oracle's bound), not
// after a backoff that grew while the node was away.
func TestFinishBackoffStopsAtTheNodeTimeout(t *testing.T) {
	for timeout, want := range map[time.Duration][]time.Duration{
		50 * time.Millisecond:  {20, 40, 50, 50},
		200 * time.Millisecond: {20, 40, 80, 160, 200, 200},
		10 * time.Millisecond:  {20, 20}, // never below the first wait
	} {
		c, err := New([]node.Node{&lateNode{}}, WithNodeTimeout(timeout))
		assert.NoError(t, err)
		wait := time.Duration(0)
		var got []time.Duration
		for range want {
			wait = c.finishAgain(0, wait)
			got = append(got, wait/time.Millisecond)
		}
		assert.Equal(t, want, got, "node timeout %v (ms)", timeout)
		assert.NoError(t, c.Close())
	}
}

// TestWatchRetriesAFailedTryWithinATimeout: a watched release's tries
// that find nothing come ever further apart (doubling up to 2 s: the
// watch waits for a late SET); one that fails is retried as a failed
// release is, at most a node timeout later, whatever the wait had grown
// to, so that the late key goes soon after the node answers again.
func TestWatchRetriesAFailedTryWithinATimeout(t *testing.T) {
	c, err := New([]node.Node{&lateNode{}}, WithNodeTimeout(50*time.Millisecond))
	assert.NoError(t, err)
	defer c.Close()
	f := &c.fin.per[0]
	r := release{k: node.Key{Name: "k", Token: "t"}}
	f.watched = []release{r}
	f.watched[0].every = finishFirst
	every := func() time.Duration { return f.watched[0].every }
	var found []time.Duration
	for range 8 {
		c.rewatch(0, f, r, true, false) // found nothing
		found = append(found, every()/time.Millisecond)
	}
	assert.Equal(t, []time.Duration{40, 80, 160, 320, 640, 1280, 2000, 2000}, found, "found nothing (ms)")
	c.rewatch(0, f, r, true, true) // failed
	assert.Equal(t, 50*time.Millisecond, every(), "a failed try: within the node timeout")
	c.rewatch(0, f, r, true, true)
	assert.Equal(t, 50*time.Millisecond, every())
	c.rewatch(0, f, r, false, false)
	assert.Empty(t, f.watched, "ended")
}
