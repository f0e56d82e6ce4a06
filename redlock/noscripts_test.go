package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// TestNoScriptsOnAMajorityGrantsNothing: three of five redis-server
// processes have EVAL and EVALSHA renamed away. Their acquire would be a
// plain SET, and the lock it gave could never be released or extended
// there. The first acquire on a connection is the script, so the
// refusal fails the acquire on them, found when each is first used: TryLock and Lock (at once, not after retries) fail
// with ErrNotAcquired and node.ErrNoScripts, and no key is left on any
// node. With one such node of three, the other two still give the lock.
func TestNoScriptsOnAMajorityGrantsNothing(t *testing.T) {
	var urls []string
	var admins []*redistest.Admin
	for i := range 5 {
		var u string
		if i < 3 {
			u = redistest.StartArgs(t, "--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
		} else {
			u = redistest.Start(t)
		}
		urls, admins = append(urls, u), append(admins, redistest.Dial(t, u))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A node timeout that a loaded host's first calls (a dial, and a
	// script to load on each node) never miss.
	c, err := redlock.Dial(urls, redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer c.Close()

	l, err := c.TryLock(ctx, "k")
	assert.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrNoScripts)
	assert.True(t, node.Permanent(err))
	l, err = c.Lock(ctx, "k")
	assert.Nil(t, l)
	require.ErrorIs(t, err, node.ErrNoScripts)
	require.NoError(t, ctx.Err(), "Lock ended at the refusals, not at its context")
	// The failed attempts' rollbacks free the two healthy nodes.
	noKeys(t, admins)

	// One refusing of three: the lock holds on the other two, and is
	// released there.
	c2, err := redlock.Dial([]string{urls[0], urls[3], urls[4]}, redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer c2.Close()
	l, err = c2.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	noKeys(t, admins)
}

// noKeys waits until no node of admins holds a key.
func noKeys(t *testing.T, admins []*redistest.Admin) {
	t.Helper()
	for i, a := range admins {
		require.Eventually(t, func() bool {
			n, err := a.Do(context.Background(), "DBSIZE")
			return err == nil && n == int64(0)
		}, 5*time.Second, 5*time.Millisecond, "node %d: keys left", i)
	}
}
