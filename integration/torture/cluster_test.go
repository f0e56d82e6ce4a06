package torture_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/integration/history"
)

// TestHistoriesOnACluster runs the same seeded histories, faults and
// fatal oracles as TestHistories (the same HISTORY_* variables) on the
// copies of a DialCluster client (node.FollowSlot: every key under its
// copy's hash tag) over a Redis Cluster of five masters, for
// HISTORY_CLUSTER_BUDGET (default 20s, also under make torture). Faults are injected per command on each copy, and
// a restart wipes one copy's keys, as on independent nodes; nothing
// reshards or fails over (integration/rediscluster does).
func TestHistoriesOnACluster(t *testing.T) {
	copies := clusterCopies(t)
	o, cfg := runOptions(t, "HISTORY_CLUSTER_BUDGET", "20s")
	sum, failed := history.RunMany(context.Background(), copies, cfg, o)
	report(t, sum, failed)
}

// onCluster is the Redis Cluster of five masters the cluster tests share,
// started by the first (clusterCopies) and checked for leftovers and
// closed by TestMain (closeCluster).
var onCluster struct {
	once   sync.Once
	rc     *cluster.RedisCluster
	copies *history.CopyNodes
	err    error
}

// clusterCopies returns the copies of a DialCluster client of the shared
// Redis Cluster, starting it first.
func clusterCopies(t *testing.T) *history.CopyNodes {
	t.Helper()
	onCluster.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if onCluster.rc, onCluster.err = cluster.StartRedisCluster(ctx, 5, 0); onCluster.err == nil {
			onCluster.copies, onCluster.err = history.Copies(onCluster.rc)
		}
	})
	require.NoError(t, onCluster.err, "the Redis Cluster")
	return onCluster.copies
}

// closeCluster lists the keys left on the shared Redis Cluster's copies
// (none is a pass) and closes it, if it was started.
func closeCluster() (left []string) {
	if onCluster.copies != nil {
		for i := range onCluster.copies.Size() {
			keys, err := onCluster.copies.Direct(i).Keys(context.Background(), "*")
			if err != nil {
				left = append(left, fmt.Sprintf("copy %d: %v", i, err))
			}
			left = append(left, keys...)
		}
		onCluster.copies.Close()
	}
	if onCluster.rc != nil {
		_ = onCluster.rc.Close()
	}
	return left
}
