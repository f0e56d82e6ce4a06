package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// lateNode is a fakeNode whose first acquire gives up before its reply
// comes, as the redigo node's call does at its deadline: it returns a
// timeout that is node.Pending, and the SET runs on the node only when
// the test lands it (land), which then closes the pending channel.
type lateNode struct {
	*fakeNode
	once    sync.Once
	pending chan struct{}
	mu      sync.Mutex
	late    func() // the SET still to run; nil once run
}

func (n *lateNode) Acquire(ctx context.Context, k *node.Key, ttl time.Duration, holderTTL bool) (node.Result, error) {
	first := false
	n.once.Do(func() { first = true })
	if !first {
		return n.fakeNode.Acquire(ctx, k, ttl, holderTTL)
	}
	kc := *k
	n.mu.Lock()
	n.late = func() { _, _ = n.fakeNode.Acquire(context.Background(), &kc, ttl, holderTTL) }
	n.mu.Unlock()
	e := &node.Error{Addr: n.addr, Op: "acquire", Kind: node.ErrTimeout, Err: context.DeadlineExceeded}
	return node.Result{}, node.WithPending(e, n.pending)
}

// land runs the late SET on the node, then tells that its reply came.
func (n *lateNode) land() {
	n.mu.Lock()
	late := n.late
	n.late = nil
	n.mu.Unlock()
	late()
	close(n.pending)
}

// lateSetup is a client over three fake nodes with the node timeout
// given, node 0 a lateNode.
func lateSetup(t *testing.T, timeout time.Duration) ([]*fakeNode, *lateNode, *redlock.Client) {
	t.Helper()
	fakes, _, _ := setup(t, 3)
	late := &lateNode{fakeNode: fakes[0], pending: make(chan struct{})}
	c, err := redlock.New([]node.Node{late, fakes[1], fakes[2]}, redlock.WithClock(fakes[0].clk), redlock.WithNodeTimeout(timeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return fakes, late, c
}

// TestLateAcquireIsReleasedAfterItLands: a node's acquire that gave up
// before its reply came may still run there; the lock's Unlock sends
// that node its release only once the driver has the late reply
// (node.Pending), so the late SET cannot outlive the lock on the node.
func TestLateAcquireIsReleasedAfterItLands(t *testing.T) {
	fakes, late, c := lateSetup(t, 500*time.Millisecond)
	ctx := context.Background()

	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err, "held on the two nodes that answered")
	require.NoError(t, l.Unlock(ctx), "released on the two nodes that answered")
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, fakes[0].count("release"), "no release on node 0 while its acquire may still run there")

	late.land() // the SET runs on node 0 after all
	require.Eventually(t, func() bool { return fakes[0].token("k") == "" }, 5*time.Second, time.Millisecond,
		"node 0 released once the late reply came")
	assert.Equal(t, 1, fakes[0].count("release"))
	assert.Equal(t, 3, holders(fakes, "k", ""), "no key left")
}

// TestLateAcquireHoldsBackCommandsNotSent: a command that was not sent to
// the node (its round ended while the late acquire had not landed)
// stands for that acquire: the release after it still waits for the
// late reply.
func TestLateAcquireHoldsBackCommandsNotSent(t *testing.T) {
	fakes, late, c := lateSetup(t, 100*time.Millisecond)
	ctx := context.Background()

	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 10*time.Second), "extended on the two nodes that answered")
	time.Sleep(300 * time.Millisecond) // the extend's round ends: not sent to node 0
	assert.Zero(t, fakes[0].count("extend"), "the extend waited for the late acquire, and was not sent")
	require.NoError(t, l.Unlock(ctx))
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, fakes[0].count("release"), "no release on node 0 while its acquire may still run there")

	late.land()
	require.Eventually(t, func() bool { return fakes[0].token("k") == "" }, 5*time.Second, time.Millisecond,
		"node 0 released once the late reply came")
	assert.Equal(t, 3, holders(fakes, "k", ""), "no key left")
}
