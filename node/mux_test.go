package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

// TestMultiplexOneConnection: calls from many goroutines at once share
// one connection, and each gets its own reply: every acquire of a key of
// its own is Done, every release of it Done, and the node accepted one
// connection for all of them.
func TestMultiplexOneConnection(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	defer r.Close()
	before := admin.Connections(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				k := node.NewKey(fmt.Sprintf("k:%d:%d", g, i), fmt.Sprintf("tok:%d:%d", g, i))
				res, err := r.Acquire(context.Background(), &k, time.Minute, i%2 == 0)
				if err == nil && res.Status != node.Done {
					err = fmt.Errorf("acquire %s: %v", k.Name, res.Status)
				}
				if err == nil {
					res, err = r.Release(context.Background(), &k, true)
				}
				if err == nil && res.Status != node.Done {
					err = fmt.Errorf("release %s: %v", k.Name, res.Status)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Equal(t, before+1, admin.Connections(t), "connections accepted for 1,280 calls")
	n, err := admin.Do(context.Background(), "DBSIZE")
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "keys left")
}

// TestMultiplexLateReplyIsDropped: a call whose deadline passes before
// its reply comes fails with ErrTimeout at its deadline; its reply is
// read and dropped when it comes (and recorded for LastLate), the next
// call on the connection gets its own reply, and the connection is kept.
func TestMultiplexLateReplyIsDropped(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	_, err = r.Acquire(bg, &node.Key{Name: "warm-up", Token: "w"}, time.Minute, false)
	require.NoError(t, err)
	before := admin.Connections(t)

	k := node.Key{Name: "k", Token: "tok"}
	stalled := stall(t, admin, 350*time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	t0 := time.Now()
	res, err := r.Acquire(ctx, &k, time.Minute, false)
	cancel()
	require.ErrorIs(t, err, node.ErrTimeout)
	assert.Equal(t, node.Unknown, res.Status)
	assert.Less(t, time.Since(t0), 200*time.Millisecond+750*time.Millisecond, "returned at its deadline, not with the reply")
	// Sent behind the late one: it must get the release's reply, not
	// the SET's "OK".
	res, err = r.Release(bg, &k, true)
	require.NoError(t, <-stalled)
	require.NoError(t, err)
	assert.Equal(t, node.Done, res.Status, "the SET applied late, then the release")
	at, rtt := r.LastLate()
	require.False(t, at.IsZero(), "the late reply is recorded")
	assert.Greater(t, rtt, 200*time.Millisecond)
	assert.Equal(t, before, admin.Connections(t), "new connections")
}

// TestMultiplexSilentConnectionIsReplaced: on a connection where replies
// are due and none has come for the node's Timeout, the node gives up on
// the connection; once the node answers again, the next call gets a new
// one and its reply.
func TestMultiplexSilentConnectionIsReplaced(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	_, err = r.Inspect(bg, "warm-up")
	require.NoError(t, err)
	before := admin.Connections(t)

	stalled := stall(t, admin, 800*time.Millisecond)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	_, err = r.Inspect(ctx, "k")
	cancel()
	require.ErrorIs(t, err, node.ErrTimeout)
	require.NoError(t, <-stalled)
	acquireRelease(t, r, 0)
	assert.Equal(t, before+1, admin.Connections(t), "the silent connection was replaced, once")
}

// TestMultiplexIdleCheck: a connection the node closed while it sat idle
// (a restart, the node's timeout setting) is found by the idle check and
// replaced before the call is sent on it: the call succeeds. The idle
// time outlasts Timeout, so the read deadline the last reply was read
// with has passed (it must not stop the check).
func TestMultiplexIdleCheck(t *testing.T) {
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{CheckIdle: 20 * time.Millisecond, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	_, err = r.Inspect(bg, "warm-up")
	require.NoError(t, err)
	_, err = admin.Do(bg, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond)
	acquireRelease(t, r, 0)
}

// TestMultiplexAfterAuthIdle: the dial's AUTH and SELECT leave a write
// deadline on the socket; a call made after it has passed (idle for
// longer than Timeout) is written all the same.
func TestMultiplexAfterAuthIdle(t *testing.T) {
	url := redistest.StartArgs(t, "--requirepass", "pw")
	r, err := node.Dial("redis://:pw@"+strings.TrimPrefix(url, "redis://")+"/2", node.Options{Timeout: 100 * time.Millisecond, CheckIdle: -1})
	require.NoError(t, err)
	defer r.Close()
	acquireRelease(t, r, 250*time.Millisecond)
}

// acquireRelease takes key "k" on r and, after pause, releases it; both
// must succeed and answer Done.
func acquireRelease(t *testing.T, r *node.Redis, pause time.Duration) {
	t.Helper()
	bg := context.Background()
	k := node.Key{Name: "k", Token: "tok"}
	res, err := r.Acquire(bg, &k, time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, node.Done, res.Status)
	time.Sleep(pause)
	res, err = r.Release(bg, &k, true)
	require.NoError(t, err, "a release %v after the acquire", pause)
	assert.Equal(t, node.Done, res.Status)
}
