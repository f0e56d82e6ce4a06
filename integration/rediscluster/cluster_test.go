// Package rediscluster_test runs redlock.DialCluster against local Redis
// Clusters (redis-server processes in cluster mode, package cluster's
// RedisCluster): copies of each lock on distinct masters, and the
// client's features on them.
package rediscluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// three and five are clusters of 3 and 5 masters, without replicas,
// shared by the tests (each on keys of its own).
var three, five *cluster.RedisCluster

// quiet is a go-redis logger that says nothing: its pools log every
// failed dial, which the failover test makes by the dozen.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var err error
	three, err = cluster.StartRedisCluster(ctx, 3, 0)
	if err == nil {
		five, err = cluster.StartRedisCluster(ctx, 5, 0)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rediscluster: cannot start the clusters:", err)
		closeAll()
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		for _, rc := range []*cluster.RedisCluster{three, five} {
			if left := leftovers(rc, "*"); left != "" {
				fmt.Fprintln(os.Stderr, "rediscluster: keys left after the tests:", left)
				code = 1
			}
		}
	}
	closeAll()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintln(os.Stderr, "rediscluster: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func closeAll() {
	for _, rc := range []*cluster.RedisCluster{three, five} {
		if rc != nil {
			_ = rc.Close()
		}
	}
}

// leftovers lists the keys matching pattern on the nodes that are
// masters now (a node down holds nothing; a replica follows its master),
// fence counters and the placement record apart (they outlive locks by
// design).
func leftovers(rc *cluster.RedisCluster, pattern string) string {
	var b strings.Builder
	for i := range rc.Size() {
		if role, err := rc.Role(context.Background(), i); err != nil || role != "master" {
			continue
		}
		for _, k := range keysOn(rc, i, pattern) {
			if !strings.HasSuffix(k, ":fence") && !strings.HasPrefix(k, "{redlock}") {
				fmt.Fprintf(&b, "master %d: %s; ", i, k)
			}
		}
	}
	return b.String()
}

func keysOn(rc *cluster.RedisCluster, i int, pattern string) []string {
	a := rc.Admin(i)
	defer a.Close()
	ks, err := a.Keys(context.Background(), pattern)
	if err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	return ks
}

var seq atomic.Int64

// key returns a key unique to the test, and a cleanup that waits up to
// a few seconds for every key named after it to be gone from every
// master of rc (fence counters apart).
func key(t *testing.T, rc *cluster.RedisCluster) string {
	t.Helper()
	k := fmt.Sprintf("rc:%d:%s", seq.Add(1), strings.ReplaceAll(t.Name(), "/", "."))
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			left := leftovers(rc, "*"+k+"*")
			if left == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("keys left: %s", left)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	return k
}

