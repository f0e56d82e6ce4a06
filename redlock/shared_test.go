package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/redlock"
)

// TestRLockReadersTogetherNeverWithAWriter: readers share the key; a
// writer gets it only once the last reader is out, and keeps readers out.
func TestRLockReadersTogetherNeverWithAWriter(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	r1, err := c.TryRLock(ctx, "k")
	require.NoError(t, err)
	r2, err := c.TryRLock(ctx, "k")
	require.NoError(t, err)
	assert.True(t, r1.Shared())
	assert.NotEqual(t, r1.Token(), r2.Token())
	require.Eventually(t, func() bool {
		for _, f := range fakes {
			if f.readerCount("k") != 2 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "two readers on every node")

	_, err = c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while readers hold")
	require.NoError(t, r1.Extend(ctx, time.Minute), "a read hold extends")
	require.NoError(t, r1.Unlock(ctx))
	_, err = c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while one reader holds")
	require.NoError(t, r2.Unlock(ctx))

	w, err := c.TryLock(ctx, "k")
	require.NoError(t, err, "the last reader is out")
	assert.False(t, w.Shared())
	_, err = c.TryRLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while a writer holds")
	require.NoError(t, w.Unlock(ctx))
}

// TestRLockBadInput: bad arguments are ErrInvalid and send nothing.
func TestRLockBadInput(t *testing.T) {
	fakes, _, c := setup(t, 5)
	ctx := context.Background()
	_, err := c.RLock(ctx, "")
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.TryRLock(ctx, "k", redlock.WithTTL(0))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = c.RLock(ctx, "k", redlock.WithFencing())
	assert.ErrorIs(t, err, redlock.ErrInvalid, "fencing orders writers")
	for _, f := range fakes {
		assert.Zero(t, f.count("acquire"))
	}
}

// TestRLockOnAFencingClient: a client that fences by default takes read
// holds without a fence.
func TestRLockOnAFencingClient(t *testing.T) {
	_, _, c := setup(t, 5, redlock.WithFencing())
	r, err := c.TryRLock(context.Background(), "k")
	require.NoError(t, err)
	assert.Zero(t, r.Fence())
	require.NoError(t, r.Unlock(context.Background()))
}

// TestRLockNeedsSharers: nodes that cannot hold a key shared refuse
// RLock up front; Lock still works.
func TestRLockNeedsSharers(t *testing.T) {
	clk := clock.NewFake(epoch)
	fakes := newFakes(3, clk)
	nodes := asNodes(fakes)
	nodes[2] = plainNode{fakes[2]} // no node.Sharer either
	c, err := redlock.New(nodes, redlock.WithClock(clk))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	_, err = c.TryRLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "node[2]")
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
}

// TestRLockRollsBackWithoutAMajority: a reader that gets two of five
// nodes (a writer holds three) leaves no read hold behind.
func TestRLockRollsBackWithoutAMajority(t *testing.T) {
	fakes, _, c := setup(t, 5)
	for _, f := range fakes[:3] {
		f.put("k", "writer", time.Minute)
	}
	_, err := c.TryRLock(context.Background(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// TryRLock returns once three nodes refused, maybe before the other
	// two answered: wait for their rollbacks, not only for no readers.
	rolledBack := func(f *fakeNode) bool { return f.count("release") > 0 && f.readerCount("k") == 0 }
	require.Eventually(t, func() bool { return rolledBack(fakes[3]) && rolledBack(fakes[4]) },
		5*time.Second, time.Millisecond, "the read holds were rolled back")
	for _, f := range fakes[:3] {
		f.restart("k")
	}
}

// TestRLockWaitsForTheWriter: a reader waits (its retry delay is an hour)
// and goes in as soon as the writer unlocks.
func TestRLockWaitsForTheWriter(t *testing.T) {
	_, _, c := wakeSetup(t)
	ctx := context.Background()
	w, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			r, err := c.RLock(ctx, "k")
			if err == nil {
				err = r.Unlock(ctx)
			}
			errc <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("a reader returned while the writer held: %v", err)
	default:
	}
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, recvErr(t, errc, "reader 1"))
	require.NoError(t, recvErr(t, errc, "reader 2"))
}

// TestReadHoldIsNotHandedToAWriter: a writer of the same client waits
// while a reader holds; the reader's Unlock releases (no transfer: a read
// hold is no writer's token) and wakes the writer, which gets the key
// long before its retry delay (an hour).
func TestReadHoldIsNotHandedToAWriter(t *testing.T) {
	fakes, _, clk, c := handoffSetup(t, 3, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	ctx := context.Background()
	r, err := c.TryRLock(ctx, "k")
	require.NoError(t, err)
	rc := waitIn(t, ctx, c, clk, "k", 1)
	require.NoError(t, r.Unlock(ctx))
	w := receiveLock(t, rc)
	require.NoError(t, w.err)
	assert.False(t, w.l.Shared())
	for _, f := range fakes {
		assert.Zero(t, f.count("transfer"))
		// The reader's Unlock returned at a majority: its release on
		// the last node may still be on its way.
		assert.Eventually(t, func() bool { return f.readerCount("k") == 0 }, 5*time.Second, time.Millisecond)
	}
	require.NoError(t, w.l.Unlock(ctx))
}
