package goredis_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/node/nodetest"
)

// numsub is PUBSUB NUMSUB of channel on the server behind admin.
func numsub(t *testing.T, admin *redistest.Admin, channel string) int64 {
	t.Helper()
	v, err := admin.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
	require.NoError(t, err)
	return v.([]any)[1].(int64)
}

func ready(t *testing.T, w node.Watch) {
	t.Helper()
	select {
	case <-w.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("subscription never confirmed")
	}
}

func released(t *testing.T, ch <-chan struct{}, want bool) {
	t.Helper()
	select {
	case <-ch:
		assert.True(t, want, "a wake-up without an announced release")
	case <-time.After(200 * time.Millisecond):
		assert.False(t, want, "no wake-up after an announced release")
	}
}

// stopped stops w, and checks that Stop returns at once and that the
// node's subscriber then ends soon, every part of it (w must be the
// node's last watch).
func stopped(t *testing.T, w node.Watch, within time.Duration) {
	t.Helper()
	start := time.Now()
	w.Stop()
	assert.Less(t, time.Since(start), 50*time.Millisecond, "Stop waited")
	select {
	case <-goredis.WatchDone(w):
	case <-time.After(within):
		t.Fatalf("the subscriber did not end within %v of the last Stop", within)
	}
	w.Stop() // again: a no-op
}

// clients is how many connections the server behind admin has.
// publishWakes publishes a release of "k" and reports whether woke
// received within 50 ms.
func publishWakes(t *testing.T, admin *redistest.Admin, woke <-chan struct{}) bool {
	t.Helper()
	_, err := admin.Do(context.Background(), "PUBLISH", node.ReleaseChannel("k"), "")
	require.NoError(t, err)
	select {
	case <-woke:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

func clients(t *testing.T, admin *redistest.Admin) int {
	t.Helper()
	v, err := admin.Do(context.Background(), "CLIENT", "LIST")
	require.NoError(t, err)
	return strings.Count(string(v.([]byte)), "\n")
}

// pubsubClients is how many connections with subscriptions the server
// behind admin has.
func pubsubClients(t *testing.T, admin *redistest.Admin) int {
	t.Helper()
	v, err := admin.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub")
	require.NoError(t, err)
	return strings.Count(string(v.([]byte)), "\n")
}

// TestWatch: a watch is ready once subscribed, wakes on each announced
// release (and not on a silent one, nor on another key's); a node's
// watches share one connection and one subscription per channel; after
// Stop a watch sends nothing, its channel is unsubscribed with its last
// watch, and the last watch's Stop ends the subscriber's goroutines,
// leaving its connection idle for the next watch, until the client is
// closed.
func TestWatch(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		addr, admin := server(t)
		c := client(t, addr, m)
		n := goredis.New(c)
		leak := goleak.IgnoreCurrent()
		bg := context.Background()
		woke, woke2 := make(chan struct{}, 1), make(chan struct{}, 1)
		w := n.(node.Watcher).Watch("k", "", woke)
		w2 := n.(node.Watcher).Watch("k", "", woke2)
		other := n.(node.Watcher).Watch("other", "", make(chan struct{}, 1))
		ready(t, w)
		ready(t, w2)
		ready(t, other)
		assert.Equal(t, int64(1), numsub(t, admin, node.ReleaseChannel("k")), "one subscription per channel")
		assert.Equal(t, 1, pubsubClients(t, admin), "one connection per node")

		k := node.Key{Name: "k", Token: "t"}
		for range 2 {
			nodetest.Announce(t, n, "k")
			released(t, woke, true)
			released(t, woke2, true)
		}
		_, err := n.Acquire(bg, &k, time.Minute, false)
		require.NoError(t, err)
		_, err = n.Release(bg, &k, false)
		require.NoError(t, err)
		released(t, woke, false)

		// Two releases while nobody reads: one wake-up pending, no block.
		for range 2 {
			_, err = admin.Do(bg, "PUBLISH", node.ReleaseChannel("k"), "")
			require.NoError(t, err)
		}
		time.Sleep(200 * time.Millisecond) // both delivered
		require.Len(t, woke, 1)
		require.Len(t, woke2, 1)
		<-woke
		<-woke2

		// A stopped watch sends nothing; the channel stays subscribed
		// for the other.
		w.Stop()
		w.Stop()
		_, err = admin.Do(bg, "PUBLISH", node.ReleaseChannel("k"), "")
		require.NoError(t, err)
		released(t, woke2, true)
		released(t, woke, false)
		assert.Equal(t, int64(1), numsub(t, admin, node.ReleaseChannel("k")))

		// A channel's last watch gone: unsubscribed; a new watch on it is
		// ready once subscribed again.
		w2.Stop()
		require.Eventually(t, func() bool { return numsub(t, admin, node.ReleaseChannel("k")) == 0 }, time.Second, 5*time.Millisecond,
			"unsubscribed at the last Stop")
		w3 := n.(node.Watcher).Watch("k", "", woke)
		ready(t, w3)
		_, err = admin.Do(bg, "PUBLISH", node.ReleaseChannel("k"), "")
		require.NoError(t, err)
		released(t, woke, true)
		released(t, woke2, false)
		w3.Stop()

		stopped(t, other, time.Second)
		require.Eventually(t, func() bool { return numsub(t, admin, node.ReleaseChannel("other")) == 0 }, time.Second, 5*time.Millisecond,
			"unsubscribed at the last Stop")
		goleak.VerifyNone(t, leak)

		// The connection stays, idle, for the next watch: no new one.
		before := admin.Connections(t)
		w4 := n.(node.Watcher).Watch("k", "", woke)
		ready(t, w4)
		_, err = admin.Do(bg, "PUBLISH", node.ReleaseChannel("k"), "")
		require.NoError(t, err)
		released(t, woke, true)
		stopped(t, w4, time.Second)
		assert.Equal(t, before, admin.Connections(t), "new connections")
		goleak.VerifyNone(t, leak)

		// Closed with the client: only the admin connection is left.
		require.NoError(t, c.Close())
		require.Eventually(t, func() bool { return clients(t, admin) == 1 }, time.Second, 5*time.Millisecond,
			"the idle connection closed with the client")
	})
}

