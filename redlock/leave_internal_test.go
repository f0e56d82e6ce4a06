package redlock

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

// leaveNode is a node that only counts Leaves; nothing else is called.
type leaveNode struct {
	node.Node
	node.Handoffer
	mu     sync.Mutex
	leaves int
	grants []string // each Leave's node.Key.Grant
	names  []string // each Leave's node.Key.Name
}

func (n *leaveNode) Addr() string { return "leave:1" }

func (n *leaveNode) Leave(_ context.Context, k *node.Key) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.leaves++
	n.grants = append(n.grants, k.Grant)
	n.names = append(n.names, k.Name)
	return nil
}

func (n *leaveNode) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaves
}

// TestLeaveWaitsOnlyForCommandsThatRegister: a gone waiter's Leave goes
// once its attempt has returned, without waiting for a rollback that
// requeues no one (release.lua registers a caller only with a requeue),
// which may take its own node timeout; a rollback that requeues is
// waited for, since it would register the call after the Leave.
func TestLeaveWaitsOnlyForCommandsThatRegister(t *testing.T) {
	// setup returns a client of one leaveNode whose node timeout (5 s)
	// bounds the wait for an attempt's commands (three of them: 15 s),
	// and a waiting attempt whose acquire has returned there and whose
	// rollback has not.
	setup := func(t *testing.T, requeues bool) (*Client, *leaveNode, *inflight) {
		n := &leaveNode{}
		c, err := New([]node.Node{n}, WithNodeTimeout(5*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.True(t, c.caps.handoff)
		ch := &chain{c: c}
		f := &inflight{ch: ch, acq: make([]step, 1), rb: make([]step, 1), requeues: requeues}
		ch.finish(&f.acq[0], node.Result{Status: node.Taken}, nil)
		return c, n, f
	}
	leave := func(c *Client, f *inflight) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.leaveOn(0, node.Key{Name: "k", Owner: c.caps.tag}, nil, nil, []*inflight{f})
		}()
		return done
	}

	t.Run("rollback without requeue", func(t *testing.T) {
		c, n, f := setup(t, false)
		select {
		case <-leave(c, f):
		case <-time.After(2 * time.Second):
			t.Fatal("the Leave waited for a rollback that registers no one")
		}
		assert.Equal(t, 1, n.count())
	})
	t.Run("rollback that requeues", func(t *testing.T) {
		c, n, f := setup(t, true)
		done := leave(c, f)
		require.Never(t, func() bool { return n.count() > 0 }, 200*time.Millisecond, 5*time.Millisecond,
			"the Leave went before a rollback that requeues")
		f.ch.finish(&f.rb[0], node.Result{Status: node.Done}, nil)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("no Leave after the rollback returned")
		}
		assert.Equal(t, 1, n.count())
	})
}

