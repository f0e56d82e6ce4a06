package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// handoffSetup is setup over nodes that offer node.Handoffer; a second
// client on the same nodes stands for another host.
func handoffSetup(t *testing.T, n int, opts ...redlock.Option) ([]*fakeNode, []node.Node, *clock.Fake, *redlock.Client) {
	t.Helper()
	clk := clock.NewFake(epoch)
	fakes := newFakes(n, clk)
	nodes := asHandoff(fakes)
	c := handoffClient(t, nodes, clk, opts...)
	return fakes, nodes, clk, c
}

func handoffClient(t *testing.T, nodes []node.Node, clk *clock.Fake, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithClock(clk), redlock.WithNodeTimeout(500 * time.Millisecond), redlock.WithTTL(10 * time.Second)}, opts...)
	c, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := c.Close(); !errors.Is(err, redlock.ErrAbandoned) {
			require.NoError(t, err)
		}
	})
	return c
}

// lockOnAll takes "k" with c and returns once its token is on every fake.
func lockOnAll(t *testing.T, ctx context.Context, c *redlock.Client, fakes []*fakeNode) *redlock.Lock {
	t.Helper()
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", l.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	return l
}

type lockResult struct {
	l   *redlock.Lock
	err error
	at  time.Time // when the call returned (lockAsync only)
}

// waitIn starts c.Lock(ctx, key) and returns once the call is waiting
// (its retry delay is a timer on the fake clock), with its result to come.
func waitIn(t *testing.T, ctx context.Context, c *redlock.Client, clk *clock.Fake, key string, timers int) <-chan lockResult {
	t.Helper()
	out := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		out <- lockResult{l: l, err: err}
	}()
	require.Eventually(t, func() bool { return clk.Waiters() >= timers }, 5*time.Second, time.Millisecond, "the waiter sleeps")
	return out
}

// drive advances clk by step until rc delivers, for at most ten seconds.
func drive(t *testing.T, clk *clock.Fake, step time.Duration, rc <-chan lockResult) lockResult {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case r := <-rc:
			return r
		default:
			if clk.Waiters() > 0 {
				clk.Advance(step)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Fatal("Lock did not return")
	return lockResult{}
}

func receiveLock(t *testing.T, rc <-chan lockResult) lockResult {
	t.Helper()
	select {
	case r := <-rc:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Lock did not return")
		return lockResult{}
	}
}

// TestHandoffWithinClient: a goroutine's Unlock hands the lock to the
// client's waiting goroutine in one transfer per node, no release, no
// retry delay (an hour); the successor holds a fresh token on every node,
// valid for its TTL from the transfer.
func TestHandoffWithinClient(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	first := lockOnAll(t, ctx, c, fakes)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	releases := make([]int, len(fakes))
	for i, f := range fakes {
		releases[i] = f.count("release") // the waiter's failed attempt may have rolled back
	}

	clk.Advance(time.Second)
	handed := clk.Now()
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, rc)
	require.NoError(t, r.err)
	next := r.l
	assert.NotEqual(t, first.Token(), next.Token())
	require.Eventually(t, func() bool { return holders(fakes, "k", next.Token()) == 3 }, 5*time.Second, time.Millisecond,
		"the successor's token on every node (the lock is handed over at a majority)")
	assert.Equal(t, clock.Until(handed, 10*time.Second, redlock.DefaultDriftFactor), next.Until(), "valid from the transfer")
	assert.Zero(t, first.TTL())
	for i, f := range fakes {
		assert.Equal(t, 1, f.count("transfer"))
		assert.Equal(t, releases[i], f.count("release"), "no release: the transfer replaced the token")
	}
	require.ErrorIs(t, first.Unlock(ctx), redlock.ErrNotHeld, "the old lock is gone")
	require.NoError(t, next.Unlock(ctx))
	require.Eventually(t, func() bool { return holders(fakes, "k", next.Token()) == 0 }, 5*time.Second, time.Millisecond,
		"released (Unlock returns at a majority)")
}

// TestHandoffOnAMinorityFallsBack: when only one of three nodes
// transfers, the successor's key there is rolled back, the lock is
// released as by a plain Unlock, and the successor takes it by an
// attempt of its own.
func TestHandoffOnAMinorityFallsBack(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	ctx := context.Background()
	first, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	for _, f := range fakes[1:] {
		f.setBefore(failOn("transfer"))
	}
	require.NoError(t, first.Unlock(ctx), "released on every node")
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == 0 }, 5*time.Second, time.Millisecond)
	r := drive(t, clk, 20*time.Millisecond, rc)
	require.NoError(t, r.err)
	// (The waiter is told as soon as Unlock's release has a majority: the
	// third node may still hold the old key when its acquire arrives.)
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2, "taken by an acquire of its own")
	assert.Equal(t, 1, fakes[0].count("transfer"))
	require.NoError(t, r.l.Unlock(ctx))
}

// TestHandoffYieldsToAnotherClient: while a waiter of another client is
// queued on the nodes, an Unlock does not hand the lock to its own
// client's waiter: the nodes reserve it for the other client's waiter
// (announced), which takes it; this client's waiter comes next.
func TestHandoffYieldsToAnotherClient(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	other := handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	ctx := context.Background()
	first, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	orc := waitIn(t, ctx, other, clk, "k", 1)
	clk.Advance(200 * time.Millisecond) // its second attempt registers it
	require.Eventually(t, func() bool { return nodes[0].(*handoffNode).waiting("k") == 1 && clk.Waiters() == 1 }, 5*time.Second, time.Millisecond)
	rc := waitIn(t, ctx, c, clk, "k", 2)

	require.NoError(t, first.Unlock(ctx))
	assert.Zero(t, holders(fakes, "k", first.Token()), "released, not handed over")
	r := drive(t, clk, 100*time.Millisecond, orc)
	require.NoError(t, r.err, "the other client's waiter")
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2, "on a majority (the last release may still be on its way)")
	select {
	case mine := <-rc:
		t.Fatalf("this client's waiter got the lock too: %v", mine.err)
	default:
	}
	require.NoError(t, r.l.Unlock(ctx))
	r = drive(t, clk, 100*time.Millisecond, rc)
	require.NoError(t, r.err, "this client's waiter, after")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestHandoffYieldOnAMajorityIsARelease: three of five nodes see another
// client's waiter and release at once; the two others transfer, later.
// Unlock waits for them, rolls their transfer back and reports the lock
// released (not "not held": the release must not reach a node before its
// transfer, and find the successor's key there).
func TestHandoffYieldOnAMajorityIsARelease(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 5, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	first, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	for _, n := range nodes[:3] {
		h := n.(*handoffNode)
		h.hmu.Lock()
		h.waiters[node.WaitersKey("k")] = map[string]waiter{"another-client": {ticket: 1, until: clk.Now().Add(time.Second)}}
		h.hmu.Unlock()
	}
	for _, f := range fakes[3:] {
		f.setBefore(func(ctx context.Context, op string) error {
			if op == "transfer" {
				time.Sleep(30 * time.Millisecond)
			}
			return nil
		})
	}
	require.NoError(t, first.Unlock(ctx), "released everywhere: three by the yield, two by the rollback of their transfer")
	for i, f := range fakes[:3] {
		assert.Equal(t, "~another-client", f.token("k"), "node %d: reserved for the other client's waiter", i)
	}
	for i, f := range fakes[3:] {
		// The transfer is rolled back. This client's waiter, told that
		// the lock did not come to it, may meanwhile be trying the key
		// that is free here (its attempt fails on nodes 0-2 and is rolled
		// back), so the node is empty once that attempt is done.
		assert.NotEqual(t, first.Token(), f.token("k"), "node %d: released", i+3)
		assert.Eventually(t, func() bool { return f.token("k") == "" }, 5*time.Second, time.Millisecond, "node %d: the transfer rolled back", i+3)
	}
	r := drive(t, clk, 100*time.Millisecond, rc)
	require.NoError(t, r.err, "the waiter takes the lock once the other waiter's reservation and lease have lapsed")
	require.NoError(t, r.l.Unlock(ctx))
}

