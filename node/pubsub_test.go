package node_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/node/nodetest"
)

// numsub is PUBSUB NUMSUB of channel on the server behind admin.
func numsub(t *testing.T, admin *redistest.Admin, channel string) int64 {
	t.Helper()
	v, err := admin.Do(context.Background(), "PUBSUB", "NUMSUB", channel)
	require.NoError(t, err)
	arr := v.([]any)
	return arr[1].(int64)
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

// TestWatchCountsReferences: one subscription per channel per node,
// however many watches; it lingers after the last watch (a new watch is
// ready at once), is gone after the linger, and at Close.
func TestWatchCountsReferences(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	ch := node.ReleaseChannel("k")
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	wa := r.Watch("k", "", a)
	ready(t, wa)
	wb := r.Watch("k", "", b)
	ready(t, wb) // already confirmed: at once
	assert.Equal(t, int64(1), numsub(t, admin, ch))

	bg := context.Background()
	k := node.Key{Name: "k", Token: "t"}
	nodetest.Announce(t, r, "k")
	released(t, a, true)
	released(t, b, true)

	_, err = r.Acquire(bg, &k, time.Minute, false)
	require.NoError(t, err)
	_, err = r.Release(bg, &k, false) // a rollback: not announced
	require.NoError(t, err)
	released(t, a, false)

	wa.Stop()
	wa.Stop()
	assert.Equal(t, int64(1), numsub(t, admin, ch), "b still watches")
	wb.Stop()
	assert.Equal(t, 1, r.Lingering())
	assert.Equal(t, int64(1), numsub(t, admin, ch), "lingers after its last watch")
	wc := r.Watch("k", "", a)
	select {
	case <-wc.Ready():
	default:
		t.Fatal("a watch on a lingering channel is not ready at once")
	}
	assert.Equal(t, 0, r.Lingering())
	nodetest.Announce(t, r, "k")
	released(t, a, true) // the lingering subscription was live

	r.SetLinger(50 * time.Millisecond)
	wc.Stop()
	time.Sleep(100 * time.Millisecond)
	// Any message makes the subscriber sweep: the linger is over.
	nodetest.Announce(t, r, "k")
	require.Eventually(t, func() bool { return numsub(t, admin, ch) == 0 }, 5*time.Second, 10*time.Millisecond,
		"unsubscribed after the linger")
	assert.Equal(t, 0, r.Lingering())

	wd := r.Watch("k", "", a)
	ready(t, wd)
	require.NoError(t, r.Close())
	require.Eventually(t, func() bool { return numsub(t, admin, ch) == 0 }, 5*time.Second, 10*time.Millisecond,
		"a subscription outlived Close")
}

// watchedServer starts a server and returns a node on it, closed at the
// end of the test, and an admin connection to it.
func watchedServer(t *testing.T) (*node.Redis, *redistest.Admin) {
	t.Helper()
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, admin
}

// TestWatchSurvivesAKilledConnection: CLIENT KILL TYPE pubsub drops the
// subscriber; it reconnects, subscribes again and wakes its watch.
func TestWatchSurvivesAKilledConnection(t *testing.T) {
	r, admin := watchedServer(t)
	woke := make(chan struct{}, 1)
	w := r.Watch("k", "", woke)
	defer w.Stop()
	ready(t, w)
	_, err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return numsub(t, admin, node.ReleaseChannel("k")) == 1 }, 5*time.Second, 10*time.Millisecond,
		"subscribed again")
	nodetest.Announce(t, r, "k")
	released(t, woke, true)
}

// TestReleaseWithoutPublishRights: an ACL user who may not publish still
// releases (the script's publish fails quietly), and a watch that may not
// subscribe is never ready.
func TestReleaseWithoutPublishRights(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	_, err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "resetchannels", "+@all")
	require.NoError(t, err)
	r, err := node.Dial("redis://locker:pw@"+url[len("redis://"):], node.Options{})
	require.NoError(t, err)
	defer r.Close()
	woke := make(chan struct{}, 1)
	w := r.Watch("k", "", woke)
	defer w.Stop()
	assert.Equal(t, node.Done, nodetest.Announce(t, r, "k").Status, "released, the publish failing quietly")
	select {
	case <-w.Ready():
		t.Error("a subscription without the rights was confirmed")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestAcquireReportsTheHoldersTTL: a Taken acquire asked for it tells how
// long the holder's key has left, in the same round trip; a plain one
// does not pay for it.
func TestAcquireReportsTheHoldersTTL(t *testing.T) {
	url := redistest.Start(t)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	_, err = r.Acquire(bg, &node.Key{Name: "k", Token: "holder"}, 5*time.Second, false)
	require.NoError(t, err)
	res, err := r.Acquire(bg, &node.Key{Name: "k", Token: "me"}, time.Minute, true)
	require.NoError(t, err)
	assert.Equal(t, node.Taken, res.Status)
	assert.InDelta(t, 5*time.Second, res.TTL, float64(time.Second))
	k := node.NewKey("k", "me")
	res, err = r.Acquire(bg, &k, time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, node.Result{Status: node.Taken}, res, "SET NX GET: taken, TTL unknown")
}

// TestWatchLingersBounded: at most 64 channels per node stay subscribed
// without watches.
func TestWatchLingersBounded(t *testing.T) {
	url := redistest.Start(t)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	released := make(chan struct{}, 1)
	var ws []node.Watch
	for i := range 70 {
		w := r.Watch("k"+strconv.Itoa(i), "", released)
		ws = append(ws, w)
	}
	for _, w := range ws {
		ready(t, w)
		w.Stop()
	}
	assert.Equal(t, 64, r.Lingering())
}

// TestWatchLingeringGoesWithTheConnection: a reconnect subscribes again
// to the channels that have watches, not to those that only lingered.
func TestWatchLingeringGoesWithTheConnection(t *testing.T) {
	r, admin := watchedServer(t)
	woke := make(chan struct{}, 1)
	kept, gone := r.Watch("kept", "", woke), r.Watch("gone", "", woke)
	defer kept.Stop()
	ready(t, kept)
	ready(t, gone)
	gone.Stop()
	require.Equal(t, 1, r.Lingering())
	_, err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return numsub(t, admin, node.ReleaseChannel("kept")) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the watched channel is subscribed again")
	assert.Equal(t, int64(0), numsub(t, admin, node.ReleaseChannel("gone")), "the lingering one is not")
	assert.Equal(t, 0, r.Lingering())
}
