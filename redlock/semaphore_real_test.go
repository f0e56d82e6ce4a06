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
	noKeys(t, admins)
}

// TestRealAServedClientGoesToTheBackOfTheLine: a client whose waiting
// call got a permit, and whose next call takes over its place in the
// nodes' line, queues behind the clients that were waiting: the next
// release of another client goes to them. It kept the served call's
// ticket, and stayed at the head of the line for as long as it had
// calls waiting (the semaphore benchmark: four clients served 57 to 245
// sections each per goroutine, each client's own goroutines alike).
func TestRealAServedClientGoesToTheBackOfTheLine(t *testing.T) {
	urls, admins := realNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sem := func() *redlock.Semaphore {
		c, err := redlock.Dial(urls, redlock.WithTTL(time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		s, err := c.Semaphore("s", 2)
		require.NoError(t, err)
		return s
	}
	x, a, b := sem(), sem(), sem()
	line := redlock.Line(x)
	queued := func(n int64) { t.Helper(); waitInQueue(t, admins, line, n) }
	x0, err := x.TryAcquire(ctx)
	require.NoError(t, err)
	x1, err := x.TryAcquire(ctx)
	require.NoError(t, err)
	everywhere(t, admins, x0.Key(), x0.Token())
	everywhere(t, admins, x1.Key(), x1.Token())

	type got struct {
		who string
		l   *redlock.Lock
	}
	gotc := make(chan got, 3)
	acquire := func(who string, s *redlock.Semaphore) {
		go func() {
			l, err := s.Acquire(ctx)
			if assert.NoError(t, err, who) {
				gotc <- got{who, l}
			}
		}()
	}
	recv := func() got {
		t.Helper()
		select {
		case g := <-gotc:
			return g
		case <-time.After(10 * time.Second):
			t.Fatal("no call got a permit")
			return got{}
		}
	}
	acquire("a1", a)
	queued(1)
	acquire("b1", b)
	queued(2)
	acquire("a2", a) // behind a1, in a's own queue
	require.Eventually(t, func() bool { return redlock.SemWaiting(a) == 2 }, 5*time.Second, time.Millisecond)

	require.NoError(t, x0.Unlock(ctx))
	first := recv()
	require.Equal(t, "a1", first.who, "a queued first")
	queued(2) // a2 has taken a1's place
	require.NoError(t, x1.Unlock(ctx))
	second := recv()
	assert.Equal(t, "b1", second.who, "b waited longer than a's second call")
	require.NoError(t, first.l.Unlock(ctx))
	require.NoError(t, second.l.Unlock(ctx))
	require.NoError(t, recv().l.Unlock(ctx))
	noKeys(t, admins)
}
