package redlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// realNodes starts three redis-server processes and returns their URLs
// and admin connections.
func realNodes(t *testing.T) ([]string, []*redistest.Admin) {
	t.Helper()
	var urls []string
	var admins []*redistest.Admin
	for range 3 {
		u := redistest.Start(t)
		urls, admins = append(urls, u), append(admins, redistest.Dial(t, u))
	}
	return urls, admins
}

func subscribers(t *testing.T, a *redistest.Admin, key string) int64 {
	t.Helper()
	v, err := a.Do(context.Background(), "PUBSUB", "NUMSUB", node.ReleaseChannel(key))
	require.NoError(t, err)
	return v.([]any)[1].(int64)
}

// waitSubscribed waits until every node has n subscribers for key.
func waitSubscribed(t *testing.T, admins []*redistest.Admin, key string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, a := range admins {
			if subscribers(t, a, key) != n {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "subscribers of %s", key)
}

// TestRealUnlockWakesAnotherClient: a waiter in another client (another
// host) is granted within milliseconds of the holder's Unlock, though its
// retry delay is an hour and the holder's TTL a minute.
func TestRealUnlockWakesAnotherClient(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a, err := redlock.Dial(urls, redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	defer a.Close()
	b, err := redlock.Dial(urls, redlock.WithTTL(time.Minute), redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	require.NoError(t, err)
	defer b.Close()
	holder, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	type grant struct {
		at  time.Time
		err error
	}
	got := make(chan grant, 1)
	go func() {
		l, err := b.Lock(ctx, "k")
		at := time.Now()
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- grant{at, err} // after Unlock: the test closes b next
	}()
	waitSubscribed(t, admins, "k", 1)
	time.Sleep(20 * time.Millisecond) // the attempt after subscribing fails too
	unlocked := time.Now()
	require.NoError(t, holder.Unlock(ctx))
	var at time.Time
	select {
	case g := <-got:
		require.NoError(t, g.err)
		at = g.at
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	t.Logf("granted %v after the holder's Unlock returned", at.Sub(unlocked).Round(10*time.Microsecond))
	// Woken, not served by a retry (an hour) or the TTL (a minute). The
	// bound is loose: a loaded machine stalls a -race run for 100s of ms.
	assert.Less(t, at.Sub(unlocked), 2*time.Second)
	require.NoError(t, b.Close())
	require.NoError(t, a.Close())
	// (Close closes the subscriber's socket; the server drops the
	// subscription when it reads the close.)
	waitSubscribed(t, admins, "k", 0)
}

// TestRealPubSubKilled: one node's pub/sub connection is killed while a
// waiter waits; the waiter still gets the lock when the holder unlocks,
// and the subscriber is back on that node.
func TestRealPubSubKilled(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	a, err := redlock.Dial(urls)
	require.NoError(t, err)
	defer a.Close()
	b, err := redlock.Dial(urls, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	require.NoError(t, err)
	defer b.Close()
	holder, err := a.TryLock(ctx, "k")
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, "k")
		if err == nil {
			err = l.Unlock(ctx)
		}
		errc <- err
	}()
	waitSubscribed(t, admins, "k", 1)
	_, err = admins[0].Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	waitSubscribed(t, admins, "k", 1) // node 0's subscriber is back
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken")
	}
}

// TestRealWithoutPubSubRights: an ACL user without channel rights gets
// locks; its waiters fall back to the retry delay.
func TestRealWithoutPubSubRights(t *testing.T) {
	urls, admins := realNodes(t)
	ctx := context.Background()
	var userURLs []string
	for i, a := range admins {
		_, err := a.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "resetchannels", "+@all")
		require.NoError(t, err)
		userURLs = append(userURLs, strings.Replace(urls[i], "redis://", "redis://locker:pw@", 1))
	}
	c, err := redlock.Dial(userURLs, redlock.WithRetry(redlock.LinearBackoff(50*time.Millisecond)))
	require.NoError(t, err)
	defer c.Close()
	holder, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "k")
		if err == nil {
			err = l.Unlock(ctx)
		}
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, holder.Unlock(ctx))
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
}

// TestNodeTimeoutAboveOneSecond: WithNodeTimeout above the nodes' own
// default Timeout (1s) is the timeout the nodes apply. Two of three
// nodes answer 1.3s late (DEBUG SLEEP); with a 3s node timeout the lock
// is granted. Capped at 1s, as it was, those two timed out and the
// attempt failed.
func TestNodeTimeoutAboveOneSecond(t *testing.T) {
	urls, admins := realNodes(t)
	c, err := redlock.Dial(urls, redlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(3*time.Second))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	warm, err := c.TryLock(ctx, "warm") // connections and scripts in place
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	slept := make(chan error, 2)
	for _, a := range admins[:2] {
		go func() { _, err := a.Do(ctx, "DEBUG", "SLEEP", "1.3"); slept <- err }()
	}
	time.Sleep(100 * time.Millisecond) // both asleep
	l, err := c.TryLock(ctx, "slow")
	require.NoError(t, err, "granted by nodes that answered within the 3s node timeout")
	require.NoError(t, <-slept)
	require.NoError(t, <-slept)
	require.NoError(t, l.Unlock(ctx))
}