// handoffUnderWay starts first.Unlock with every node's transfer held
// until open is called, and returns once the transfers are sent.
func handoffUnderWay(t *testing.T, fakes []*fakeNode, first *redlock.Lock) (open func(), unlocked <-chan error) {
	t.Helper()
	gateC := make(chan struct{})
	for _, f := range fakes {
		f.setBefore(gate("transfer", gateC))
	}
	errc := make(chan error, 1)
	go func() { errc <- first.Unlock(context.Background()) }()
	require.Eventually(t, func() bool { return fakes[len(fakes)-1].count("transfer") == 1 }, 5*time.Second, time.Millisecond)
	return func() { close(gateC) }, errc
}

// TestRollbackQueuesTheWaiterAgain: a waiting attempt that takes the
// free key of a node outside the holder's majority rolls it back asking
// the node to queue its client again (node.Key.Requeue) with the ticket
// the other nodes gave it, and with its grant where its grant TTL is the
// waiter lease (a TTL of 2 s or more), without where it is shorter.
func TestRollbackQueuesTheWaiterAgain(t *testing.T) {
	for _, ttl := range []time.Duration{10 * time.Second, time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			fakes, _, nodes, clk := watchHandoffNodes() // watched: a waiting attempt asks for a grant
			holder := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour))
			ctx := context.Background()
			l := lockOnAll(t, ctx, holder, fakes)
			fakes[2].mu.Lock()
			delete(fakes[2].keys, "k") // node 2 has lost the holder's key
			fakes[2].mu.Unlock()
			w := handoffClient(t, nodes, clk, redlock.WithTTL(ttl), redlock.WithRetry(redlock.LinearBackoff(time.Second)))
			wctx, cancel := context.WithCancel(ctx)
			rc := waitIn(t, wctx, w, clk, "k", 1)
			n2 := nodes[2].(watchHandoff).handoffNode
			require.Eventually(t, func() bool {
				clk.Advance(time.Second) // the retry delays: the attempts after the first wait (queue)
				return len(n2.requeued()) > 0
			}, 5*time.Second, 10*time.Millisecond, "a waiting attempt took node 2's free key and rolled it back")
			rk := n2.requeued()[0]
			var ticket int64
			for _, i := range []int{0, 1} {
				n := nodes[i].(watchHandoff).handoffNode
				n.hmu.Lock()
				for _, place := range n.waiters[node.WaitersKey("k")] {
					ticket = max(ticket, place.ticket)
				}
				n.hmu.Unlock()
			}
			assert.Positive(t, ticket)
			assert.Equal(t, ticket, rk.Ticket, "queued again with the ticket the other nodes gave")
			if node.GrantTTL(ttl) == node.WaiterLease {
				assert.NotEmpty(t, rk.Grant, "asking for its grant")
			} else {
				assert.Empty(t, rk.Grant, "a grant would outlast its TTL: a reservation")
			}
			cancel()
			require.ErrorIs(t, receiveLock(t, rc).err, context.Canceled)
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// TestRollbackQueuesTheWaiterAgainFromAMinority: a waiting attempt
// that a minority queued (node 0, where the holder's key is), that took
// the free key of another (node 1) and that a third node did not answer
// rolls node 1 back asking it to queue the client again, with node 0's
// ticket. Without it the call stays queued on node 0 alone, again at
// every attempt: no release on the nodes that let it set the key is
// ever handed to it, and callers that came later pass it there as often
// as they like (a torture trace, stop 54: a writer overtaken 6 times by
// later readers).
func TestRollbackQueuesTheWaiterAgainFromAMinority(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	holder := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour))
	ctx := context.Background()
	l := lockOnAll(t, ctx, holder, fakes)
	fakes[1].mu.Lock()
	delete(fakes[1].keys, "k") // node 1 has lost the holder's key
	fakes[1].mu.Unlock()
	fakes[2].setBefore(failOn("acquire"))
	w := handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(time.Second)))
	wctx, cancel := context.WithCancel(ctx)
	rc := waitIn(t, wctx, w, clk, "k", 1)
	n1 := nodes[1].(watchHandoff).handoffNode
	n0 := nodes[0].(watchHandoff).handoffNode
	require.Eventually(t, func() bool {
		clk.Advance(time.Second) // the retry delays: the attempts after the first wait (queue)
		return len(n0.ticketsOf("k")) == 1 && fakes[1].count("release") >= 2
	}, 5*time.Second, 10*time.Millisecond, "a waiting attempt, queued on node 0, took node 1's free key and rolled it back")
	var ticket int64
	for _, tk := range n0.ticketsOf("k") {
		ticket = tk
	}
	require.NotEmpty(t, n1.requeued(), "node 1 is asked to queue the waiter again")
	assert.Equal(t, ticket, n1.requeued()[0].Ticket, "with the ticket node 0 gave")
	cancel()
	require.ErrorIs(t, receiveLock(t, rc).err, context.Canceled)
	require.NoError(t, l.Unlock(ctx))
}

