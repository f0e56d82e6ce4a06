package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// wakeSetup is setup over fakes that offer node.Watcher, with a retry
// delay of an hour: a Lock that wakes before it did so by notification or
// by the holder's TTL.
func wakeSetup(t *testing.T, opts ...redlock.Option) ([]*watchingNode, *clock.Fake, *redlock.Client) {
	t.Helper()
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	ws := make([]*watchingNode, len(fakes))
	nodes := make([]node.Node, len(fakes))
	for i, f := range fakes {
		ws[i] = newWatching(f)
		nodes[i] = ws[i]
	}
	opts = append([]redlock.Option{redlock.WithClock(clk), redlock.WithNodeTimeout(500 * time.Millisecond),
		redlock.WithRetry(redlock.LinearBackoff(time.Hour))}, opts...)
	c, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return ws, clk, c
}

func lockAsync(c *redlock.Client, ctx context.Context, key string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		errc <- err
	}()
	return errc
}

func recvErr(t *testing.T, errc <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting", what)
		return nil
	}
}

// TestUnlockWakesAWaiter: a waiter subscribed after its first failure is
// granted as soon as the holder unlocks, long before its retry delay (an
// hour) and the holder's TTL.
func TestUnlockWakesAWaiter(t *testing.T) {
	ws, _, c := wakeSetup(t)
	holder, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	// TryLock returns at quorum: let its last SET land before counting.
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 1 }, 5*time.Second, time.Millisecond)
	errc := lockAsync(c, context.Background(), "k")
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 3 }, 5*time.Second, time.Millisecond,
		"the waiter tries, subscribes, and tries once more")
	time.Sleep(5 * time.Millisecond)
	require.Equal(t, 3, ws[0].count("acquire"), "then waits")
	require.NoError(t, holder.Unlock(context.Background()))
	require.NoError(t, recvErr(t, errc, "Lock after Unlock"))
	for _, w := range ws {
		assert.Zero(t, w.watching("k"), "a watch outlived its Lock call")
	}
}

// TestLockTriesPlainThenWaits: a Lock call on a held key makes one plain
// attempt (a SET), then one waiting attempt (queued, asking the
// holder's TTL), and waits after it; so does the next call on the key
// right after one that waited (until stop 64 that one queued from its
// first attempt: issue 44's table found no gain). TryLock never queues.
func TestLockTriesPlainThenWaits(t *testing.T) {
	ws, _, c := wakeSetup(t)
	n := ws[0]
	// lockBehind returns the attempts a Lock call made before it waited
	// for the holder's Unlock, all but one of them plain.
	lockBehind := func(what string) (tries int) {
		t.Helper()
		// The last holder's release may still be on its way to a node
		// (Unlock returns at the majority): let it land, or its
		// announcement would wake the waiter.
		require.Eventually(t, func() bool { return free(ws, "k") }, 5*time.Second, time.Millisecond)
		holder, err := c.TryLock(context.Background(), "k")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return n.token("k") == holder.Token() }, 5*time.Second, time.Millisecond)
		a, w := n.count("acquire"), n.count("acquire waiting")
		errc := lockAsync(c, context.Background(), "k")
		require.Eventually(t, func() bool { return n.count("acquire waiting") > w }, 5*time.Second, time.Millisecond, what)
		time.Sleep(5 * time.Millisecond)
		tries = n.count("acquire") - a
		assert.Equal(t, 1, n.count("acquire waiting")-w, "%s: one waiting attempt, then it waits", what)
		require.NoError(t, holder.Unlock(context.Background()))
		require.NoError(t, recvErr(t, errc, what))
		return tries
	}
	assert.Equal(t, 2, lockBehind("the first wait"), "a key never waited for: a plain attempt, then a waiting one")
	assert.Equal(t, 2, lockBehind("a wait just after one"), "a key just waited for: the same")
	require.Eventually(t, func() bool { return free(ws, "k") }, 5*time.Second, time.Millisecond)
	holder, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return n.token("k") == holder.Token() }, 5*time.Second, time.Millisecond)
	a, w := n.count("acquire"), n.count("acquire waiting")
	_, err = c.TryLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Eventually(t, func() bool { return n.count("acquire") == a+1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, w, n.count("acquire waiting"), "TryLock never queues, on a contended key neither")
	require.NoError(t, holder.Unlock(context.Background()))
}

