package rediscluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/redlock"
)

// TestClusterFollowsAnAddedMaster: a master joins a running cluster of
// three and copy 0's slot moves onto it, as adding a master does (MEET,
// then a resharding). The client dialled before follows without a
// restart: its held lock's Extend and Unlock succeed with copy 0 on the
// new master, and its new locks put copy 0 there, the copies still on
// three distinct masters (no co-location reported). The tags do not
// change, so held locks keep their copies, and a client dialled after
// the change locks the same keys: the two exclude each other. (New locks
// take no fourth copy: the placement record fixes the copies, see
// docs/CLUSTER.md.)
func TestClusterFollowsAnAddedMaster(t *testing.T) {
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rc, err := cluster.StartRedisClusterWithSpares(sctx, 3, 0, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	seeds := []string{rc.URL(0), rc.URL(1), rc.URL(2)}
	before, err := redlock.ClusterCopies(seeds)
	require.NoError(t, err)
	var seenA colocated
	a, err := redlock.DialCluster(seeds, redlock.WithHooks(redlock.Hooks{Colocated: seenA.add}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	k := key(t, rc)
	l, err := a.Lock(ctx, k)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holds(rc, 0, k) }, 5*time.Second, 10*time.Millisecond, "copy 0 on master 0")

	require.NoError(t, rc.AddMaster(sctx, 3))
	require.NoError(t, rc.MoveSlot(sctx, before[0].Slot, 0, 3))
	require.True(t, holds(rc, 3, k), "the held copy moved with its slot to the new master")
	after, err := redlock.ClusterCopies(seeds)
	require.NoError(t, err)
	require.Len(t, after, len(before), "no copy more")
	for i := range after {
		assert.Equal(t, before[i].Tag, after[i].Tag, "copy %d's tag, as recorded", i)
	}
	assert.Equal(t, rc.Upstream(3), after[0].Master.Addr(), "copy 0 on the new master")

	require.Eventually(t, func() bool {
		return l.Extend(ctx, 30*time.Second) == nil && pttl(rc, 3, "{"+before[0].Tag+"}"+k) > 20_000
	}, 5*time.Second, 50*time.Millisecond, "copy 0 extended on the new master (it followed MOVED)")

	b, err := redlock.DialCluster([]string{rc.URL(3), rc.URL(1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	_, err = b.TryLock(ctx, k)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a client dialled after the change locks the same keys")
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return !holds(rc, 3, k) }, 5*time.Second, 10*time.Millisecond, "released on the new master")

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	lb, err := b.Lock(wctx, k)
	require.NoError(t, err)
	for _, m := range []int{3, 1, 2} { // (Lock returns at 2 of 3 copies)
		assert.Eventually(t, func() bool { return holds(rc, m, k) }, 5*time.Second, 10*time.Millisecond, "master %d holds a copy", m)
	}
	require.NoError(t, lb.Unlock(ctx))

	k2 := key(t, rc)
	l2, err := a.Lock(ctx, k2)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holds(rc, 3, k2) && holds(rc, 1, k2) && holds(rc, 2, k2) }, 5*time.Second, 10*time.Millisecond,
		"a new lock of the first client: copies on the new master and masters 1 and 2")
	assert.False(t, holds(rc, 0, k2), "none on master 0, which kept no copy's slot")
	require.NoError(t, l2.Unlock(ctx))
	assert.Empty(t, seenA.get(), "never two copies on one master")
}