// TestWaiterDoesNotTryWhileTheTransferToItIsOnItsWay: the waiter's
// retry delay (10 ms) ends again and again while its client's Unlock is
// handing the lock to it; it sends no attempt meanwhile (the nodes could
// only refuse it: the key holds the old token, then its own) and takes
// the lock the transfer brings.
func TestWaiterDoesNotTryWhileTheTransferToItIsOnItsWay(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	ctx := context.Background()
	first := lockOnAll(t, ctx, c, fakes)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	acquires := make([]int, len(fakes))
	for i, f := range fakes {
		acquires[i] = f.count("acquire")
	}
	open, unlocked := handoffUnderWay(t, fakes, first)
	for range 20 {
		clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	for i, f := range fakes {
		assert.Equal(t, acquires[i], f.count("acquire"), "node %d: no attempt while the transfer is on its way", i)
	}
	open()
	require.NoError(t, <-unlocked)
	r := receiveLock(t, rc)
	require.NoError(t, r.err)
	// (The handoff returns at a majority; the third transfer may be on
	// its way still.)
	assert.Eventually(t, func() bool { return holders(fakes, "k", r.l.Token()) == 3 }, 5*time.Second, time.Millisecond,
		"the waiter holds the lock the transfer brought")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestChainEndReleaseIsNotRaced: after maxChain (16) handoffs in a row
// an Unlock releases the lock instead of handing it over, and pokes its
// client's waiting goroutine once the release has returned at a
// majority. A retry delay of that waiter that ends while the release is
// on its way sends no attempt: the nodes still holding the key would
// refuse it, and the waiter would sleep out another retry delay.
func TestChainEndReleaseIsNotRaced(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	c := handoffClient(t, nodes, clk, redlock.WithTTL(time.Hour), redlock.WithRetry(redlock.LinearBackoff(time.Second)))
	ctx := context.Background()
	l := lockOnAll(t, ctx, c, fakes)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	for range 16 {
		// A second waiter keeps the local queue, whose handoffs are
		// counted, from emptying when the first takes the lock.
		next := make(chan lockResult, 1)
		go func() {
			l, err := c.Lock(ctx, "k")
			next <- lockResult{l: l, err: err}
		}()
		require.Eventually(t, func() bool { return redlock.Waiting(c, "k") == 2 }, 5*time.Second, time.Millisecond)
		require.NoError(t, l.Unlock(ctx))
		r := receiveLock(t, rc)
		require.NoError(t, r.err)
		l, rc = r.l, next
		require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the next waiter sleeps")
	}
	// (A handoff returns at a majority: node 0's last transfer may be on
	// its way still.)
	require.Eventually(t, func() bool { return fakes[0].count("transfer") == 16 }, 5*time.Second, time.Millisecond)
	acquires := func() (n int) {
		for _, f := range fakes {
			n += f.count("acquire")
		}
		return n
	}
	before := acquires()
	gateC := make(chan struct{})
	for _, f := range fakes[1:] {
		f.setBefore(gate("release", gateC))
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	require.Eventually(t, func() bool { return fakes[0].token("k") == "" && fakes[2].count("release") > 0 },
		5*time.Second, time.Millisecond, "node 0 released; nodes 1 and 2 hold the release")
	clk.Advance(2 * time.Second) // the waiter's retry delay (at most 1.5 s) ends
	assert.Never(t, func() bool { return acquires() != before }, 50*time.Millisecond, time.Millisecond,
		"no attempt while the release is on its way")
	close(gateC)
	require.NoError(t, <-unlocked)
	r := receiveLock(t, rc)
	require.NoError(t, r.err)
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2, "the waiter took the released key on a majority")
	// (Lock returns at a majority: the third acquire may still be on its
	// way, and may reach its node before the release there.)
	assert.Eventually(t, func() bool { return acquires() == before+3 }, 5*time.Second, time.Millisecond,
		"one attempt, after the release")
	assert.Equal(t, 16, fakes[0].count("transfer"), "the 17th Unlock released rather than transferred")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestHandoffToAWaiterThatGaveUp: the waiter's context ends while the
// transfer to it is under way; its Lock returns the context's error and
// the lock handed to it is unlocked: no key is left.
func TestHandoffToAWaiterThatGaveUp(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	first, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	rc := waitIn(t, wctx, c, clk, "k", 1)
	open, unlocked := handoffUnderWay(t, fakes, first)
	cancel()
	r := receiveLock(t, rc)
	require.ErrorIs(t, r.err, context.Canceled, "Lock returns at once, the transfer still under way")
	open()
	require.NoError(t, <-unlocked)
	require.Eventually(t, func() bool {
		for _, f := range fakes {
			if f.token("k") != "" {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the unwanted lock was unlocked")
}

// TestCloseDuringHandoff: Close while a handoff is under way: the waiter
// gets ErrClosed, and the lock the transfer made for it is released by
// the Unlock that made it, not left for its TTL.
func TestCloseDuringHandoff(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	first, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	open, unlocked := handoffUnderWay(t, fakes, first)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	r := receiveLock(t, rc)
	require.ErrorIs(t, r.err, redlock.ErrClosed)
	open()
	require.NoError(t, <-unlocked)
	require.NoError(t, <-closed)
	for i, f := range fakes {
		assert.Empty(t, f.token("k"), "node %d", i)
	}
}

// giveUpWaiting has a Lock call of c wait for "k", held by another on
// every node, until it is registered on every node, then cancels it; it
// returns the client's tag as the nodes know it.
func giveUpWaiting(t *testing.T, fakes []*fakeNode, nodes []node.Node, clk *clock.Fake, c *redlock.Client) (tag string) {
	t.Helper()
	for _, f := range fakes {
		f.put("k", "other", time.Hour)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := waitIn(t, ctx, c, clk, "k", 1)
	clk.Advance(200 * time.Millisecond)
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.(*handoffNode).waiting("k") != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "registered on every node")
	h := nodes[0].(*handoffNode)
	h.hmu.Lock()
	for owner := range h.waiters[node.WaitersKey("k")] {
		tag = owner
	}
	h.hmu.Unlock()
	cancel()
	require.ErrorIs(t, receiveLock(t, rc).err, context.Canceled)
	return tag
}

// TestWaiterThatGivesUpLeaves: a Lock call that waited (and so registered
// as a waiter) and gives up drops its registration on every node.
func TestWaiterThatGivesUpLeaves(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	giveUpWaiting(t, fakes, nodes, clk, c)
	for i, n := range nodes {
		require.Eventually(t, func() bool { return n.(*handoffNode).waiting("k") == 0 }, 5*time.Second, time.Millisecond, "node %d", i)
		assert.Equal(t, 1, fakes[i].count("leave"))
	}
}

// TestLostLeaveIsSentAgainBeforeClose: a Leave that fails on a node is
// sent again in the background, its wait doubling, without waiting for
// the client's Close: the node drops the registration (and would hand
// on a key reserved for the call) once it answers, not a lease later.
func TestLostLeaveIsSentAgainBeforeClose(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	hook, heal := flaky("leave")
	fakes[0].setBefore(hook)
	giveUpWaiting(t, fakes, nodes, clk, c)
	for i, n := range nodes[1:] {
		require.Eventually(t, func() bool { return n.(*handoffNode).waiting("k") == 0 }, 5*time.Second, time.Millisecond, "node %d", i+1)
	}
	require.Eventually(t, func() bool { return fakes[0].count("leave") == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1, nodes[0].(*handoffNode).waiting("k"), "the lost Leave left the registration")
	// The sends again come 20 ms after the first, then at waits doubling
	// up to the node timeout: with
	// the node healed, the first of them takes the registration out.
	heal()
	require.Eventually(t, func() bool {
		clk.Advance(10 * time.Millisecond)
		return nodes[0].(*handoffNode).waiting("k") == 0
	}, 5*time.Second, 5*time.Millisecond, "sent again, before Close")
	assert.Equal(t, 2, fakes[0].count("leave"), "once more: it answered")
	clk.Advance(5 * time.Second)
	require.NoError(t, c.Close())
}

// TestCloseSweepsWhatLateCommandsLeft: a call that gave up and left
// cleanly can still be registered again by one of its commands that ran
// late, and a release then reserves or grants the key to it. Close takes
// the client out of every queue it registered in lately (node.LeaveAll):
// such a reservation, and a grant to any of its calls, go on; a key held
// by someone else stays.
func TestCloseSweepsWhatLateCommandsLeft(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	tag := giveUpWaiting(t, fakes, nodes, clk, c)
	hs := make([]*handoffNode, len(nodes))
	for i, n := range nodes {
		hs[i] = n.(*handoffNode)
	}
	for i, h := range hs {
		require.Eventually(t, func() bool { return h.waiting("k") == 0 }, 5*time.Second, time.Millisecond, "node %d left", i)
	}
	// What late commands of the call and releases after them left: node
	// 0 registered the client again and reserved the key for it, node 1
	// granted the key to a call of the client's; node 2 is another's.
	hs[0].hmu.Lock()
	hs[0].waiters[node.WaitersKey("k")] = map[string]waiter{tag: {ticket: 1, until: clk.Now().Add(node.WaiterLease)}}
	hs[0].hmu.Unlock()
	fakes[0].put("k", "~"+tag, node.WaiterLease)
	fakes[1].put("k", node.GrantValue(tag, "late"), node.WaiterLease)
	require.NoError(t, c.Close())
	assert.Empty(t, fakes[0].token("k"), "the reservation is freed")
	assert.Zero(t, hs[0].waiting("k"), "and the registration gone")
	assert.Empty(t, fakes[1].token("k"), "the grant to a call of the client is freed")
	assert.Equal(t, "other", fakes[2].token("k"), "another's key stays")
}

// TestWaiterThatGetsTheLockLeavesNothing: a Lock call that waited and got
// the lock sends no Leave to a node whose acquire set the key, also when
// that acquire answered after the call had returned at the majority: the
// node dropped the registration itself.
func TestWaiterThatGetsTheLockLeavesNothing(t *testing.T) {
	fakes, nodes, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	for _, f := range fakes {
		f.put("k", "other", time.Second)
	}
	rc := waitIn(t, context.Background(), c, clk, "k", 1)
	clk.Advance(150 * time.Millisecond) // the waiting attempt, which registers
	require.Eventually(t, func() bool { return nodes[2].(*handoffNode).waiting("k") == 1 }, 5*time.Second, time.Millisecond, "registered")
	require.Eventually(t, func() bool { return clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the waiter sleeps again")
	gate := make(chan struct{})
	fakes[2].mu.Lock()
	fakes[2].before = func(ctx context.Context, op string) error {
		if op == "acquire" {
			<-gate
		}
		return nil
	}
	fakes[2].mu.Unlock()
	clk.Advance(1100 * time.Millisecond) // the other holder's keys expire
	r := receiveLock(t, rc)
	require.NoError(t, r.err)
	assert.Zero(t, fakes[2].count("leave"), "node 2's acquire has not answered yet")
	close(gate)
	require.Eventually(t, func() bool { return fakes[2].token("k") == r.l.Token() }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	for i, f := range fakes {
		assert.Zero(t, f.count("leave"), "node %d: a Leave for a registration its acquire dropped", i)
		assert.Zero(t, nodes[i].(*handoffNode).waiting("k"), "node %d", i)
	}
	require.NoError(t, r.l.Unlock(context.Background()))
}

// queueGhost queues owner for key on nodes with ticket, until its lease
// ends at until: a waiter of another client that never comes back.
func queueGhost(nodes []node.Node, key, owner string, ticket int64, until time.Time) {
	q := node.WaitersKey(key)
	for _, n := range nodes {
		h := n.(*handoffNode)
		h.hmu.Lock()
		if h.waiters[q] == nil {
			h.waiters[q] = map[string]waiter{}
		}
		h.waiters[q][owner] = waiter{ticket: ticket, until: until}
		h.tickets[q] = max(h.tickets[q], ticket)
		h.hmu.Unlock()
	}
}

// TestQueueSkipsALapsedWaiter: the head of the nodes' queue has died (its
// lease is not renewed): an Unlock reserves the key for it, and the next
// waiter takes the lock once that lease has ended, not before.
func TestQueueSkipsALapsedWaiter(t *testing.T) {
	fakes, nodes, clk, holder := handoffSetup(t, 3)
	waiterC := handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	ctx := context.Background()
	first, err := holder.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	lapse := clk.Now().Add(time.Second)
	queueGhost(nodes, "k", "ghost", 1, lapse)
	rc := waitIn(t, ctx, waiterC, clk, "k", 1)
	clk.Advance(200 * time.Millisecond) // its second attempt queues it, behind the ghost
	require.Eventually(t, func() bool { return nodes[0].(*handoffNode).waiting("k") == 2 && clk.Waiters() == 1 }, 5*time.Second, time.Millisecond, "waiting %d, timers %d", nodes[0].(*handoffNode).waiting("k"), clk.Waiters())
	require.NoError(t, first.Unlock(ctx))
	for i, f := range fakes {
		require.Eventually(t, func() bool { return f.token("k") == "~ghost" }, 5*time.Second, time.Millisecond, "node %d: reserved for the head", i)
	}
	for clk.Now().Add(50 * time.Millisecond).Before(lapse) {
		clk.Advance(50 * time.Millisecond)
		time.Sleep(time.Millisecond)
		select {
		case r := <-rc:
			t.Fatalf("the waiter got the lock before the ghost's lease ended: %v", r.err)
		default:
		}
	}
	r := drive(t, clk, 50*time.Millisecond, rc)
	require.NoError(t, r.err, "once the ghost's lease has ended")
	assert.Eventually(t, func() bool { return holders(fakes, "k", r.l.Token()) == len(fakes) }, 5*time.Second, time.Millisecond,
		"every node (the call returned at a majority)")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestQueueHeadOnAMinorityDoesNotBlock: a waiter with an earlier ticket
// queued on a minority of the nodes only (its other calls failed) heads
// the queue there; the head of the queue on the majority gets the lock
// all the same.
func TestQueueHeadOnAMinorityDoesNotBlock(t *testing.T) {
	fakes, nodes, clk, holder := handoffSetup(t, 5)
	waiterC := handoffClient(t, nodes, clk, redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond)))
	ctx := context.Background()
	first, err := holder.TryLock(ctx, "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holders(fakes, "k", first.Token()) == len(fakes) }, 5*time.Second, time.Millisecond)
	queueGhost(nodes[:2], "k", "ghost", 1, clk.Now().Add(time.Hour))
	rc := waitIn(t, ctx, waiterC, clk, "k", 1)
	clk.Advance(200 * time.Millisecond)
	require.Eventually(t, func() bool { return nodes[4].(*handoffNode).waiting("k") == 1 && clk.Waiters() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, first.Unlock(ctx))
	r := drive(t, clk, 50*time.Millisecond, rc)
	require.NoError(t, r.err, "the head on three nodes of five")
	assert.Equal(t, 3, holders(fakes, "k", r.l.Token()))
	for i, f := range fakes[:2] {
		assert.Equal(t, "~ghost", f.token("k"), "node %d: still reserved for the ghost", i)
	}
	require.NoError(t, r.l.Unlock(ctx))
}

// TestReleaseWakesOnlyTheNamedClient: with two other clients queued for a
// key, an Unlock reserves it for the head and announces that on the
// head's own channel only (node.ReservedKey): the head's client, asleep
// for an hour, is woken and takes the lock, and nothing is published on
// the key's channel, which every waiting client watches. The other
// client gets the lock when the head's Unlock names it.
func TestReleaseWakesOnlyTheNamedClient(t *testing.T) {
	fakes, ws, nodes, clk := watchHandoffNodes()
	hour := redlock.WithRetry(redlock.LinearBackoff(time.Hour))
	holder, a, b := handoffClient(t, nodes, clk, hour), handoffClient(t, nodes, clk, hour), handoffClient(t, nodes, clk, hour)
	ctx := context.Background()
	first := lockOnAll(t, ctx, holder, fakes)
	queued := func(n int) func() bool {
		return func() bool {
			for _, nd := range nodes {
				if nd.(watchHandoff).waiting("k") != n {
					return false
				}
			}
			return true
		}
	}
	ra := waitIn(t, ctx, a, clk, "k", 1)
	require.Eventually(t, queued(1), 5*time.Second, time.Millisecond, "a is queued")
	rb := waitIn(t, ctx, b, clk, "k", 2)
	require.Eventually(t, queued(2), 5*time.Second, time.Millisecond, "b is queued after a")
	broadcasts := func() (n int) {
		for _, w := range ws {
			n += w.publishedOn("k")
		}
		return n
	}
	before := broadcasts()

	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err, "a, the head, is woken and takes the lock")
	assert.Equal(t, before, broadcasts(), "nothing was published to every waiter")
	select {
	case got := <-rb:
		t.Fatalf("b returned: %v", got.err)
	default:
	}
	require.NoError(t, r.l.Unlock(ctx))
	r = receiveLock(t, rb)
	require.NoError(t, r.err, "b, named by a's Unlock")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestNamedWakeWaitsForAMajority: a release that hands the key to a
// waiter (by its grant) reaches the nodes one by one, and each announces
// it. The waiter does not try at the first announcement, when its
// attempt would fail on the nodes still held; a majority that does not
// announce in time (grace, about a round trip) does not keep it asleep;
// once a majority announced, it holds the lock.
func TestNamedWakeWaitsForAMajority(t *testing.T) {
	fakes, _, nodes, clk := watchHandoffNodes()
	hour := redlock.WithRetry(redlock.LinearBackoff(time.Hour))
	// No WithNodeTimeout: the grace comes from the nodes' round trips.
	opts := []redlock.Option{redlock.WithClock(clk), redlock.WithTTL(10 * time.Second), hour}
	holder, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	defer func() { require.NoError(t, holder.Close()) }()
	waiter, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	defer func() { require.NoError(t, waiter.Close()) }()
	ctx := context.Background()

	first := lockOnAll(t, ctx, holder, fakes)
	ra := waitIn(t, ctx, waiter, clk, "k", 1)
	require.Eventually(t, func() bool {
		for _, nd := range nodes {
			if nd.(watchHandoff).waiting("k") != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the waiter is queued on every node")
	attempts := func() (n int) {
		for _, f := range fakes {
			n += f.count("acquire")
		}
		return n
	}
	// The holder's release reaches node 0 only: the key is reserved for
	// the waiter there, and node 0 announces it.
	timers := clk.Waiters()
	before := attempts()
	_, err = nodes[0].Release(ctx, &node.Key{Name: "k", Token: first.Token()}, true)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return clk.Waiters() > timers }, 5*time.Second, time.Millisecond,
		"one announcement starts the grace timer")
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, before, attempts(), "no attempt on one announcement of three")

	// The grace passes without a second announcement: the waiter tries,
	// and fails (nodes 1 and 2 are still held), and waits again.
	clk.Advance(time.Second)
	require.Eventually(t, func() bool { return attempts() >= before+3 }, 5*time.Second, time.Millisecond,
		"after the grace the waiter tries")
	require.Eventually(t, func() bool { return clk.Waiters() >= timers }, 5*time.Second, time.Millisecond)
	select {
	case r := <-ra:
		t.Fatalf("Lock returned with the key held on two nodes of three: %v", r.err)
	default:
	}

	// The release reaches nodes 1 and 2: a majority announced it, and the
	// waiter holds the lock by those grants without its retry delay (an
	// hour) and without another attempt. (Its last attempt took node 0's
	// grant and rolled it back; the grants came after it.)
	before = attempts()
	for _, nd := range nodes[1:] {
		_, err = nd.Release(ctx, &node.Key{Name: "k", Token: first.Token()}, true)
		require.NoError(t, err)
	}
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	assert.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by the grants: %q", r.l.Token())
	assert.Equal(t, 2, holders(fakes, "k", r.l.Token()))
	assert.Equal(t, before, attempts(), "no attempt once a majority granted")
	require.NoError(t, r.l.Unlock(ctx))
}

// grantSetup is a holder and a waiter, two clients over three nodes that
// keep queues and announce, with an hour's retry delay and opts; the
// waiter waits in Lock for "k" (ctx), queued on the nodes that answer
// (those without an error injected by prepare, called before it waits).
// It returns the holder's lock and the waiter's pending Lock.
func grantSetup(t *testing.T, ctx context.Context, prepare func([]*fakeNode), opts ...redlock.Option) ([]*fakeNode, []node.Node, *clock.Fake, *redlock.Lock, <-chan lockResult) {
	t.Helper()
	fakes, _, nodes, clk := watchHandoffNodes()
	opts = append([]redlock.Option{redlock.WithRetry(redlock.LinearBackoff(time.Hour))}, opts...)
	holder := handoffClient(t, nodes, clk, opts...)
	waiter := handoffClient(t, nodes, clk, opts...)
	first := lockOnAll(t, context.Background(), holder, fakes)
	want := 3
	if prepare != nil {
		prepare(fakes)
		want = 2
	}
	ra := waitIn(t, ctx, waiter, clk, "k", 1)
	require.Eventually(t, func() bool {
		n := 0
		for _, nd := range nodes {
			n += nd.(watchHandoff).waiting("k")
		}
		return n == want
	}, 5*time.Second, time.Millisecond, "the waiter is queued on the nodes")
	return fakes, nodes, clk, first, ra
}

func acquires(fakes []*fakeNode) (n int) {
	for _, f := range fakes {
		n += f.count("acquire")
	}
	return n
}

// TestGrantHoldsWithoutAnotherAttempt: a release hands the key to the
// queued waiter by setting its grant on every node (node.Key.Grant); the
// waiter holds the lock once a majority announced it, without another
// acquire, with the grant as its token. A node grants for node.GrantTTL
// (2 s of the 10 s TTL), so the lock is valid for that from the last
// attempt's start; still held half-way through, it is extended by its
// TTL in the background; its Unlock frees every node.
func TestGrantHoldsWithoutAnotherAttempt(t *testing.T) {
	fakes, _, clk, first, ra := grantSetup(t, context.Background(), nil)
	before := acquires(fakes)
	release := holdExtends(t, fakes)
	queuedAt := clk.Now()
	clk.Advance(100 * time.Millisecond) // the release comes a while after the waiter queued
	require.NoError(t, first.Unlock(context.Background()))
	released := clk.Now()
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	assert.Equal(t, before, acquires(fakes), "no acquire after the grants")
	assert.True(t, strings.HasPrefix(r.l.Token(), "~"), "the grant is the token: %q", r.l.Token())
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2, "held by the grant on a majority")
	for i, f := range fakes {
		if e, ok := f.entryOf("k"); ok && e.token == r.l.Token() {
			assert.Equal(t, released.Add(node.GrantTTL(10*time.Second)), e.until, "node %d grants for node.GrantTTL", i)
		}
	}
	// Valid from the last attempt for node.GrantTTL less drift (2s × 0.01
	// + 2 ms), with no extend before half of that.
	assert.Equal(t, queuedAt.Add(2*time.Second-22*time.Millisecond), r.l.Until())
	clk.Advance(899 * time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, extendCalls(fakes), "no extend before half the grant TTL")
	// Half-way (1 s after the last attempt), the extend is sent, and,
	// once it lands, the lock is valid for the TTL less drift (10s × 0.01
	// + 2 ms) from its start.
	clk.Advance(time.Millisecond)
	extendAt := clk.Now()
	require.Eventually(t, func() bool { return extendCalls(fakes) == len(fakes) }, 5*time.Second, time.Millisecond,
		"the extend half-way through the grant TTL")
	assert.Equal(t, queuedAt.Add(2*time.Second-22*time.Millisecond), r.l.Until(), "unchanged while the extend is held up")
	release()
	require.Eventually(t, func() bool { return r.l.Until().Equal(extendAt.Add(10*time.Second - 102*time.Millisecond)) },
		5*time.Second, time.Millisecond, "the extend restores the TTL")
	require.NoError(t, r.l.Unlock(context.Background()))
	require.Eventually(t, func() bool { return holders(fakes, "k", "") == len(fakes) }, 5*time.Second, time.Millisecond,
		"every node freed (Unlock returns at a majority)")
}

// TestGrantReleasedWhereAnExtendFoundAnotherHolder: a lock held by
// grants whose extend found another holder on a node (that node had not
// granted yet: the call is still registered there, asking for the grant)
// sends its release there too, which drops the registration; otherwise
// that node grants the key to a lock that is gone, for the grant's TTL.
func TestGrantReleasedWhereAnExtendFoundAnotherHolder(t *testing.T) {
	ctx := context.Background()
	fakes, nodes, clk, first, ra := grantSetup(t, ctx, nil)
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	g := r.l.Token()
	require.True(t, strings.HasPrefix(g, "~"), "held by grant: %q", g)
	// Unlock returned at a majority, and the lock at a majority of
	// grants: the third grant may still be on its way.
	require.Eventually(t, func() bool { return holders(fakes, "k", g) == len(fakes) }, 5*time.Second, time.Millisecond,
		"every node granted")
	// Node 2 as if its grant had not come: another holder there, the
	// call's registration asking for g still queued.
	h := nodes[2].(watchHandoff).handoffNode
	h.hmu.Lock()
	q := node.WaitersKey("k")
	if h.waiters[q] == nil {
		h.waiters[q] = map[string]waiter{}
	}
	owner := strings.SplitN(strings.TrimPrefix(g, "~"), ":", 2)[0]
	h.waiters[q][owner] = waiter{ticket: 1, until: clk.Now().Add(node.WaiterLease), grant: g, gttl: node.WaiterLease, gtok: "attempt"}
	h.hmu.Unlock()
	fakes[2].put("k", "other", time.Hour)
	require.NoError(t, r.l.Extend(ctx, 10*time.Second), "held on two of three")
	require.Eventually(t, func() bool { return extendCalls(fakes) >= len(fakes) }, 5*time.Second, time.Millisecond)
	before := fakes[2].count("release")
	require.NoError(t, r.l.Unlock(ctx))
	require.Eventually(t, func() bool { return fakes[2].count("release") > before }, 5*time.Second, time.Millisecond,
		"the release goes to the node that found another holder")
	require.Eventually(t, func() bool { return h.waiting("k") == 0 }, 5*time.Second, time.Millisecond,
		"and drops the registration that asked for the grant")
	assert.Equal(t, "other", fakes[2].token("k"), "the other holder's key stays")
}

// TestGrantUnlockedEarlyIsNotExtended: a lock taken by grant and
// unlocked before half the grant TTL costs no extend, then or later,
// and leaves nothing behind (goleak checks the restore goroutine).
func TestGrantUnlockedEarlyIsNotExtended(t *testing.T) {
	fakes, _, clk, first, ra := grantSetup(t, context.Background(), nil)
	require.NoError(t, first.Unlock(context.Background()))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	require.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by grant: %q", r.l.Token())
	clk.Advance(10 * time.Millisecond) // a short critical section
	require.NoError(t, r.l.Unlock(context.Background()))
	require.Eventually(t, func() bool { return holders(fakes, "k", "") == len(fakes) }, 5*time.Second, time.Millisecond,
		"every node freed")
	clk.Advance(5 * time.Second) // well past where the extend would have been due
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, extendCalls(fakes), "no extend for a lock unlocked early")
}

// TestGrantExtendedByHandIsNotExtendedAgain: an Extend made before half
// the grant TTL is the extend after the grant; none follows it.
func TestGrantExtendedByHandIsNotExtendedAgain(t *testing.T) {
	fakes, _, clk, first, ra := grantSetup(t, context.Background(), nil)
	require.NoError(t, first.Unlock(context.Background()))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	require.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by grant: %q", r.l.Token())
	require.NoError(t, r.l.Extend(context.Background(), 5*time.Second))
	// Extend returns at a majority: the third call may still be on its way.
	require.Eventually(t, func() bool { return extendCalls(fakes) == len(fakes) }, 5*time.Second, time.Millisecond)
	clk.Advance(1500 * time.Millisecond) // past half the grant TTL
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, len(fakes), extendCalls(fakes), "no second extend")
	assert.Greater(t, r.l.TTL(), 3*time.Second, "the Extend's validity stands")
	require.NoError(t, r.l.Unlock(context.Background()))
}

// TestGrantKeptAliveBeforeItsExtend: when the extend that follows a
// grant fails, the lock stays valid for what the grant gave it
// (node.GrantTTL), and a KeepAlive started then extends it within that,
// not a share of the TTL later, after the validity has run out.
func TestGrantKeptAliveBeforeItsExtend(t *testing.T) {
	fakes, _, clk, first, ra := grantSetup(t, context.Background(), nil)
	for _, f := range fakes {
		f.setBefore(func(ctx context.Context, op string) error {
			if op == "extend" && f.count("extend") == 1 {
				return errInjected // the extend after the grant
			}
			return nil
		})
	}
	queuedAt := clk.Now()
	require.NoError(t, first.Unlock(context.Background()))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	require.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by grant: %q", r.l.Token())
	before := clk.Waiters()
	job, cancel := r.l.KeepAlive(context.Background())
	defer cancel()
	waitWaiters(t, clk, before+1) // its loss timer, on the grant's validity
	time.Sleep(20 * time.Millisecond)
	assert.Zero(t, extendCalls(fakes), "KeepAlive without a margin leaves the extend after the grant where it is due")
	clk.Advance(time.Second) // half the grant TTL: the extend after the grant
	require.Eventually(t, func() bool { return extendCalls(fakes) >= len(fakes) }, 5*time.Second, time.Millisecond, "the extend after the grant")
	// It failed; KeepAlive, which waited for it, extends at once (its
	// share of the 1.978 s window has passed) and succeeds.
	require.Eventually(t, func() bool { return r.l.TTL() > 5*time.Second }, 5*time.Second, time.Millisecond,
		"KeepAlive extended within the lease")
	assert.True(t, r.l.Until().After(queuedAt.Add(2*time.Second)), "beyond node.GrantTTL")
	waitWaiters(t, clk, before+1) // at least KeepAlive's two timers, less the restore's
	assert.NoError(t, job.Err())
	cancel()
	require.NoError(t, r.l.Unlock(context.Background()))
}

func extendCalls(fakes []*fakeNode) (n int) {
	for _, f := range fakes {
		n += f.count("extend")
	}
	return n
}

// TestGrantKeepAliveWaitsForItsExtend: KeepAlive started on a lock a
// grant made (as redlock run does, with a loss margin of a third of the
// TTL, longer than the grant's validity) has the extend after the grant
// sent at once, and arms its timers once it has returned, on the
// validity it restored: the job is not lost meanwhile.
func TestGrantKeepAliveWaitsForItsExtend(t *testing.T) {
	fakes, _, clk, first, ra := grantSetup(t, context.Background(), nil, redlock.WithLostMargin(3*time.Second))
	release := holdExtends(t, fakes)
	require.NoError(t, first.Unlock(context.Background()))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	require.True(t, strings.HasPrefix(r.l.Token(), "~"), "held by grant: %q", r.l.Token())
	require.Less(t, r.l.TTL(), 3*time.Second, "valid for node.GrantTTL before its extend")
	before := clk.Waiters()
	job, cancel := r.l.KeepAlive(context.Background())
	defer cancel()
	// The margin cannot wait for the extend half-way through the grant
	// TTL: KeepAlive has it sent at once (the clock does not move).
	require.Eventually(t, func() bool { return extendCalls(fakes) == len(fakes) }, 5*time.Second, time.Millisecond,
		"the extend after the grant, at once")
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, job.Err(), "lost while the extend after the grant was in flight")
	release()
	require.Eventually(t, func() bool { return r.l.TTL() > 9*time.Second }, 5*time.Second, time.Millisecond,
		"the extend restored the TTL")
	waitWaiters(t, clk, before+1) // at least KeepAlive's two timers, less the restore's
	assert.NoError(t, job.Err())
	cancel()
	require.NoError(t, r.l.Unlock(context.Background()))
}

// holdExtends makes every extend on fakes wait until the returned
// function is called (at the latest at the test's cleanup, so that a
// failure before it leaves no extend waiting, and no Close with it).
func holdExtends(t *testing.T, fakes []*fakeNode) (release func()) {
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	for _, f := range fakes {
		f.setBefore(func(ctx context.Context, op string) error {
			if op == "extend" {
				<-hold
			}
			return nil
		})
	}
	return release
}

// TestGrantAfterALostReplyTakesAnAttempt: a waiter whose waiting attempt
// left a node's reply unknown does not count grants (a late command of
// its own could still take a granted key, and its rollback free it): it
// makes one more attempt, which takes the granted keys with its token.
func TestGrantAfterALostReplyTakesAnAttempt(t *testing.T) {
	ctx := context.Background()
	// The waiter's waiting attempts fail on node 2 (its first, plain
	// attempt gets through).
	fakes, _, _, first, ra := grantSetup(t, ctx, func(fakes []*fakeNode) {
		fakes[2].setBefore(func(_ context.Context, op string) error {
			if op == "acquire" && fakes[2].count("acquire") > 1 {
				return errInjected
			}
			return nil
		})
	})
	before := acquires(fakes)
	fakes[2].setBefore(nil)
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	assert.Greater(t, acquires(fakes), before, "an attempt after the grants")
	assert.False(t, strings.HasPrefix(r.l.Token(), "~"), "its own token: %q", r.l.Token())
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2)
	require.NoError(t, r.l.Unlock(ctx))
}

// tookFreeKey is a holder and a waiter over three nodes that keep queues
// and announce (a second's retry delay), where node 2 has lost the
// holder's key: the waiter's waiting attempts take it there and roll it
// back. It returns once the waiter is queued on nodes 0 and 1 and
// asleep, after an attempt that took node 2's key and freed it.
func tookFreeKey(t *testing.T) ([]*fakeNode, *clock.Fake, *redlock.Lock, <-chan lockResult) {
	t.Helper()
	ctx := context.Background()
	fakes, _, nodes, clk := watchHandoffNodes()
	opts := redlock.WithRetry(redlock.LinearBackoff(time.Second))
	var tried [3]atomic.Int32 // the waiter's acquires per node that have returned (the hook runs after the chain has its answer)
	hooks := redlock.WithHooks(redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Op == "acquire" {
			tried[i.Node].Add(1)
		}
	}})
	holder, waiter := handoffClient(t, nodes, clk, opts), handoffClient(t, nodes, clk, opts, hooks)
	first := lockOnAll(t, ctx, holder, fakes)
	fakes[2].mu.Lock()
	delete(fakes[2].keys, "k") // node 2 has lost the holder's key
	fakes[2].mu.Unlock()
	ra := waitIn(t, ctx, waiter, clk, "k", 1)
	queued := func(i int) int { return nodes[i].(watchHandoff).waiting("k") }
	require.Eventually(t, func() bool {
		if queued(2) > 0 {
			// A waiting attempt reached node 2 before the rollback of
			// the attempt before it (which went once its reply was in,
			// see Client.rollback): the next attempt takes the key.
			clk.Advance(time.Second)
			return false
		}
		// Every attempt's acquire on node 2 has returned (an attempt
		// goes to every node, and node 0's has), its rollback there
		// too: no release is in flight (one rollback can send two,
		// when the first overtook the acquire, see round.early).
		return queued(0) == 1 && queued(1) == 1 && fakes[2].token("k") == "" &&
			tried[2].Load() == tried[0].Load() &&
			fakes[2].count("release") > 0 && fakes[2].count("release") == fakes[2].count("release returned") &&
			clk.Waiters() >= 1
	}, 5*time.Second, time.Millisecond, "a waiting attempt took node 2's free key and rolled it back")
	return fakes, clk, first, ra
}

// TestGrantHoldsAfterAnAttemptThatTookAFreeKey: the waiter's last
// attempt took node 2's free key and its rollback freed it. The grants
// of the holder's Unlock on the majority end the wait without another
// acquire: they came after the rollback, and no command of the call is
// left to change them. (Before, such a call made one more attempt, and a
// grant that reached a node after it had refused there was handed on by
// its Leave: the lock held a bare majority.)
func TestGrantHoldsAfterAnAttemptThatTookAFreeKey(t *testing.T) {
	ctx := context.Background()
	fakes, _, first, ra := tookFreeKey(t)
	before := acquires(fakes)
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	assert.Equal(t, before, acquires(fakes), "no acquire after the grants")
	assert.True(t, strings.HasPrefix(r.l.Token(), "~"), "the grant is the token: %q", r.l.Token())
	assert.Equal(t, 2, holders(fakes, "k", r.l.Token()), "held by the grants of nodes 0 and 1")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestGrantAfterAFailedRollbackTakesAnAttempt: the waiter's next
// attempt takes node 2's key again, and its rollback fails there (it is
// retried in the background, without queueing the client again). The
// grants are not counted: an attempt takes them, with its own token.
func TestGrantAfterAFailedRollbackTakesAnAttempt(t *testing.T) {
	ctx := context.Background()
	fakes, clk, first, ra := tookFreeKey(t)
	var failing atomic.Bool
	failing.Store(true)
	fakes[2].setBefore(func(_ context.Context, op string) error {
		if op == "release" && failing.Load() {
			return errInjected
		}
		return nil
	})
	releases := fakes[2].count("release")
	clk.Advance(time.Second) // the retry delay: the next waiting attempt
	require.Eventually(t, func() bool {
		return fakes[2].count("release") > releases && fakes[2].token("k") != "" && clk.Waiters() >= 1
	}, 5*time.Second, time.Millisecond, "the attempt took node 2's key, and its rollback failed")
	before := acquires(fakes)
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	failing.Store(false)
	assert.Greater(t, acquires(fakes), before, "an attempt after the grants")
	assert.False(t, strings.HasPrefix(r.l.Token(), "~"), "its own token: %q", r.l.Token())
	assert.GreaterOrEqual(t, holders(fakes, "k", r.l.Token()), 2)
	require.NoError(t, r.l.Unlock(ctx))
}

// TestGrantedWaiterThatGivesUpHandsItOn: a waiter whose Lock ends (its
// context) after one node granted it the key leaves the queue everywhere
// and hands that grant on: nothing of it is left.
func TestGrantedWaiterThatGivesUpHandsItOn(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fakes, nodes, _, first, ra := grantSetup(t, ctx, nil)
	// Only node 0 gets the release: one grant, no majority.
	_, err := nodes[0].Release(context.Background(), &node.Key{Name: "k", Token: first.Token()}, true)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(fakes[0].token("k"), "~"), "node 0 granted the waiter the key")
	cancel()
	r := receiveLock(t, ra)
	require.ErrorIs(t, r.err, context.Canceled)
	require.Eventually(t, func() bool {
		for _, nd := range nodes {
			if nd.(watchHandoff).waiting("k") != 0 {
				return false
			}
		}
		return fakes[0].token("k") == ""
	}, 5*time.Second, time.Millisecond, "the waiter left every queue, and node 0's grant is gone")
	require.NoError(t, first.Unlock(context.Background()))
}

// TestOldGrantTakesAnAttempt: grants that come more than a tenth of the
// TTL after the waiter's last attempt would leave a validity that much
// shorter: the waiter takes them by an attempt instead, with a validity
// counted from it.
func TestOldGrantTakesAnAttempt(t *testing.T) {
	ctx := context.Background()
	fakes, _, clk, first, ra := grantSetup(t, ctx, nil, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithTTL(time.Second))
	before := acquires(fakes)
	clk.Advance(150 * time.Millisecond) // more than a tenth of the TTL, less than a poll
	require.NoError(t, first.Unlock(ctx))
	r := receiveLock(t, ra)
	require.NoError(t, r.err)
	assert.Greater(t, acquires(fakes), before, "an attempt after the grants")
	assert.False(t, strings.HasPrefix(r.l.Token(), "~"), "its own token: %q", r.l.Token())
	assert.Equal(t, clk.Now().Add(time.Second-12*time.Millisecond), r.l.Until(), "validity from the attempt")
	require.NoError(t, r.l.Unlock(ctx))
}

// waitingCalls are the calls that wait and queue on the nodes, with the
// key each takes: a Lock, and a Semaphore.Acquire of one permit.
var waitingCalls = []struct {
	name, key string
	call      func(ctx context.Context, c *redlock.Client) error
}{
	{"Lock", "k", func(ctx context.Context, c *redlock.Client) error {
		_, err := c.Lock(ctx, "k")
		return err
	}},
	{"Semaphore.Acquire", redlock.PermitKey("s", 0), func(ctx context.Context, c *redlock.Client) error {
		s, err := c.Semaphore("s", 1)
		if err != nil {
			return err
		}
		_, err = s.Acquire(ctx)
		return err
	}},
}

// TestAWaitingCallQueuesWhileItsRollbackIsOnItsWay: a Lock or
// Semaphore.Acquire call whose first attempt set the key on one node and
// failed queues on the nodes (its next, waiting attempt) while the
// release of that key is still on its way; the call waits for that release only when it ends, and then
// leaves no key behind. It waited for the release before its next
// attempt: a slow node kept it off the queue, and callers that came
// later queued ahead of it (the torture histories' starved writers
// and semaphore waits).
func TestAWaitingCallQueuesWhileItsRollbackIsOnItsWay(t *testing.T) {
	for _, tc := range waitingCalls {
		t.Run(tc.name, func(t *testing.T) { testQueuesWhileRollbackOnItsWay(t, tc.key, tc.call) })
	}
}

func testQueuesWhileRollbackOnItsWay(t *testing.T, key string, call func(context.Context, *redlock.Client) error) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
	for _, f := range fakes[1:] {
		f.put(key, "another's", time.Minute)
		// Their refusals come after node 0's answer: the attempt
		// fails knowing that it set the key there.
		f.setBefore(func(_ context.Context, op string) error {
			for end := time.Now().Add(time.Second); op == "acquire" && fakes[0].token(key) == "" && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(5 * time.Millisecond)
			return nil
		})
	}
	held := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(held) }) }
	t.Cleanup(open)
	fakes[0].setBefore(func(_ context.Context, op string) error {
		if op == "release" {
			<-held // the rollback's release, held up
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc := make(chan lockResult, 1)
	go func() { rc <- lockResult{err: call(ctx, c)} }()
	require.Eventually(t, func() bool { return fakes[0].count("release") == 1 }, 5*time.Second, time.Millisecond, "the first attempt set node 0's key and rolls it back")
	require.Eventually(t, func() bool {
		if clk.Waiters() > 0 {
			clk.Advance(10 * time.Millisecond)
		}
		return fakes[1].count("acquire") >= 2 && fakes[2].count("acquire") >= 2
	}, 5*time.Second, time.Millisecond, "the next attempt went while the release was held up")
	cancel()
	select {
	case r := <-rc:
		t.Fatalf("the call returned (%v) before its rollback's release did", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	open()
	r := receiveLock(t, rc)
	require.ErrorIs(t, r.err, redlock.ErrNotAcquired)
	assert.Empty(t, fakes[0].token(key), "no key of the call is left on node 0 when the call returns")
}

// TestAPlainAttemptDoesNotWaitOutSlowNodes (issue 43, torture traces of
// stop 56): a Lock or Semaphore.Acquire call's first attempt is a plain
// one, which does not queue the call where it is refused. When a
// majority has answered without deciding, one of them a refusal, and
// the other nodes are slow, the call does not wait for them (up to a
// node timeout, while later callers queue ahead of it): its next
// attempt, which queues it, goes before they answer.
func TestAPlainAttemptDoesNotWaitOutSlowNodes(t *testing.T) {
	for _, tc := range waitingCalls {
		t.Run(tc.name, func(t *testing.T) {
			fakes, _, clk, c := handoffSetup(t, 5, redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(time.Second),
				redlock.WithRetry(redlock.LinearBackoff(10*time.Millisecond)))
			fakes[0].put(tc.key, "another's", time.Minute)
			slow := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(slow) }) }
			t.Cleanup(open)
			var returned atomic.Int32 // the slow nodes' acquires that returned
			for _, f := range fakes[3:] {
				f.setBefore(func(ctx context.Context, op string) error {
					if op == "acquire" {
						defer returned.Add(1)
						select {
						case <-slow:
						case <-ctx.Done():
						}
					}
					return nil
				})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rc := make(chan lockResult, 1)
			go func() { rc <- lockResult{err: tc.call(ctx, c)} }()
			require.Eventually(t, func() bool {
				if clk.Waiters() > 0 {
					clk.Advance(time.Millisecond)
				}
				return fakes[0].count("acquire") >= 2 && returned.Load() == 0
			}, 5*time.Second, time.Millisecond, "the next attempt went before the slow nodes answered the first")
			cancel()
			open()
			r := receiveLock(t, rc)
			require.ErrorIs(t, r.err, redlock.ErrNotAcquired)
			for i, f := range fakes[1:3] {
				assert.Empty(t, f.token(tc.key), "node %d: no key of the call left when it returns", i+1)
			}
		})
	}
}