// free reports whether key is free on every node.
func free(ws []*watchingNode, key string) bool {
	for _, w := range ws {
		if w.token(key) != "" {
			return false
		}
	}
	return true
}

// TestWakeAtTheHoldersExpiryFromAllReplies: a waiting attempt estimates
// when the holder's keys free a majority from every node's reply, not
// only those in by the decision: a node still holding a competitor's key
// (about to be rolled back, unannounced) reports a TTL of seconds, and a
// node that answers later reports the holder's short one.
func TestWakeAtTheHoldersExpiryFromAllReplies(t *testing.T) {
	ws, clk, c := wakeSetup(t)
	ws[0].put("k", "holder", 250*time.Millisecond)
	ws[1].put("k", "competitor", 10*time.Second)
	ws[2].put("k", "holder", 250*time.Millisecond)
	ws[2].mu.Lock()
	ws[2].before = func(ctx context.Context, op string) error {
		if op == "acquire" {
			time.Sleep(20 * time.Millisecond) // answers after the decision
		}
		return nil
	}
	ws[2].mu.Unlock()
	errc := lockAsync(c, context.Background(), "k")
	require.Eventually(t, func() bool { return ws[2].count("acquire waiting") == 1 && clk.Waiters() >= 1 }, 5*time.Second, time.Millisecond, "the waiter sleeps")
	clk.Advance(300 * time.Millisecond) // the holder's keys are gone from nodes 0 and 2
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter slept past the holder's expiry (its estimate counted the competitor's TTL)")
	}
}

// TestRollbackWakesNobody: the rollback of a failed attempt is not
// announced, or competing waiters would wake each other in a loop.
func TestRollbackWakesNobody(t *testing.T) {
	ws, _, c := wakeSetup(t)
	ws[0].put("k", "other", time.Hour)
	ws[1].put("k", "other", time.Hour)
	errc := lockAsync(c, context.Background(), "k")
	// Node 2 grants (the second attempt may find the first's key still
	// there) and is rolled back, in the background when it had not
	// answered by the decision.
	require.Eventually(t, func() bool { return ws[2].count("acquire") == 2 && ws[2].token("k") == "" }, 5*time.Second, time.Millisecond)
	assert.Positive(t, ws[2].count("release"))
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, 2, ws[2].count("acquire"), "woken by its own rollback (node 2 granted, then released)")
	require.NoError(t, c.Close())
	assert.ErrorIs(t, recvErr(t, errc, "Lock after Close"), redlock.ErrClosed)
}

// TestMissedSubscriptionFallsBackToTheCap: nodes whose subscription is
// never confirmed cost nothing but the wake-up: the extra attempt comes
// after the retry delay, and so do the next ones.
func TestMissedSubscriptionFallsBackToTheCap(t *testing.T) {
	ws, clk, c := wakeSetup(t, redlock.WithRetry(redlock.RetryFunc(func(int) (time.Duration, bool) { return time.Second, true })))
	for _, w := range ws {
		w.ready = make(chan struct{}) // never ready
		w.put("k", "other", time.Hour)
	}
	errc := lockAsync(c, context.Background(), "k")
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 1 }, 5*time.Second, time.Millisecond)
	waitWaiters(t, clk, 1)
	clk.Advance(999 * time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, 1, ws[0].count("acquire"), "tried again before the delay")
	clk.Advance(time.Millisecond)
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 2 }, 5*time.Second, time.Millisecond)
	waitWaiters(t, clk, 1) // the second attempt is over: waiting again
	for _, w := range ws {
		w.mu.Lock()
		delete(w.keys, "k") // the holder's keys expire
		w.mu.Unlock()
	}
	clk.Advance(time.Second)
	require.NoError(t, recvErr(t, errc, "Lock after the keys expired"))
}

