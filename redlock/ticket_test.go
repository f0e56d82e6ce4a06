package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// tickets returns the tickets of the owners queued for key in its own
// queue on n.
func (n *handoffNode) ticketsOf(key string) map[string]int64 {
	n.hmu.Lock()
	defer n.hmu.Unlock()
	out := map[string]int64{}
	for owner, w := range n.waiters[node.WaitersKey(key)] {
		out[owner] = w.ticket
	}
	return out
}

// TestTicketOnlyFromAMajority: a call keeps a ticket only from a round
// that queued it on a majority. Waiter A is queued on nodes 0 and 1 (a
// majority) with ticket 11; waiter B's first waiting round reaches node 2
// only, which has never seen A and gives B ticket 1. B must not carry
// that ticket to nodes 0 and 1, where it would be placed ahead of A.
func TestTicketOnlyFromAMajority(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	hs := make([]*handoffNode, len(nodes))
	for i, n := range nodes {
		hs[i] = n.(watchHandoff).handoffNode
	}
	ctx := context.Background()
	holder := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour))
	l := lockOnAll(t, ctx, holder, fakes)
	for _, i := range []int{0, 1} {
		hs[i].hmu.Lock()
		hs[i].tickets[node.WaitersKey("k")] = 10 // earlier waiters came and went there
		hs[i].hmu.Unlock()
	}
	retry := redlock.WithRetry(redlock.LinearBackoff(time.Second))

	// A: node 2 does not answer it; nodes 0 and 1 queue it with 11.
	fakes[2].setBefore(failOn("acquire"))
	a := handoffClient(t, nodes, clk, retry)
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	ra := waitIn(t, actx, a, clk, "k", 1)
	require.Eventually(t, func() bool { return len(hs[0].ticketsOf("k")) == 1 && len(hs[1].ticketsOf("k")) == 1 },
		5*time.Second, time.Millisecond)
	var aTag string
	for tag, tk := range hs[0].ticketsOf("k") {
		aTag = tag
		require.Equal(t, int64(11), tk)
	}
	timers := clk.Waiters()

	// B: only node 2 answers its first rounds, and queues it with 1.
	fakes[2].setBefore(nil)
	fakes[0].setBefore(failOn("acquire"))
	fakes[1].setBefore(failOn("acquire"))
	b := handoffClient(t, nodes, clk, retry)
	bctx, cancelB := context.WithCancel(ctx)
	defer cancelB()
	rb := waitIn(t, bctx, b, clk, "k", timers+1)
	require.Eventually(t, func() bool { return len(hs[2].ticketsOf("k")) == 1 }, 5*time.Second, time.Millisecond)
	for _, tk := range hs[2].ticketsOf("k") {
		require.Equal(t, int64(1), tk, "node 2 gave B its first ticket")
	}

	// Nodes 0 and 1 answer again; B's next rounds queue it there.
	fakes[0].setBefore(nil)
	fakes[1].setBefore(nil)
	bQueued := func() bool {
		for _, i := range []int{0, 1} {
			if len(hs[i].ticketsOf("k")) < 2 {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool {
		if clk.Waiters() > 0 {
			clk.Advance(100 * time.Millisecond)
		}
		return bQueued()
	}, 5*time.Second, 5*time.Millisecond, "B queues on nodes 0 and 1")
	for _, i := range []int{0, 1} {
		ts := hs[i].ticketsOf("k")
		for tag, tk := range ts {
			if tag != aTag {
				assert.Greater(t, tk, ts[aTag], "node %d: B, queued after A was queued on a majority, comes after A", i)
			}
		}
	}
	cancelA()
	cancelB()
	require.ErrorIs(t, receiveLock(t, ra).err, context.Canceled)
	require.ErrorIs(t, receiveLock(t, rb).err, context.Canceled)
	require.NoError(t, l.Unlock(ctx))
}

// TestCloseLeavesTheQueue: a Lock call queued on the nodes when its
// client closes leaves the queue on every node before Close returns:
// Close ends the call, and waits for the Leaves it sends.
func TestCloseLeavesTheQueue(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	ctx := context.Background()
	holder := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour))
	l := lockOnAll(t, ctx, holder, fakes)
	w, err := redlock.New(nodes, redlock.WithClock(clk), redlock.WithNodeTimeout(500*time.Millisecond),
		redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	require.NoError(t, err)
	rc := waitIn(t, ctx, w, clk, "k", 1)
	hs := make([]*handoffNode, len(nodes))
	for i, n := range nodes {
		hs[i] = n.(watchHandoff).handoffNode
	}
	require.Eventually(t, func() bool {
		for _, h := range hs {
			if h.waiting("k") != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the waiter is queued on every node")
	require.NoError(t, w.Close())
	require.ErrorIs(t, receiveLock(t, rc).err, redlock.ErrClosed)
	for i, h := range hs {
		assert.Zero(t, h.waiting("k"), "node %d: the closed client's call left the queue", i)
	}
	require.NoError(t, l.Unlock(ctx))
}

// TestLateLeaveSparesTheNextCall: a call that gives up leaves the
// nodes' queue; the nodes know a waiter by its client's tag, so the
// client's next call on the key registers only once those Leaves have
// returned: a Leave that came after it would take its entry out.
func TestLateLeaveSparesTheNextCall(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	ctx := context.Background()
	holder := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour))
	l := lockOnAll(t, ctx, holder, fakes)
	hs := make([]*handoffNode, len(nodes))
	for i, n := range nodes {
		hs[i] = n.(watchHandoff).handoffNode
	}
	queuedEverywhere := func(n int) bool {
		for _, h := range hs {
			if h.waiting("k") != n {
				return false
			}
		}
		return true
	}
	w := handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx1, cancel1 := context.WithCancel(ctx)
	r1 := waitIn(t, ctx1, w, clk, "k", 1)
	require.Eventually(t, func() bool { return queuedEverywhere(1) }, 5*time.Second, time.Millisecond)
	open := make(chan struct{})
	for _, f := range fakes {
		f.setBefore(gate("leave", open)) // the first call's Leaves are slow
	}
	cancel1()
	require.ErrorIs(t, receiveLock(t, r1).err, context.Canceled)
	require.Eventually(t, func() bool { return fakes[2].count("leave") == 1 }, 5*time.Second, time.Millisecond)
	ctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	r2 := make(chan lockResult, 1)
	go func() {
		l, err := w.Lock(ctx2, "k")
		r2 <- lockResult{l: l, err: err}
	}()
	time.Sleep(50 * time.Millisecond) // the second call registers now, or waits for the Leaves
	close(open)
	require.Eventually(t, func() bool {
		for _, f := range fakes {
			if f.count("leave") != 1 {
				return false
			}
		}
		return queuedEverywhere(1)
	}, 5*time.Second, time.Millisecond, "the second call is queued on every node after the first call's Leaves")
	time.Sleep(50 * time.Millisecond)
	assert.True(t, queuedEverywhere(1), "and stays queued")
	cancel2()
	require.ErrorIs(t, receiveLock(t, r2).err, context.Canceled)
	require.NoError(t, l.Unlock(ctx))
}
