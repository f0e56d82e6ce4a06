package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// queued counts the clients queued for key on node i of the shared
// cluster (the waiters hash, less its counter).
func queued(t *testing.T, i int, key string) int {
	t.Helper()
	v, err := shared.Direct(i).Command(context.Background(), "HLEN", node.WaitersKey(key))
	require.NoError(t, err)
	n, _ := v.(int64)
	return max(0, int(n)-1)
}

// queuedEverywhere waits until n clients are queued for key on every
// node of the shared cluster.
func queuedEverywhere(t *testing.T, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i := range shared.Size() {
			if queued(t, i, key) != n {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "%d clients queued for %s on every node", n, key)
}

// lockEverywhere takes key with c and returns once its token is on every
// node: a fresh client's first call can give up on a node while it dials
// (the node timeout is short), and a node without the holder's key lets
// a waiter take it there and roll it back at every poll (see
// TestNodeOutsideTheMajorityRejoins).
func lockEverywhere(t *testing.T, c *redlock.Client, key string) *redlock.Lock {
	t.Helper()
	for range 10 {
		l, err := c.TryLock(context.Background(), key)
		if err == nil {
			for range 50 {
				all := true
				for i := range shared.Size() {
					all = all && scToken(t, shared, i, key) == l.Token()
				}
				if all {
					return l
				}
				time.Sleep(10 * time.Millisecond)
			}
			_ = l.Unlock(context.Background())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s is not held on every node after 10 tries", key)
	return nil
}

// lockIn starts c.Lock(ctx, key) in a goroutine.
func lockIn(ctx context.Context, c *redlock.Client, key string) <-chan lockResult {
	out := make(chan lockResult, 1)
	go func() {
		l, err := c.Lock(ctx, key)
		out <- lockResult{l, err}
	}()
	return out
}

type lockResult struct {
	l   *redlock.Lock
	err error
}

// TestQueueClientsTakeTurnsInOrder: three clients (as three hosts), one
// goroutine each, want one key again and again. Once all three are
// queued, the lock goes round in the order they queued: every grant goes
// to the client that has waited longest, so the holders repeat with
// period three. Order is asserted, not timing.
func TestQueueClientsTakeTurnsInOrder(t *testing.T) {
	p := prefix(t, 5*time.Second)
	key := p + "k"
	opt := redlock.WithNodeTimeout(200 * time.Millisecond) // a loaded machine must not cost a waiter its place
	clients := []*redlock.Client{client(t, opt), client(t, opt), client(t, opt)}
	for i, c := range clients { // connected before the race starts
		l, err := c.Lock(context.Background(), fmt.Sprintf("%swarm%d", p, i))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(context.Background()))
	}
	var chk checker.Checker
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				ctx, cancel := context.WithDeadline(context.Background(), stop)
				l, err := c.Lock(ctx, key)
				cancel()
				if err != nil {
					continue
				}
				h := chk.Begin(w, l.Key(), l.Token(), time.Now(), l.Until())
				time.Sleep(20 * time.Millisecond) // long enough for the others to queue
				h.End(time.Now())
				_ = l.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	require.Empty(t, chk.Overlaps(), chk.Report())
	ws := chk.Windows()
	require.Greater(t, len(ws), 30, "grants in 3 s")
	order := make([]int, len(ws))
	for i, w := range ws {
		order[i] = w.Holder
	}
	// A client whose goroutine starts late (a loaded machine) is not
	// queued for the first grants, and the others take turns without it:
	// the turn order is asserted from the grant where the last client
	// first holds the lock, which must come within the first rounds.
	all := 0
	seen := map[int]bool{}
	for all < len(order) && len(seen) < 3 {
		seen[order[all]] = true
		all++
	}
	require.Less(t, all, 10, "all three clients hold the lock within the first grants: %v", order)
	start := all - 1
	for i := start + 3; i < len(order); i++ {
		require.Equal(t, order[i-3], order[i], "grant %d breaks the turn order: %v", i, order)
	}
	assert.ElementsMatch(t, []int{0, 1, 2}, order[start:start+3], "each client in every round: %v", order)
	// Each Unlock finds the next client queued: the nodes hand it the
	// key by its grant (node.GrantValue), and it holds the lock without
	// an acquire round, its token the grant. (A waiter whose attempt
	// lost a reply, or whose grant came late, takes it by an attempt.)
	granted := 0
	for _, w := range ws[start+3:] {
		if strings.HasPrefix(w.Token, "~") {
			granted++
		}
	}
	assert.Greater(t, 2*granted, len(ws)-start-3, "most handoffs by grant: %d of %d", granted, len(ws)-start-3)
	t.Logf("%d grants in turn: %v; %d of the handoffs by grant", len(order), order[:min(len(order), 12)], granted)
}

// TestQueueKilledWaiterStopsBlocking: the head of the nodes' queue is a
// client closed mid-wait without leaving (as if its host died): the
// Unlock before it grants (or reserves) the key to it, and the next
// waiter gets the lock once its place has lapsed (node.WaiterLease), not
// never, and not a TTL later: a grant lasts node.GrantTTL (2 s).
func TestQueueKilledWaiterStopsBlocking(t *testing.T) {
	p := prefix(t, 5*time.Second)
	key := p + "k"
	holder, dead, next := client(t), client(t), client(t)
	l := lockEverywhere(t, holder, key)
	deadLock := lockIn(context.Background(), dead, key)
	queuedEverywhere(t, key, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nextLock := lockIn(ctx, next, key)
	queuedEverywhere(t, key, 2)

	// The dead client's calls end without a word to the nodes.
	require.NoError(t, dead.Close())
	r := <-deadLock
	require.ErrorIs(t, r.err, redlock.ErrClosed)
	require.NoError(t, l.Unlock(context.Background()))
	released := time.Now()
	reserved := 0
	for i := range shared.Size() {
		if tok := scToken(t, shared, i, key); len(tok) > 0 && tok[0] == '~' {
			reserved++
		}
	}
	assert.GreaterOrEqual(t, reserved, 3, "the key is reserved for the dead client's waiter")
	r = <-nextLock
	require.NoError(t, r.err, "the next waiter gets the lock once the dead one's lease lapses")
	waited := time.Since(released)
	require.NoError(t, r.l.Unlock(context.Background()))
	// A grant to the dead client lasts node.GrantTTL (2 s), a
	// reservation its place; its TTL would be redlock.DefaultTTL (10 s).
	assert.Less(t, waited, redlock.DefaultTTL/2, "the next waiter waited for the dead one's grant or place, not its TTL")
	t.Logf("the next waiter held the lock %v after the Unlock", waited.Round(time.Millisecond))
}

// TestQueueRebuildsAfterMajorityRestart: two clients are queued behind a
// holder when three of the five nodes restart empty (their keys and
// queues gone). The waiters queue again, with the tickets they had, and
// each gets the lock in turn: nobody waits forever, and no two hold it at
// once.
func TestQueueRebuildsAfterMajorityRestart(t *testing.T) {
	p := prefix(t, 5*time.Second)
	key := p + "k"
	holder, a, b := client(t), client(t), client(t)
	l := lockEverywhere(t, holder, key)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	aLock := lockIn(ctx, a, key)
	queuedEverywhere(t, key, 1)
	bLock := lockIn(ctx, b, key)
	queuedEverywhere(t, key, 2)

	scStop(t, shared, 0, 1, 2)()
	for i := range 3 {
		// Empty, or already taken by a waiter's poll (queuePoll apart)
		// that came in between the restart and this read.
		require.NotEqual(t, l.Token(), scToken(t, shared, i, key), "node %d restarted without the holder's key", i)
	}
	require.ErrorIs(t, l.Unlock(context.Background()), redlock.ErrNotHeld, "the holder's keys are gone from a majority")

	var chk checker.Checker
	var wg sync.WaitGroup
	for w, rc := range []<-chan lockResult{aLock, bLock} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := <-rc
			if !assert.NoError(t, r.err, "waiter %d gets the lock after the restart", w) {
				return
			}
			h := chk.Begin(w, key, r.l.Token(), time.Now(), r.l.Until())
			time.Sleep(50 * time.Millisecond)
			h.End(time.Now())
			assert.NoError(t, r.l.Unlock(context.Background()))
		}()
	}
	wg.Wait()
	require.Empty(t, chk.Overlaps(), chk.Report())
}

// TestNodeOutsideTheMajorityRejoins: one node has lost the holder's key
// (it expired there, or the node restarted empty) while the holder keeps
// a majority. A waiter's attempt takes that free key and rolls it back;
// the rollback queues the waiter there again, as the other nodes hold it
// (before, the node kept an empty queue, and every waiting attempt took
// its key and rolled it back again), and the holder's Unlock, finding
// the key absent there, hands it to the head as the other nodes do: the
// waiter's lock, held by those grants, holds all five nodes again. (A
// call that lost a node's reply on the way counts no grant, and ends its
// wait with an attempt instead, see Client.granted: that attempt takes
// the grants that reached a node before it, node 4's too, and a grant
// that reaches a node after it was refused there is handed on by the
// call's Leave; its lock holds a majority then.)
func TestNodeOutsideTheMajorityRejoins(t *testing.T) {
	p := prefix(t, 3*time.Second)
	key := p + "k"
	ctx := context.Background()
	h, w := client(t), client(t)
	hl := lockEverywhere(t, h, key)
	_, err := shared.Direct(4).Command(ctx, "DEL", key)
	require.NoError(t, err)
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := w.Lock(ctx, key)
		assert.NoError(t, err)
		got <- l
	}()
	queuedEverywhere(t, key, 1)
	require.NoError(t, hl.Unlock(ctx))
	wl := <-got
	require.NotNil(t, wl)
	if strings.HasPrefix(wl.Token(), "~") {
		require.Eventually(t, func() bool { return holdersOf(t, wl) == shared.Size() }, 5*time.Second, 5*time.Millisecond,
			"the waiter holds every node by the grants, node 4 too")
	} else {
		t.Logf("the wait ended with an attempt (a reply was lost on the way): token %s", wl.Token())
		assert.Eventually(t, func() bool { // (Lock returned at 3 of 5)
			info, err := shared.Direct(4).Inspect(ctx, key)
			return err == nil && info.Token == wl.Token()
		}, 5*time.Second, 5*time.Millisecond, "node 4 holds the waiter's key")
		assert.GreaterOrEqual(t, holdersOf(t, wl), shared.Size()/2+1, "the waiter holds a majority")
	}
	require.NoError(t, wl.Unlock(ctx))
}
