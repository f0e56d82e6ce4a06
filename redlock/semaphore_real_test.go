package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// TestRealASemaphoreRollbackQueuesTheCallAgain: a waiting Acquire whose
// attempt takes the slot on the node that lost the holder's key (it
// heads the line there) and is refused by the others rolls that node
// back and is in the line there again, as a Lock's waiter is in its
// key's queue. The acquire that set the slot dropped the client from the
// line; without the requeue it stayed out of it on that node at every
// attempt, and releases of other slots there went to callers after it
// (the starved semaphore wait of the torture run at 8b8de48, seed
// 26002025).
func TestRealASemaphoreRollbackQueuesTheCallAgain(t *testing.T) {
	urls, admins := realNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(opts ...redlock.Option) *redlock.Client {
		c, err := redlock.Dial(urls, append(opts, redlock.WithTTL(time.Minute))...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder, waiter := dial(), dial(redlock.WithRetry(redlock.LinearBackoff(2*time.Second)))
	hs, err := holder.Semaphore("s", 1)
	require.NoError(t, err)
	h, err := hs.TryAcquire(ctx)
	require.NoError(t, err)
	slot := redlock.PermitKey("s", 0)
	everywhere(t, admins, slot, h.Token())
	_, err = admins[2].Do(ctx, "DEL", slot) // node 2 has lost the holder's key
	require.NoError(t, err)

	ws, err := waiter.Semaphore("s", 1)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := ws.Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	line := redlock.Line(ws)
	assert.Eventually(t, func() bool {
		n, err := admins[2].Do(ctx, "HLEN", line)
		require.NoError(t, err)
		return n.(int64) == 2 // the waiter and the ticket counter
	}, 10*time.Second, 2*time.Millisecond, "the waiter is queued again on node 2")
	require.NoError(t, h.Unlock(ctx))
	require.NoError(t, <-got, "the waiter takes the permit once it is released")
	for i, a := range admins {
		assert.Eventually(t, func() bool {
			n, err := a.Do(ctx, "DBSIZE")
			require.NoError(t, err)
			return n.(int64) == 0
		}, 5*time.Second, 5*time.Millisecond, "node %d: keys left", i)
	}
}
