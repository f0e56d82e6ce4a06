package rediscluster_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// startCluster starts a cluster of the test's own (one it may break),
// closed at the end of the test.
func startCluster(t *testing.T, masters, replicas int) *cluster.RedisCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := cluster.StartRedisCluster(ctx, masters, replicas)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// promoted waits until node i of rc reports itself a master.
func promoted(t *testing.T, rc *cluster.RedisCluster, i int) {
	t.Helper()
	require.Eventually(t, func() bool {
		role, err := rc.Role(context.Background(), i)
		return err == nil && role == "master"
	}, 30*time.Second, 50*time.Millisecond, "node %d promoted", i)
}

// holds reports whether node i of rc holds a copy of key.
func holds(rc *cluster.RedisCluster, i int, key string) bool {
	for _, k := range keysOn(rc, i, "{*}"+key) {
		if strings.HasSuffix(k, "}"+key) {
			return true
		}
	}
	return false
}

// pttl returns the PTTL of key (a copy's full name) on master i, or -3
// when it cannot be read.
func pttl(rc *cluster.RedisCluster, i int, key string) int64 {
	a := rc.Admin(i)
	defer a.Close()
	v, err := a.Command(context.Background(), "PTTL", key)
	ms, ok := v.(int64)
	if err != nil || !ok {
		return -3
	}
	return ms
}

// TestClusterFailover: clusters of 3 and 5 masters with a replica each.
// Master 0 is killed: locks are granted at once (by the other copies), a
// lock held across the failover gets its copy back on the promoted
// replica by Extend, and new locks place copy 0 there. Then clients
// (two redigo, one go-redis) contend while master 1 is killed: the
// checker finds no overlap, and each holds the lock.
func TestClusterFailover(t *testing.T) {
	for _, masters := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d+%d", masters, masters), func(t *testing.T) { testFailover(t, masters) })
	}
}

func testFailover(t *testing.T, masters int) {
	ctx := context.Background()
	rc := startCluster(t, masters, 1)
	c := dial(t, rc, redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))

	k := key(t, rc)
	held, err := c.Lock(ctx, k)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holds(rc, 0, k) }, 5*time.Second, 10*time.Millisecond, "copy 0 on master 0")

	require.NoError(t, rc.Kill(ctx, 0))
	l, err := c.Lock(ctx, k+":during")
	require.NoError(t, err, "two copies of three grant it while master 0 is down")
	require.NoError(t, l.Unlock(ctx))

	replica := masters // master 0's (StartRedisCluster)
	promoted(t, rc, replica)
	require.Eventually(t, func() bool {
		return held.Extend(ctx, 5*time.Second) == nil && holds(rc, replica, k)
	}, 10*time.Second, 100*time.Millisecond, "the held lock's copy 0 is on the promoted replica after Extend")
	require.Eventually(t, func() bool {
		l, err := c.Lock(ctx, k+":after")
		if err != nil {
			return false
		}
		on := holds(rc, replica, k+":after")
		_ = l.Unlock(ctx)
		return on
	}, 10*time.Second, 100*time.Millisecond, "new locks place copy 0 on the promoted replica")
	require.NoError(t, held.Unlock(ctx))

	// Contention across a failover: three clients, master 1 killed; the
	// third over go-redis (goredis.DialCluster), whose ClusterClient
	// follows the failover itself.
	clients := []*redlock.Client{c,
		dial(t, rc, redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(200*time.Millisecond)),
		dialGoRedis(t, rc, redlock.WithTTL(5*time.Second), redlock.WithNodeTimeout(200*time.Millisecond))}
	hot := k + ":hot"
	var chk checker.Checker
	stop := time.Now().Add(6 * time.Second)
	var wg sync.WaitGroup
	grants := make([]int, len(clients))
	for w, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				lctx, cancel := context.WithDeadline(ctx, stop)
				l, err := cl.Lock(lctx, hot)
				cancel()
				if err != nil {
					continue
				}
				grants[w]++
				h := chk.Begin(w, l.Key(), l.Token(), time.Now(), l.Until())
				time.Sleep(5 * time.Millisecond)
				h.End(time.Now())
				_ = l.Unlock(ctx)
			}
		}()
	}
	time.Sleep(time.Second)
	require.NoError(t, rc.Kill(ctx, 1))
	wg.Wait()
	require.Empty(t, chk.Overlaps(), chk.Report())
	for w, n := range grants {
		assert.Positive(t, n, "client %d held the lock", w)
	}
	t.Logf("grants per client across the failover: %v", grants)
}

