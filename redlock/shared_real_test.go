package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// waitQueued waits until every node has n waiters queued for key.
func waitQueued(t *testing.T, admins []*redistest.Admin, key string, n int64) {
	t.Helper()
	waitInQueue(t, admins, node.WaitersKey(key), n)
}

// waitInQueue waits until every node has n waiters in the queue q (a
// lock's, or a semaphore's line).
func waitInQueue(t *testing.T, admins []*redistest.Admin, q string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, a := range admins {
			v, err := a.Do(context.Background(), "HLEN", q)
			require.NoError(t, err)
			if v.(int64) != n+1 { // and the ticket counter
				return false
			}
		}
		return true
	}, 10*time.Second, 2*time.Millisecond, "%d waiters in %s", n, q)
}

// TestRealALaterReaderWaitsBehindAWriter: a client's reader call that
// starts after a writer of another client queued waits behind that
// writer, though an earlier reader call of its client was queued before
// it. Readers queued under their client's tag: the later call took the
// earlier one's ticket and went in with it, ahead of the writer, so a
// client that kept a read call waiting kept writers out (the torture
// histories' starved writers).
func TestRealALaterReaderWaitsBehindAWriter(t *testing.T) {
	urls, admins := realNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func() *redlock.Client {
		c, err := redlock.Dial(urls, redlock.WithTTL(time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder, readers, writer := dial(), dial(), dial()
	h, err := holder.TryLock(ctx, "k")
	require.NoError(t, err)
	// TryLock returns at a majority: a reader that came to the last
	// node before the holder's SET would take it there, not queue.
	everywhere(t, admins, "k", h.Token())

	var mu sync.Mutex
	var order []string
	took := func(who string) {
		mu.Lock()
		order = append(order, who)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	hold := func(who string, lock func() (*redlock.Lock, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := lock()
			if !assert.NoError(t, err, who) {
				return
			}
			took(who)
			time.Sleep(100 * time.Millisecond)
			took(who + " out")
			assert.NoError(t, l.Unlock(ctx), who)
		}()
	}
	hold("first reader", func() (*redlock.Lock, error) { return readers.RLock(ctx, "k") })
	waitQueued(t, admins, "k", 1)
	hold("writer", func() (*redlock.Lock, error) { return writer.Lock(ctx, "k") })
	waitQueued(t, admins, "k", 2)
	hold("later reader", func() (*redlock.Lock, error) { return readers.RLock(ctx, "k") })
	waitQueued(t, admins, "k", 3) // each reader call in a place of its own
	require.NoError(t, h.Unlock(ctx))
	wg.Wait()
	assert.Equal(t, []string{"first reader", "first reader out", "writer", "writer out", "later reader", "later reader out"}, order)
	// The last Unlock returned at a majority; the third node's release
	// may still be on its way.
	for i, a := range admins {
		require.Eventually(t, func() bool {
			n, err := a.Do(ctx, "EXISTS", "k", node.WaitersKey("k"), node.ReadersKey("k"))
			require.NoError(t, err)
			return n == int64(0)
		}, 5*time.Second, time.Millisecond, "node %d: keys left", i)
	}
}