// dialB is dial for a benchmark, on the 3-master cluster.
func dialB(b *testing.B) *redlock.Client {
	c, err := redlock.DialCluster([]string{three.URL(0)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// dial returns a cluster client with every node of rc as a seed (the
// first that answers is asked), closed at the end of the test.
func dial(t *testing.T, rc *cluster.RedisCluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	seeds := make([]string, rc.Size())
	for i := range seeds {
		seeds[i] = rc.URL(i)
	}
	c, err := redlock.DialCluster(seeds, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dropFences deletes, at the end of the test, the fence counters of key
// on rc's masters (they outlive locks by design).
func dropFences(t *testing.T, rc *cluster.RedisCluster, key string) {
	t.Cleanup(func() {
		for i := range rc.Masters {
			a := rc.Admin(i)
			for _, fk := range keysOn(rc, i, "{*}"+key+":fence") {
				_, _ = a.Command(context.Background(), "DEL", fk)
			}
			a.Close()
		}
	})
}

// copies returns, per master of rc, the keys it holds whose name ends
// in "}" + key: one copy's lock key.
func copies(rc *cluster.RedisCluster, key string) [][]string {
	out := make([][]string, rc.Masters)
	for i := range rc.Masters {
		out[i] = keysOn(rc, i, "{*}"+key)
	}
	return out
}

// TestCopiesOnDistinctMasters: each lock has one copy on each of as many
// masters as it has copies, in a slot that master serves (the master
// took its SET: a slot of another master would have answered MOVED),
// each holding the lock's token; Unlock removes them all.
func TestCopiesOnDistinctMasters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rc     **cluster.RedisCluster
		opts   []redlock.Option
		copies int
	}{
		{"3 masters", &three, nil, 3},
		{"5 masters", &five, nil, 5},
		{"5 masters, WithCopies(3)", &five, []redlock.Option{redlock.WithCopies(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := *tc.rc
			c := dial(t, rc, tc.opts...)
			assert.Equal(t, tc.copies/2+1, c.Quorum(), "a majority of copies")
			k := key(t, rc)
			l, err := c.Lock(context.Background(), k)
			require.NoError(t, err)
			// Lock returns at a majority; the other copies land
			// moments later.
			var cs [][]string
			require.Eventually(t, func() bool {
				cs = copies(rc, k)
				held := 0
				for _, ks := range cs {
					held += len(ks)
				}
				return held == tc.copies
			}, 5*time.Second, 10*time.Millisecond, "one copy on each of %d masters: %v", tc.copies, cs)
			for i, ks := range cs {
				require.LessOrEqual(t, len(ks), 1, "master %d holds one copy at most: %v", i, ks)
				if len(ks) == 1 {
					a := rc.Admin(i)
					v, err := a.Command(context.Background(), "GET", ks[0])
					a.Close()
					require.NoError(t, err)
					assert.Equal(t, l.Token(), fmt.Sprintf("%s", v), "master %d's copy holds the token", i)
				}
			}
			require.NoError(t, l.Unlock(context.Background()))
			require.Eventually(t, func() bool {
				for _, ks := range copies(rc, k) {
					if len(ks) > 0 {
						return false
					}
				}
				return true
			}, 5*time.Second, 10*time.Millisecond, "every copy released")
		})
	}
}

// TestClusterRefusesWhatCannotHoldACopyPerMaster: bad copies, a cluster
// of two masters, a server not in cluster mode, and WithCopies outside
// DialCluster are ErrInvalid, with nothing left open.
func TestClusterRefusesWhatCannotHoldACopyPerMaster(t *testing.T) {
	for _, n := range []int{-1, 1, 2, 4, 7} {
		_, err := redlock.DialCluster([]string{five.URL(0)}, redlock.WithCopies(n))
		require.ErrorIs(t, err, redlock.ErrInvalid, "WithCopies(%d) on 5 masters", n)
	}
	_, err := redlock.DialCluster([]string{three.URL(0)}, redlock.WithCopies(5))
	require.ErrorIs(t, err, redlock.ErrInvalid, "more copies than masters")
	_, err = redlock.DialCluster(nil)
	require.ErrorIs(t, err, redlock.ErrInvalid, "no seeds")
	_, err = redlock.Dial([]string{three.URL(0), three.URL(1), three.URL(2)}, redlock.WithCopies(3))
	require.ErrorIs(t, err, redlock.ErrInvalid, "WithCopies is DialCluster's")
	c := dial(t, three)
	_, err = c.Lock(context.Background(), "k", redlock.WithCopies(3))
	require.ErrorIs(t, err, redlock.ErrInvalid, "WithCopies is no lock's option")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	two, err := cluster.StartRedisCluster(ctx, 2, 0)
	require.NoError(t, err)
	defer two.Close()
	_, err = redlock.DialCluster([]string{two.URL(0)})
	require.ErrorIs(t, err, redlock.ErrInvalid, "two masters")
	assert.Contains(t, err.Error(), "2 masters")

	plain, err := cluster.StartProcesses(ctx, cluster.Options{Nodes: 1})
	require.NoError(t, err)
	defer plain.Close()
	_, err = redlock.DialCluster([]string{"redis://" + plain.Upstream(0)})
	require.ErrorIs(t, err, redlock.ErrInvalid, "not a cluster")
	require.ErrorIs(t, err, node.ErrNotCluster)
}

// TestClusterClientFeatures: exclusion between two clients (TryLock
// refused, a waiter served on Unlock), fencing, readers together, a
// semaphore's permits and an election, all on one cluster: between two
// DialCluster clients, and between a go-redis client
// (goredis.DialCluster, over a redis.ClusterClient) and a DialCluster one,
// which must place the copies alike to exclude each other.
func TestClusterClientFeatures(t *testing.T) {
	t.Run("redigo and redigo", func(t *testing.T) { clusterFeatures(t, dial(t, three), dial(t, three)) })
	t.Run("go-redis and redigo", func(t *testing.T) { clusterFeatures(t, dialGoRedis(t, three), dial(t, three)) })
}

// dialGoRedis returns a goredis.DialCluster client of rc over a
// redis.ClusterClient, both closed at the end of the test.
func dialGoRedis(t *testing.T, rc *cluster.RedisCluster, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	addrs := make([]string, rc.Size())
	for i := range addrs {
		addrs[i] = rc.Upstream(i)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	c, err := goredis.DialCluster(cc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clusterFeatures(t *testing.T, a, b *redlock.Client) {
	ctx := context.Background()

	t.Run("exclusion and a waiter", func(t *testing.T) {
		k := key(t, three)
		l, err := a.Lock(ctx, k)
		require.NoError(t, err)
		_, err = b.TryLock(ctx, k)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		got := make(chan *redlock.Lock, 1)
		go func() {
			l2, err := b.Lock(ctx, k)
			assert.NoError(t, err)
			got <- l2
		}()
		time.Sleep(50 * time.Millisecond) // b waits in line
		require.NoError(t, l.Unlock(ctx))
		select {
		case l2 := <-got:
			require.NotNil(t, l2)
			require.NoError(t, l2.Unlock(ctx))
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not served after Unlock")
		}
	})

	t.Run("fencing", func(t *testing.T) {
		k := key(t, three)
		var last int64
		for range 3 {
			l, err := a.Lock(ctx, k, redlock.WithFencing())
			require.NoError(t, err)
			require.Greater(t, l.Fence(), last, "fences grow")
			last = l.Fence()
			require.NoError(t, l.Unlock(ctx))
		}
		dropFences(t, three, k)
	})

	t.Run("readers together, a writer alone", func(t *testing.T) {
		k := key(t, three)
		r1, err := a.RLock(ctx, k)
		require.NoError(t, err)
		r2, err := b.RLock(ctx, k)
		require.NoError(t, err)
		_, err = b.TryLock(ctx, k)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, r1.Unlock(ctx))
		require.NoError(t, r2.Unlock(ctx))
		w, err := b.TryLock(ctx, k)
		require.NoError(t, err)
		require.NoError(t, w.Unlock(ctx))
	})

	t.Run("semaphore", func(t *testing.T) {
		k := key(t, three)
		sa, err := a.Semaphore(k, 2)
		require.NoError(t, err)
		sb, err := b.Semaphore(k, 2)
		require.NoError(t, err)
		p1, err := sa.Acquire(ctx)
		require.NoError(t, err)
		p2, err := sb.Acquire(ctx)
		require.NoError(t, err)
		_, err = sb.TryAcquire(ctx)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "two permits")
		require.NoError(t, p1.Unlock(ctx))
		p3, err := sb.TryAcquire(ctx)
		require.NoError(t, err)
		require.NoError(t, p2.Unlock(ctx))
		require.NoError(t, p3.Unlock(ctx))
	})

	t.Run("election", func(t *testing.T) {
		k := key(t, three)
		ea, err := a.Election(k)
		require.NoError(t, err)
		eb, err := b.Election(k)
		require.NoError(t, err)
		ld, err := ea.Campaign(ctx, "a")
		require.NoError(t, err)
		lead, err := eb.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Value: "a", Term: ld.Term()}, lead)
		require.NoError(t, ld.Resign(ctx))
		_, err = eb.Leader(ctx)
		require.ErrorIs(t, err, redlock.ErrNoLeader)
		dropFences(t, three, k)
	})
}
