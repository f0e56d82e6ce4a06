package nodetest

// node.Watcher: waking waiters on a release.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
)

func testWatch(t *testing.T, f Factory) {
	e := start(t, f)
	w, ok := e.n.(node.Watcher)
	if !ok {
		t.Skip("the node is not a node.Watcher")
	}
	k := node.Key{Name: "lk:watch", Token: "tok"}
	released := make(chan struct{}, 1)
	watch := w.Watch(k.Name, "", released)
	defer watch.Stop()
	select {
	case <-watch.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not become ready")
	}
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "a silent release")
	Announce(t, e.n, k.Name)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("an announced release was not seen")
	}
	select {
	case <-released:
		t.Fatal("two wake-ups for one announced release")
	case <-time.After(200 * time.Millisecond):
	}

	// The server drops the subscriber's connection: the watch
	// subscribes again, and a later release is seen.
	e.do("CLIENT", "KILL", "TYPE", "pubsub")
	seen := false
	for i := 0; i < 100 && !seen; i++ {
		Announce(t, e.n, k.Name)
		select {
		case <-released:
			seen = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.True(t, seen, "no release seen after the subscriber's connection was killed")

	watch.Stop()
	watch.Stop() // twice is fine
	Announce(t, e.n, k.Name)
	select {
	case <-released:
		t.Fatal("a release was sent after Stop")
	case <-time.After(200 * time.Millisecond):
	}

	// Watch never blocks on the network: on a blackholed server it
	// returns at once and never becomes ready.
	dead := newNode(t, f, Server{Addr: blackhole(t), Timeout: timeout}).(node.Watcher)
	start := time.Now()
	dw := dead.Watch(k.Name, "", released)
	assert.Less(t, time.Since(start), slack, "Watch blocked")
	select {
	case <-dw.Ready():
		t.Fatal("a watch on a silent server became ready")
	case <-time.After(300 * time.Millisecond):
	}
	dw.Stop()
}