// TestGrantedCallLeavesABareRequeue: a Lock call that got its lock by
// grants leaves no Leave where the grant did not come (the Unlock's
// release drops the registration that asks for it), unless a rollback
// of its attempts requeued it with a TTL whose grant would not last a
// lease: that registration asks for a reservation (see command.go),
// which no Unlock drops, and a release would reserve the key for the
// client with its call gone (a torture trace, stop 51). Then the Leave
// goes, without the grant: one that named it would hand on the key the
// lock holds by it. A fenced call's requeue never asks for its grant
// (release.lua would register it without its fence): its Leave goes
// whatever the TTL.
func TestGrantedCallLeavesABareRequeue(t *testing.T) {
	run := func(t *testing.T, ttl time.Duration, requeued bool, fenced ...bool) *leaveNode {
		n := &leaveNode{}
		c, err := New([]node.Node{n}, WithNodeTimeout(time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		grant := node.GrantValue(c.caps.tag, "call")
		reg := c.register("k", "", grant, c.caps.tag)
		require.NotNil(t, reg)
		l := &Lock{k: node.Key{Name: "k", Owner: c.caps.tag, Token: grant}, ttl: ttl}
		l.mode.fenced = len(fenced) > 0 && fenced[0]
		l.ch = chain{c: c, k: &l.k, tail: make([]step, 1)}
		l.ch.finish(&l.ch.tail[0], node.Result{Status: node.Taken}, nil) // the grant did not come here
		c.leaveWaiters(reg, l, nil, requeued)
		return n
	}
	t.Run("requeued as a reservation", func(t *testing.T) {
		n := run(t, 500*time.Millisecond, true)
		require.Eventually(t, func() bool { return n.count() == 1 }, 5*time.Second, time.Millisecond, "no Leave")
		n.mu.Lock()
		defer n.mu.Unlock()
		assert.Equal(t, []string{""}, n.grants, "the Leave names the grant the lock holds by")
	})
	t.Run("not requeued", func(t *testing.T) {
		n := run(t, 500*time.Millisecond, false)
		assert.Never(t, func() bool { return n.count() > 0 }, 200*time.Millisecond, 5*time.Millisecond)
	})
	t.Run("requeued asking for the grant", func(t *testing.T) {
		n := run(t, 3*time.Second, true) // node.GrantTTL is the lease: the Unlock drops it
		assert.Never(t, func() bool { return n.count() > 0 }, 200*time.Millisecond, 5*time.Millisecond)
	})
	t.Run("fenced, requeued", func(t *testing.T) {
		n := run(t, 3*time.Second, true, true)
		require.Eventually(t, func() bool { return n.count() == 1 }, 5*time.Second, time.Millisecond, "no Leave")
		n.mu.Lock()
		defer n.mu.Unlock()
		assert.Equal(t, []string{""}, n.grants, "the Leave names the grant the lock holds by")
	})
}

// TestSemaphoreLeaveWaitsForItsLocksAcquire: an Acquire that ends with a
// slot leaves the semaphore's line at every slot, and at the slot it took
// only once its lock's acquire there has returned: an acquire still on
// its way that finds the slot taken queues the client again, after a
// Leave that overtook it (a torture trace, stop 52: a slot then stayed
// reserved for the client, its call gone, for a lease). A Lock call's
// Leave waits for its lock's acquire the same way.
func TestSemaphoreLeaveWaitsForItsLocksAcquire(t *testing.T) {
	n := &leaveNode{}
	c, err := New([]node.Node{n}, WithNodeTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	l := &Lock{k: node.Key{Name: s.slots[1], Owner: c.caps.tag, Token: "won"}}
	l.ch = chain{c: c, k: &l.k, tail: make([]step, 1)} // its acquire on the node: not returned
	s.leave(&place{tried: true}, l)
	require.Eventually(t, func() bool { return n.count() == 1 }, 5*time.Second, time.Millisecond, "no Leave at the other slot")
	assert.Never(t, func() bool { return n.count() > 1 }, 200*time.Millisecond, 5*time.Millisecond,
		"the Leave at the lock's slot went before its acquire returned")
	l.ch.finish(&l.ch.tail[0], node.Result{Status: node.Taken}, nil) // late, and refused: it queued the client
	require.Eventually(t, func() bool { return n.count() == 2 }, 5*time.Second, time.Millisecond, "no Leave at the lock's slot")
	n.mu.Lock()
	defer n.mu.Unlock()
	assert.Equal(t, []string{s.slots[0], s.slots[1]}, n.names)
}

// TestOwedLeaveGoesToEverySlotOfALine: a Leave owed in a semaphore's
// line (a command of the call may still run late there and queue the
// client again) is sent again at every slot, since a release of any slot
// may reserve it for that stale entry (a torture trace, stop 52); not
// while an Acquire of the client waits in the line, whose entry it is.
func TestOwedLeaveGoesToEverySlotOfALine(t *testing.T) {
	n := &leaveNode{}
	c, err := New([]node.Node{n}, WithNodeTimeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Semaphore("s", 3)
	require.NoError(t, err)
	names := func() []string {
		n.mu.Lock()
		defer n.mu.Unlock()
		return slices.Clone(n.names)
	}

	turn := c.join(s.local) // an Acquire of the client waits in the line
	c.owe(node.Key{Name: s.slots[1], Queue: s.queue, Owner: c.caps.tag}, 0)
	assert.Never(t, func() bool { return n.count() > 0 }, 300*time.Millisecond, 5*time.Millisecond,
		"an owed Leave went while a call of the client waits in the line")
	c.leave(s.local, turn, nil)
	require.Eventually(t, func() bool { return n.count() >= 3 }, 5*time.Second, time.Millisecond, "no Leave at every slot")
	got := names()[:3]
	slices.Sort(got)
	assert.Equal(t, s.slots, got)
}

// fullNode answers every acquire Taken (every slot held by another
// client) and records, per acquire, whether it was a waiting one (it
// queues the client); releases find nothing, Leaves do nothing.
type fullNode struct {
	node.Node
	node.Handoffer
	mu    sync.Mutex
	waits []bool
}

func (n *fullNode) Addr() string { return "full:1" }

func (n *fullNode) Acquire(_ context.Context, _ *node.Key, _ time.Duration, wait bool) (node.Result, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waits = append(n.waits, wait)
	return node.Result{Status: node.Taken, TTL: time.Hour}, nil
}

func (n *fullNode) Release(context.Context, *node.Key, bool) (node.Result, error) {
	return node.Result{Status: node.Absent}, nil
}

func (n *fullNode) Leave(context.Context, *node.Key) error { return nil }

func (n *fullNode) take() []bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.waits
	n.waits = nil
	return w
}

// TestSemaphoreQueuesFromItsFirstRefusal: an Acquire's first attempt
// tries a slot without queueing; the attempts after the first refusal
// queue, in that round too, and so does the next Acquire's after its
// own first refusal, on a semaphore just found full too (until stop 64
// that one queued from its first attempt: issue 44's table found no
// gain).
func TestSemaphoreQueuesFromItsFirstRefusal(t *testing.T) {
	n := &fullNode{}
	c, err := New([]node.Node{n}, WithNodeTimeout(time.Second), WithRetry(LinearBackoff(time.Millisecond)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.Semaphore("s", 2)
	require.NoError(t, err)
	_, err = s.Acquire(context.Background(), WithMaxWait(30*time.Millisecond))
	require.ErrorIs(t, err, ErrNotAcquired)
	first := n.take()
	require.Greater(t, len(first), 2, "more than one round")
	assert.Equal(t, []bool{false, true, true}, first[:3],
		"a cold semaphore's first attempt does not queue; the attempts after the first refusal do, in that round too")

	_, err = s.Acquire(context.Background(), WithMaxWait(30*time.Millisecond))
	require.ErrorIs(t, err, ErrNotAcquired)
	again := n.take()
	require.GreaterOrEqual(t, len(again), 2)
	assert.Equal(t, []bool{false, true}, again[:2], "on a semaphore found full lately, the same")
}
