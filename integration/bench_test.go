package integration_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/quorumlock/redlock/redlock"
)

// directURLs are the nodes without their proxies: an in-process toxiproxy
// would add its own latency and allocations to what is measured.
func directURLs() []string {
	out := make([]string, shared.Size())
	for i := range out {
		out[i] = "redis://" + shared.Backend.Upstream(i)
	}
	return out
}

// BenchmarkLockUnlock is one TryLock + Unlock cycle on five healthy nodes,
// one goroutine, a distinct key per cycle; and the same with Lock, which
// also passes the client's local queue of waiters. Its allocations per
// cycle are the hot path's cost: a regression shows here first.
func BenchmarkLockUnlock(b *testing.B) {
	b.Run("TryLock", func(b *testing.B) { benchCycle(b, "bench:", (*redlock.Client).TryLock) })
	b.Run("Lock", func(b *testing.B) { benchCycle(b, "bench:l:", (*redlock.Client).Lock) })
}

// lockFunc is TryLock or Lock.
type lockFunc func(*redlock.Client, context.Context, string, ...redlock.Option) (*redlock.Lock, error)

// BenchmarkLockUnlockFenced is BenchmarkLockUnlock with fenced locks: one
// more round trip (the confirm) per cycle.
func BenchmarkLockUnlockFenced(b *testing.B) {
	benchCycle(b, "bench:f:", (*redlock.Client).TryLock, redlock.WithFencing())
	// The fence counters outlive the locks by design; drop them.
	ctx := context.Background()
	for i := range shared.Size() {
		keys, err := shared.Direct(i).Keys(ctx, "bench:f:*")
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if _, err := shared.Direct(i).Command(ctx, "DEL", k); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func benchCycle(b *testing.B, prefix string, lock lockFunc, opts ...redlock.Option) {
	c, err := redlock.Dial(directURLs(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		l, err := lock(c, ctx, keys[i%len(keys)])
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlockParallel is the same cycle from GOMAXPROCS×4
// goroutines.
func BenchmarkLockUnlockParallel(b *testing.B) {
	c, err := redlock.Dial(directURLs())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:p:" + strconv.FormatInt(keySeq.Add(1), 10)
		for pb.Next() {
			l, err := c.TryLock(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