// TestWatchSurvivesAKilledConnection: go-redis dials and subscribes
// again after the server drops the subscriber's connection.
func TestWatchSurvivesAKilledConnection(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		addr, admin := server(t)
		n := goredis.New(client(t, addr, m))
		woke := make(chan struct{}, 1)
		w := n.(node.Watcher).Watch("k", "", woke)
		defer stopped(t, w, time.Second)
		ready(t, w)
		_, err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			// Subscribed again, and the wake-up gets through.
			return numsub(t, admin, node.ReleaseChannel("k")) == 1 && publishWakes(t, admin, woke)
		}, 5*time.Second, 10*time.Millisecond)
	})
}

// TestWatchNeverBlocks: Watch and Stop return at once however the node
// fails: down, or accepting and never answering (where go-redis' own
// timeouts are long); the watch is never ready, and its goroutine ends
// within the client's own bounds of a connection attempt in progress.
func TestWatchNeverBlocks(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		for _, addr := range []string{redistest.DeadAddr(t), blackhole(t)} {
			c := client(t, addr, m, func(o *redis.Options) {
				o.DialTimeout = 300 * time.Millisecond
				o.ReadTimeout = 300 * time.Millisecond
			})
			n := goredis.NewWithOptions(c, goredis.Options{Timeout: 200 * time.Millisecond})
			start := time.Now()
			w := n.(node.Watcher).Watch("k", "", make(chan struct{}, 1))
			assert.Less(t, time.Since(start), 50*time.Millisecond, "Watch waited")
			select {
			case <-w.Ready():
				t.Fatal("ready without a server")
			case <-time.After(100 * time.Millisecond):
			}
			stopped(t, w, time.Second)
		}
	})
}

// TestWatchWithoutSubscribeRights: a user who may not subscribe never
// gets a ready watch, and Stop still ends it.
func TestWatchWithoutSubscribeRights(t *testing.T) {
	addr, admin := server(t)
	_, err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "resetchannels", "+@all")
	require.NoError(t, err)
	c := client(t, addr, modes[1], func(o *redis.Options) { o.Username, o.Password = "locker", "pw" })
	w := goredis.New(c).(node.Watcher).Watch("k", "", make(chan struct{}, 1))
	select {
	case <-w.Ready():
		t.Error("a subscription without the rights was confirmed")
	case <-time.After(200 * time.Millisecond):
	}
	stopped(t, w, 2*time.Second) // the refusal's backoff delays the last UNSUBSCRIBE's reply
}