// TestClusterReshardingAHeldLocksSlot: the slot of a held lock's copy 0
// moves, keys and all, from master 0 to master 1. Half-way (the copy's
// key migrated, the slot still master 0's), the copy's extend follows
// master 0's ASK reply to master 1 and succeeds there; a new lock is
// granted by the other copies (its copy 0's scripts, on keys absent on
// both sides, are answered TRYAGAIN until the move ends). Once moved,
// the held lock's copy follows the MOVED reply: Extend and Unlock still
// succeed, and the copy is extended and released on master 1.
func TestClusterReshardingAHeldLocksSlot(t *testing.T) {
	ctx := context.Background()
	rc := startCluster(t, 3, 0)
	var failed sync.Map // failed calls while watched, by copy: "copy op" -> error
	var watch atomic.Bool
	c := dial(t, rc, redlock.WithHooks(redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Err != nil && watch.Load() {
			failed.Store(fmt.Sprintf("copy %d %s", i.Node, i.Op), i.Err.Error())
		}
	}}))
	k := key(t, rc)
	l, err := c.Lock(ctx, k)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holds(rc, 0, k) }, 5*time.Second, 10*time.Millisecond, "copy 0 on master 0")

	tag := "{" + node.TagFor([]node.SlotRange{{First: 0, Last: 16384/3 - 1}}) + "}" // master 0's: copy 0's
	slot := node.Slot(tag)
	require.NoError(t, rc.BeginMoveSlot(ctx, slot, 0, 1))
	require.NoError(t, rc.MigrateSlotKeys(ctx, slot, 0, 1))
	require.False(t, holds(rc, 0, k), "the copy's key left master 0")
	watch.Store(true)
	require.NoError(t, l.Extend(ctx, 30*time.Second), "half-way through the move")
	watch.Store(false)
	failed.Range(func(k, v any) bool {
		t.Errorf("%s: %s", k, v)
		return true
	})
	l2, err := c.Lock(ctx, key(t, rc))
	require.NoError(t, err, "a new lock, half-way through the move")
	require.NoError(t, l2.Unlock(ctx))

	require.NoError(t, rc.FinishMoveSlot(ctx, slot, 0, 1))
	// (Extend returned at 2 of 3 copies: copy 0's, after ASK, may be
	// the late one.)
	assert.Eventually(t, func() bool { return pttl(rc, 1, tag+k) > 20_000 }, 5*time.Second, 10*time.Millisecond, "copy 0 extended on master 1, after ASK (the lock's TTL is 10s)")
	require.False(t, holds(rc, 0, k), "the copy left master 0")
	require.True(t, holds(rc, 1, k), "the copy is on master 1")

	require.NoError(t, l.Extend(ctx, 40*time.Second), "two copies of three at least")
	require.Eventually(t, func() bool {
		return l.Extend(ctx, 50*time.Second) == nil && pttl(rc, 1, tag+k) > 40_000
	}, 5*time.Second, 50*time.Millisecond, "copy 0 extended on master 1 (it followed the MOVED reply)")
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return !holds(rc, 1, k) }, 5*time.Second, 10*time.Millisecond, "both copies on master 1 released")
}

// TestClusterClientsAgreeOnTheCopiesAcrossAResharding: every client
// places a lock's copies under the tags the first one recorded, whatever
// the topology when it dials. The slot of copy 0's tag moves from
// master 0 to master 1; a client dialled afterwards uses the same tags
// (reading the topology afresh would give copy 0 another tag of master
// 0's, and the two clients would lock different keys: their majorities
// need not meet), finds copy 0 on master 1 beside copy 1 and warns; a
// lock the first client holds excludes it.
func TestClusterClientsAgreeOnTheCopiesAcrossAResharding(t *testing.T) {
	ctx := context.Background()
	rc := startCluster(t, 3, 0)
	seeds := []string{rc.URL(0), rc.URL(1), rc.URL(2)}

	before, err := redlock.ClusterCopies(seeds)
	require.NoError(t, err)
	var seenA colocated
	a := dial(t, rc, redlock.WithHooks(redlock.Hooks{Colocated: seenA.add}))
	k := key(t, rc)
	l, err := a.Lock(ctx, k)
	require.NoError(t, err)

	require.NoError(t, rc.MoveSlot(ctx, before[0].Slot, 0, 1))
	after, err := redlock.ClusterCopies(seeds)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i := range after {
		assert.Equal(t, before[i].Tag, after[i].Tag, "copy %d's tag, as recorded", i)
	}
	assert.Equal(t, after[1].Master.Addr(), after[0].Master.Addr(), "copy 0 moved to copy 1's master")

	logs := &syncBuffer{}
	var seenB colocated
	b := dial(t, rc, redlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), redlock.WithHooks(redlock.Hooks{Colocated: seenB.add}))
	assert.Contains(t, logs.String(), "copies of every lock on one master", "the second client warns")
	assert.Equal(t, []int{2}, seenB.get(), "the second client reports two copies on one master at dial")
	_, err = b.TryLock(ctx, k)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the first client's lock excludes the second")
	assert.Empty(t, seenA.get(), "the first client has not used copy 0 since it moved")
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, []int{2}, seenA.get(), "the first client's copy 0 followed MOVED onto copy 1's master")
	// Unlock returned at a majority; copy 0's release met MOVED and is
	// finished in the background on the new master: wait for it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := b.Lock(wctx, k)
	require.NoError(t, err)
	require.NoError(t, l2.Unlock(ctx))

	require.NoError(t, rc.MoveSlot(ctx, before[0].Slot, 1, 0))
	for _, c := range []*redlock.Client{a, b} {
		l, err := c.Lock(wctx, k)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Equal(t, []int{2, 0}, seenA.get(), "every copy on a master of its own again")
	assert.Equal(t, []int{2, 0}, seenB.get())
}

// colocated records what a Colocated hook reports.
type colocated struct {
	mu   sync.Mutex
	seen []int
}

func (c *colocated) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, n)
}

func (c *colocated) get() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a logger's).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
