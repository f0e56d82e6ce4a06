package rediscluster_test

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkClusterLockUnlock: one Lock+Unlock cycle of a DialCluster
// client on the shared 3-master cluster, a distinct key per cycle.
func BenchmarkClusterLockUnlock(b *testing.B) {
	c := dialB(b)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		l, err := c.Lock(ctx, fmt.Sprintf("bench:%d", i))
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
