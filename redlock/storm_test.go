package redlock_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// TestCancelStormKeepsConnections: Lock calls whose contexts are
// cancelled while their commands are on the wire must not cost the nodes
// a new connection each. 24 goroutines make Lock calls on one contended
// key, each with a context cancelled 0-2 ms in, against three local
// redis-server processes, with the default options. A first storm of 480
// calls fills the pools; over the next 2400 calls the nodes must accept
// (INFO stats total_connections_received) fewer new connections than a
// tenth of the calls. It asserts a count, not a time; the worst PING
// latency during the storm is only logged.
func TestCancelStormKeepsConnections(t *testing.T) {
	var urls []string
	var admins []*redistest.Admin
	for range 3 {
		u := redistest.Start(t)
		urls, admins = append(urls, u), append(admins, redistest.Dial(t, u))
	}
	c, err := redlock.Dial(urls)
	require.NoError(t, err)
	defer c.Close()

	cancelStorm(c, 480)
	before := make([]int, len(admins))
	for i, a := range admins {
		before[i] = a.Connections(t)
	}
	// A PING every 5 ms on each node, on the admin connection.
	probing := make(chan struct{})
	var probes sync.WaitGroup
	worst := make([]time.Duration, len(admins))
	for i, a := range admins {
		probes.Add(1)
		go func() {
			defer probes.Done()
			for {
				select {
				case <-probing:
					return
				case <-time.After(5 * time.Millisecond):
				}
				start := time.Now()
				_, _ = a.Do(context.Background(), "PING")
				worst[i] = max(worst[i], time.Since(start))
			}
		}()
	}
	calls, granted := cancelStorm(c, 2400)
	require.NoError(t, c.Close()) // background calls and releases included
	close(probing)
	probes.Wait()

	total := 0
	for i, a := range admins {
		n := a.Connections(t) - before[i]
		t.Logf("node %d: %d new connections, worst PING %v", i, n, worst[i].Round(time.Microsecond))
		total += n
	}
	perNode := float64(total) / float64(len(admins))
	t.Logf("%d Lock calls (%d granted): %.0f new connections per node, %.1f%% of calls",
		calls, granted, perNode, 100*perNode/float64(calls))
	assert.Less(t, perNode, float64(calls)/10, "new connections per node")
}

// cancelStorm makes n Lock calls on key "storm" from 24 goroutines, each
// with a context cancelled 0-2 ms in (unlocking what it gets), and
// returns how many calls were made and how many were granted. It stops
// early after 20 s.
func cancelStorm(c *redlock.Client, n int64) (calls, granted int64) {
	var left, made, got atomic.Int64
	left.Store(n)
	stop := time.Now().Add(20 * time.Second) // a bound on the storm, not an assertion
	var wg sync.WaitGroup
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 && time.Now().Before(stop) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(rand.N(2*time.Millisecond), cancel)
				l, err := c.Lock(ctx, "storm")
				cancel()
				made.Add(1)
				if err == nil {
					got.Add(1)
					_ = l.Unlock(context.Background())
				}
			}
		}()
	}
	wg.Wait()
	return made.Load(), got.Load()
}