// TestWatchSurvivesASilentConnection: a subscriber connection that stops
// answering (here the server is paused) is noticed by an unanswered PING
// and replaced; the watch gets wake-ups again once the server answers.
func TestWatchSurvivesASilentConnection(t *testing.T) {
	goredis.SetWatchIdle(t, 100*time.Millisecond)
	eachMode(t, func(t *testing.T, m mode) {
		addr, admin := server(t)
		c := client(t, addr, m, func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond })
		n := goredis.NewWithOptions(c, goredis.Options{Timeout: 300 * time.Millisecond})
		woke := make(chan struct{}, 1)
		w := n.(node.Watcher).Watch("k", "", woke)
		defer stopped(t, w, time.Second)
		ready(t, w)
		before := admin.Connections(t)
		_, err := admin.Do(context.Background(), "CLIENT", "PAUSE", "600", "ALL")
		require.NoError(t, err)
		time.Sleep(700 * time.Millisecond)
		require.Eventually(t, func() bool { return publishWakes(t, admin, woke) }, 5*time.Second, 10*time.Millisecond)
		assert.Greater(t, admin.Connections(t), before, "a new connection")
	})
}

// TestWatchChurn: watches made and stopped at once from many goroutines,
// on a few keys, while releases are announced: every watch becomes ready,
// and when the last one has stopped, nothing is left subscribed nor
// running.
func TestWatchChurn(t *testing.T) {
	addr, admin := server(t)
	n := goredis.New(client(t, addr, modes[1]))
	leak := goleak.IgnoreCurrent()
	keys := []string{"a", "b", "c"}
	stop := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			_, err := admin.Do(context.Background(), "PUBLISH", node.ReleaseChannel(keys[i%len(keys)]), "")
			assert.NoError(t, err)
		}
	}()
	var wg sync.WaitGroup
	var last node.Watch
	var mu sync.Mutex
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				w := n.(node.Watcher).Watch(keys[(g+i)%len(keys)], "", make(chan struct{}, 1))
				if i%3 == 0 {
					select {
					case <-w.Ready():
					case <-time.After(5 * time.Second):
						t.Error("a watch never became ready")
					}
				}
				mu.Lock()
				last = w
				mu.Unlock()
				w.Stop()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-published
	select {
	case <-goredis.WatchDone(last):
	case <-time.After(2 * time.Second):
		t.Fatal("the subscriber did not end after the last Stop")
	}
	for _, k := range keys { // once the server has seen the connection close
		require.Eventually(t, func() bool { return numsub(t, admin, node.ReleaseChannel(k)) == 0 }, time.Second, 5*time.Millisecond)
	}
	goleak.VerifyNone(t, leak)
}

// TestWatchChurnSilentNode: watches come and go on a node that accepts
// and never answers, so that the subscriber's last UNSUBSCRIBE fails or
// times out while new watches arrive: nothing breaks, and once the last
// watch has stopped, the subscriber ends.
func TestWatchChurnSilentNode(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		c := client(t, blackhole(t), m, func(o *redis.Options) {
			o.DialTimeout = 100 * time.Millisecond
			o.ReadTimeout = 100 * time.Millisecond
			o.WriteTimeout = 100 * time.Millisecond
		})
		n := goredis.NewWithOptions(c, goredis.Options{Timeout: 30 * time.Millisecond})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var last node.Watch
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					w := n.(node.Watcher).Watch([]string{"a", "b"}[(g+i)%2], "", make(chan struct{}, 1))
					mu.Lock()
					last = w
					mu.Unlock()
					time.Sleep(time.Duration((g*7+i*13)%10) * time.Millisecond)
					w.Stop()
					// Often no watch at all: the subscriber drains, and a
					// watch may come while it does.
					time.Sleep(time.Duration((g*5+i*11)%40) * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		select {
		case <-goredis.WatchDone(last):
		case <-time.After(3 * time.Second):
			t.Fatal("the subscriber did not end after the last Stop")
		}
	})
}