// TestWakeAtTheHoldersExpiry: the holder never unlocks; the waiter wakes
// when the holder's keys have expired on a majority (here at 2 s: node 2
// is free, and nodes 0 and 1 hold for 2 s and 5 s), not at its retry
// delay.
func TestWakeAtTheHoldersExpiry(t *testing.T) {
	ws, clk, c := wakeSetup(t)
	ws[0].put("k", "other", 2*time.Second)
	ws[1].put("k", "other", 5*time.Second)
	// Node 2's grant arrives first, so that each attempt is decided on
	// all three replies (an estimate from two is only an upper bound).
	for _, w := range ws[:2] {
		w.setBefore(func(_ context.Context, op string) error {
			if op == "acquire" {
				time.Sleep(5 * time.Millisecond)
			}
			return nil
		})
	}
	errc := lockAsync(c, context.Background(), "k")
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 2 }, 5*time.Second, time.Millisecond)
	waitWaiters(t, clk, 1)
	clk.Advance(2*time.Second - time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	assert.Equal(t, 2, ws[0].count("acquire"), "woke before a majority was free")
	clk.Advance(time.Millisecond)
	require.NoError(t, recvErr(t, errc, "Lock at the majority's expiry"))
}

// TestLocalWaitersInOrder: goroutines of one client waiting for one key
// are granted in the order they called Lock, and only the head competes
// on the nodes.
func TestLocalWaitersInOrder(t *testing.T) {
	ws, _, c := wakeSetup(t)
	ctx := context.Background()
	holder, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	// TryLock returns at quorum: let its last SET land before counting.
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 1 }, 5*time.Second, time.Millisecond)
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range 5 {
		before := ws[0].count("acquire")
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, "k")
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, l.Unlock(ctx))
		}()
		if i == 0 {
			require.Eventually(t, func() bool { return ws[0].count("acquire") == before+2 }, 5*time.Second, time.Millisecond)
		} else {
			time.Sleep(5 * time.Millisecond) // queued behind the head
		}
	}
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, 3, ws[0].count("acquire"), "only the head competes")
	require.NoError(t, holder.Unlock(ctx))
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

// TestNotificationsOff: WithNotifications(false) subscribes to nothing.
func TestNotificationsOff(t *testing.T) {
	ws, clk, c := wakeSetup(t, redlock.WithNotifications(false))
	for _, w := range ws {
		w.put("k", "other", time.Hour)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := lockAsync(c, ctx, "k")
	require.Eventually(t, func() bool { return ws[0].count("acquire") == 1 }, 5*time.Second, time.Millisecond)
	waitWaiters(t, clk, 1)
	cancel()
	assert.ErrorIs(t, recvErr(t, errc, "cancelled Lock"), context.Canceled)
	ws[0].wmu.Lock()
	defer ws[0].wmu.Unlock()
	assert.Zero(t, ws[0].watched["k"])
}

// TestRetryStrategySeesEachAttemptOnce: a RetryStrategy is asked once
// per wait, numbered 1, 2, 3..., by every Lock call: also by the second
// one on a key the first found held. (While a second call subscribed
// and queued before its first attempt, until stop 64, it once asked for
// attempt 1 twice: [1 1 2 3 4 5].)
func TestRetryStrategySeesEachAttemptOnce(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []int
	)
	ws, clk, c := wakeSetup(t, redlock.WithRetry(redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
		mu.Lock()
		asked = append(asked, attempt)
		mu.Unlock()
		return time.Millisecond, attempt < 5
	})))
	for _, w := range ws {
		w.put("k", "other", time.Hour)
	}
	for call := range 2 { // the second call right after the first
		mu.Lock()
		asked = nil
		mu.Unlock()
		errc := lockAsync(c, context.Background(), "k")
		var err error
		for done := false; !done; {
			select {
			case err = <-errc:
				done = true
			default:
				if clk.Waiters() > 0 {
					clk.Advance(time.Second)
				}
				time.Sleep(time.Millisecond)
			}
		}
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe, "call %d", call)
		assert.Equal(t, 5, qe.Attempts, "call %d", call)
		mu.Lock()
		assert.Equal(t, []int{1, 2, 3, 4, 5}, asked, "call %d", call)
		mu.Unlock()
	}
	for _, w := range ws {
		w.mu.Lock()
		delete(w.keys, "k")
		w.mu.Unlock()
	}
}
