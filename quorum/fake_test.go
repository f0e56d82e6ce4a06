package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/quorum"
)

// errNotUsed is returned by every fakeNode operation: the quorum package
// never calls a Node itself, only the Call it is given does.
var errNotUsed = errors.New("fakeNode: operation not used by quorum tests")

// fakeNode is the smallest node.Node: it only has an address. The Call
// handed to quorum.Start decides what each node "answers".
type fakeNode struct{ addr string }

var _ node.Node = fakeNode{}

func (f fakeNode) Addr() string { return f.addr }

func (fakeNode) Acquire(context.Context, *node.Key, time.Duration) (node.Status, error) {
	return node.Unknown, errNotUsed
}

func (fakeNode) Extend(context.Context, *node.Key, time.Duration) (node.Status, error) {
	return node.Unknown, errNotUsed
}

func (fakeNode) Release(context.Context, *node.Key) (node.Status, error) {
	return node.Unknown, errNotUsed
}

func (fakeNode) Inspect(context.Context, string) (node.Info, error) {
	return node.Info{}, errNotUsed
}

func (fakeNode) Close() error { return nil }

func addrOf(i int) string { return fmt.Sprintf("node-%d:6379", i) }

// fakeNodes returns n fake nodes whose Addr is addrOf(index).
func fakeNodes(n int) []node.Node {
	nodes := make([]node.Node, n)
	for i := range nodes {
		nodes[i] = fakeNode{addr: addrOf(i)}
	}
	return nodes
}

// failTimeout bounds every wait the tests do on something that must
// happen; it is only reached when the code under test is broken.
const failTimeout = 5 * time.Second

// waitAsync runs r.Wait in its own goroutine (the only one calling Wait on
// r) and delivers its Tally on the returned channel.
func waitAsync(r *quorum.Round, stop <-chan struct{}, need int) <-chan quorum.Tally {
	ch := make(chan quorum.Tally, 1)
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
// call closes sinces[k]. Round.run calls Since exactly once per reply,
// after the Call returned and before the reply is queued, so a node can
// wait for the previous node's Latency to be fixed before it moves the
// clock. The test must not call Round.Elapsed before every node answered.
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
