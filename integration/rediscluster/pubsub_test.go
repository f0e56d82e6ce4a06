package rediscluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/redlock"
)

// TestClusterWakesOnShardChannels: on a cluster whose masters have shard
// channels (Redis 7), a waiter subscribes to its key's channels with
// SSUBSCRIBE and the release that serves it announces with SPUBLISH,
// which stays on the slot's master, not with PUBLISH, which the cluster
// sends to every node: no classic channel of the key is subscribed, no
// PUBLISH runs, SPUBLISH does. For redigo clients (DialCluster), go-redis
// ones (goredis.DialCluster) and the two together, which must agree.
func TestClusterWakesOnShardChannels(t *testing.T) {
	dialers := map[string]func(*testing.T, *cluster.RedisCluster, ...redlock.Option) *redlock.Client{"redigo": dial, "go-redis": dialGoRedis}
	for _, pair := range [][2]string{{"redigo", "redigo"}, {"go-redis", "go-redis"}, {"go-redis", "redigo"}, {"redigo", "go-redis"}} {
		t.Run(pair[0]+" holds, "+pair[1]+" waits", func(t *testing.T) {
			ctx := context.Background()
			a, b := dialers[pair[0]](t, three), dialers[pair[1]](t, three)
			k := key(t, three)
			l, err := a.Lock(ctx, k)
			require.NoError(t, err)
			before := publishes(t, three)
			got := make(chan error, 1)
			go func() {
				l2, err := b.Lock(ctx, k)
				if err == nil {
					err = l2.Unlock(ctx)
				}
				got <- err
			}()
			require.Eventually(t, func() bool { return channels(t, three, "SHARDCHANNELS", k) >= b.Quorum() },
				5*time.Second, 5*time.Millisecond, "the waiter subscribes on shard channels of a majority of copies")
			// Subscribed, the waiter queues with its next attempt; a release
			// before that finds no one queued and frees the key unannounced.
			require.Eventually(t, func() bool {
				queued := 0
				for i := range three.Masters {
					if len(keysOn(three, i, "*"+k+":waiters")) > 0 {
						queued++
					}
				}
				return queued >= b.Quorum()
			}, 5*time.Second, 5*time.Millisecond, "the waiter queues on a majority of copies")
			assert.Zero(t, channels(t, three, "CHANNELS", k), "no classic channel of the key is subscribed")
			require.NoError(t, l.Unlock(ctx))
			select {
			case err := <-got:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter was not served")
			}
			after := publishes(t, three)
			assert.Greater(t, after["spublish"], before["spublish"], "the release announced on shard channels")
			assert.Equal(t, before["publish"], after["publish"], "and nothing with PUBLISH")
		})
	}
}

// channels counts, over rc's masters, the channels of key that have
// subscribers (PUBSUB CHANNELS or SHARDCHANNELS).
func channels(t *testing.T, rc *cluster.RedisCluster, kind, key string) int {
	n := 0
	for i := range rc.Masters {
		a := rc.Admin(i)
		v, err := a.Command(context.Background(), "PUBSUB", kind, "*"+key+"*")
		a.Close()
		require.NoError(t, err)
		if chs, ok := v.([]any); ok {
			n += len(chs)
		}
	}
	return n
}

// publishes sums the calls of PUBLISH and SPUBLISH over rc's masters and
// their replicas (INFO commandstats), by lower-case command name.
func publishes(t *testing.T, rc *cluster.RedisCluster) map[string]int {
	out := map[string]int{}
	for i := range rc.Size() {
		a := rc.Admin(i)
		v, err := a.Command(context.Background(), "INFO", "commandstats")
		a.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(fmt.Sprintf("%s", v), "\n") {
			for _, cmd := range []string{"publish", "spublish"} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
					calls, _, _ := strings.Cut(rest, ",")
					c, _ := strconv.Atoi(calls)
					out[cmd] += c
				}
			}
		}
	}
	return out
}
