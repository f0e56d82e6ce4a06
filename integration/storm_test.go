package integration_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// TestStormOfCancelledWaitersLeavesNothing: four clients, each with two
// goroutines per key on six keys, take the keys in a loop, each Lock call
// with a context of 1 to 30 ms, most of them cancelled while they wait.
// Then every client is closed. A call that gives up and a client that
// closes leave nothing of theirs on any node: no registration (the
// waiters hash), no reservation, no grant. So the nodes hold no key of
// the test's prefix once the last Close has returned.
func TestStormOfCancelledWaitersLeavesNothing(t *testing.T) {
	p := prefix(t, 5*time.Second)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = p + string(rune('a'+i))
	}
	clients := make([]*redlock.Client, 3)
	for i := range clients {
		c, err := dial(t, shared.URLs(), redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(250*time.Millisecond))
		require.NoError(t, err)
		clients[i] = c
	}
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for _, c := range clients {
		for _, key := range keys {
			{
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rand.IntN(150))*time.Millisecond)
						l, err := c.Lock(ctx, key)
						cancel()
						if err != nil {
							continue
						}
						mu.Lock()
						got++
						mu.Unlock()
						time.Sleep(2 * time.Millisecond)
						_ = l.Unlock(context.Background())
					}
				}()
			}
		}
	}
	wg.Wait()
	var closing sync.WaitGroup
	for _, c := range clients {
		closing.Add(1)
		go func() {
			defer closing.Done()
			if err := c.Close(); err != nil {
				t.Logf("close: %v", err)
			}
		}()
	}
	closing.Wait()
	left := leftovers(context.Background(), shared, p+"*")
	require.Empty(t, left, "keys left once every client is closed (%d locks taken)", got)
	t.Logf("%d locks taken", got)
}
