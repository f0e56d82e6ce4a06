package quorum_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// failTimeout bounds every wait the tests do on something that must
// happen; it is only reached when the code under test is broken.
const failTimeout = 5 * time.Second

// start is quorum.Start on clk whose calls are counted: once the test
// function (and its defers, which release whatever the calls block on) has
// returned, a cleanup waits until every call has returned, so no test
// leaves a call running behind it.
func start(t *testing.T, clk clock.Clock, n int, call func(i int) (node.Result, error)) *quorum.Round {
	t.Helper()
	var calls sync.WaitGroup
	calls.Add(n)
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { calls.Wait(); close(done) }()
		recv(t, done, "every call to return")
	})
	r := new(quorum.Round)
	r.Start(clk, n, quorum.CallFunc(func(i int) (node.Result, error) {
		defer calls.Done()
		return call(i)
	}))
	return r
}

// waitAsync runs r.Wait in its own goroutine (the only one calling Wait on
// r) and delivers its Count on the returned channel.
func waitAsync(r *quorum.Round, stop <-chan struct{}, need int) <-chan quorum.Count {
	ch := make(chan quorum.Count, 1)
	go func() { ch <- r.Wait(stop, need) }()
	return ch
}

// recv receives one value from ch or fails the test after failTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failTimeout):
		require.FailNowf(t, "timed out", "waiting for %s", what)
		panic("unreachable")
	}
}

// notYet asserts that nothing arrives on ch within d. It is a negative
// check: it can only prove "not within d", so d is kept short.
func notYet[T any](t *testing.T, ch <-chan T, d time.Duration, what string) bool {
	t.Helper()
	select {
	case v := <-ch:
		t.Errorf("%s: got %+v too early", what, v)
		return false
	case <-time.After(d):
		return true
	}
}

// eventually polls cond until it holds, or fails the test after
// failTimeout.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(failTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNowf(t, "timed out", "waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// gate is a channel closed once, by whichever of the test's code paths
// (normal flow or deferred clean-up) gets there first.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open()                 { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() <-chan struct{} { return g.ch }

// steppedClock is a clock.Fake that also reports each Since call: the k-th
// call closes sinces[k]. A call's goroutine calls Since exactly once, after
// the call returned and before its reply is queued, so a node can wait for
// the previous node's Latency to be fixed before it moves the clock. The
// test must not call Round.Elapsed before every node answered.
type steppedClock struct {
	*clock.Fake
	mu     sync.Mutex
	n      int
	sinces []chan struct{}
}

func newSteppedClock(start time.Time, n int) *steppedClock {
	c := &steppedClock{Fake: clock.NewFake(start), sinces: make([]chan struct{}, n)}
	for i := range c.sinces {
		c.sinces[i] = make(chan struct{})
	}
	return c
}

func (c *steppedClock) Since(t time.Time) time.Duration {
	d := c.Fake.Since(t)
	c.mu.Lock()
	if c.n < len(c.sinces) {
		close(c.sinces[c.n])
	}
	c.n++
	c.mu.Unlock()
	return d
}
