package node_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
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
	r, admin, before := connected(t, 200*time.Millisecond)
	stalled := stall(t, admin, 800*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := r.Inspect(ctx, "k")
	cancel()
	require.ErrorIs(t, err, node.ErrTimeout)
	require.NoError(t, <-stalled)
	acquireRelease(t, r, 0)
	assert.Equal(t, before+1, admin.Connections(t), "the silent connection was replaced, once")
}

// TestMultiplexClosedWhileIdle: a connection the node closed while it
// sat idle (a restart, the node's timeout setting) is seen closed by the
// reader and replaced before a call is put on it: the call succeeds, on
// the one new connection. The idle time outlasts Timeout: no watchdog
// runs while no reply is due.
func TestMultiplexClosedWhileIdle(t *testing.T) {
	r, admin, before := connected(t, 100*time.Millisecond)
	_, err := admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	require.NoError(t, err)
	time.Sleep(250 * time.Millisecond)
	acquireRelease(t, r, 0)
	assert.Equal(t, before+1, admin.Connections(t), "the closed connection was replaced, once")
}

// TestMultiplexIdleKeepsConnection: a connection idle for longer than
// Timeout is not taken for a silent one: the next calls go on it.
func TestMultiplexIdleKeepsConnection(t *testing.T) {
	r, admin, before := connected(t, 50*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	acquireRelease(t, r, 120*time.Millisecond)
	assert.Equal(t, before, admin.Connections(t), "no new connection")
}

// TestMultiplexUnaskedReplyWhileIdle: bytes that arrive on an idle
// connection with no command waiting (here a server that answers a
// command and then, unasked, once more) are not taken for the next
// command's reply: the connection is dropped when they come, and the
// next call goes on a new one and gets its own answer.
func TestMultiplexUnaskedReplyWhileIdle(t *testing.T) {
	var conns atomic.Int32
	addr := redistest.Serve(t, func(c net.Conn) {
		first := conns.Add(1) == 1
		br := bufio.NewReader(c)
		for {
			args, err := readCommand(br)
			if err != nil {
				return
			}
			reply := "$-1\r\n" // SET ... NX GET: set
			if args[0] == "EVALSHA" {
				reply = "+OK\r\n" // acquire.lua: set (the first acquire on a connection)
			}
			if _, err := c.Write([]byte(reply)); err != nil {
				return
			}
			if first {
				time.Sleep(20 * time.Millisecond)
				c.Write([]byte("$5\r\nother\r\n")) // what a refusal would say
				first = false
			}
		}
	})
	r, err := node.Dial("redis://"+addr, node.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	res, err := r.Acquire(bg, &node.Key{Name: "a", Token: "t"}, time.Minute, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)
	time.Sleep(80 * time.Millisecond) // less than the pool's CheckIdle: no look at the socket would be made

	res, err = r.Acquire(bg, &node.Key{Name: "b", Token: "t"}, time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, node.Done, res.Status, "the unasked reply was not taken for this one")
	assert.EqualValues(t, 2, conns.Load(), "the connection was replaced")
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

// connected starts a server and a node on it with timeout, whose shared
// connection is open (a warm-up call answered); it returns the node, an
// admin connection to the server and the connections the server had
// accepted by then. The node is closed when the test ends.
func connected(t *testing.T, timeout time.Duration) (*node.Redis, *redistest.Admin, int) {
	t.Helper()
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	r, err := node.Dial(url, node.Options{Timeout: timeout})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	_, err = r.Inspect(context.Background(), "warm-up")
	require.NoError(t, err)
	return r, admin, admin.Connections(t)
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

// TestMultiplexWatchdogFromSend: the watchdog of a connection that turns
// busy counts from when the command is sent, not from when its call
// began: the first call waits for a slow dial (AUTH answered after most
// of Timeout) and is answered a while later, and a second call, sent
// meanwhile with a full Timeout of its own, is not failed by a deadline
// the first call's wait had used up.
func TestMultiplexWatchdogFromSend(t *testing.T) {
	addr := redistest.Serve(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		first := true
		for {
			args, err := readCommand(br)
			if err != nil {
				return
			}
			switch {
			case args[0] == "AUTH":
				time.Sleep(150 * time.Millisecond)
				c.Write([]byte("+OK\r\n"))
				continue
			case args[0] == "PING": // the check behind a call that gave up
				c.Write([]byte(fmt.Sprintf("$%d\r\n%s\r\n", len(args[1]), args[1])))
				continue
			case first:
				first = false
				time.Sleep(100 * time.Millisecond)
			}
			if args[0] == "EVALSHA" {
				c.Write([]byte("+OK\r\n")) // acquire.lua: set (the first acquire on a connection)
				continue
			}
			c.Write([]byte("$-1\r\n"))
		}
	})
	r, err := node.Dial("redis://:pw@"+addr, node.Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := r.Acquire(bg, &node.Key{Name: "a", Token: "t"}, time.Minute, false)
		first <- err
	}()
	time.Sleep(160 * time.Millisecond) // the dial is done, the first command sent
	res, err := r.Acquire(bg, &node.Key{Name: "b", Token: "t"}, time.Minute, false)
	require.NoError(t, err)
	assert.Equal(t, node.Done, res.Status)
	<-first // past its own deadline: dial and reply took longer than Timeout
}

// TestMultiplexLostCommandCostsTheConnection: a command lost on the way
// while the connection stays open (a proxy that dropped its bytes) is
// never answered, and the node's next reply would go to it: every later
// caller would get the reply of the command before its own, or time
// out. The check a caller that gives up sends behind its command finds
// the replies out of step and breaks the connection: the next call gets
// a new one, and its own reply.
func TestMultiplexLostCommandCostsTheConnection(t *testing.T) {
	var (
		mu    sync.Mutex
		lost  bool // the first release was lost
		conns atomic.Int32
	)
	addr := redistest.Serve(t, func(c net.Conn) {
		conns.Add(1)
		r := bufio.NewReader(c)
		for {
			args, err := readCommand(r)
			if err != nil {
				return
			}
			var out string
			switch {
			case strings.ToUpper(args[0]) == "SET":
				out = "$-1\r\n" // set
			case strings.ToUpper(args[0]) == "PING":
				out = fmt.Sprintf("$%d\r\n%s\r\n", len(args[1]), args[1])
			case strings.ToUpper(args[0]) == "EVALSHA" && args[1] == node.LuaScripts().Acquire.Hash:
				out = "+OK\r\n" // set (the first acquire on a connection is the script)
			case strings.ToUpper(args[0]) == "EVALSHA":
				mu.Lock()
				drop := !lost
				lost = true
				mu.Unlock()
				if drop {
					continue // never arrived
				}
				out = ":1\r\n" // released
			default:
				out = "-ERR unexpected\r\n"
			}
			if _, err := c.Write([]byte(out)); err != nil {
				return
			}
		}
	})
	r, err := node.Dial("redis://"+addr, node.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer r.Close()
	bg := context.Background()
	k := node.Key{Name: "k", Token: "tok"}
	res, err := r.Acquire(bg, &k, time.Minute, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)

	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	_, err = r.Release(ctx, &k, true)
	cancel()
	require.ErrorIs(t, err, node.ErrTimeout, "the lost release")
	// A call sent before the check's reply came is on the connection
	// out of step: it fails, outcome unknown, as a timeout.
	failed := 0
	for i := range 4 {
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		res, err = r.Release(ctx, &k, true)
		cancel()
		if err != nil && failed == 0 && i == 0 {
			require.ErrorIs(t, err, node.ErrTimeout)
			failed++
			continue
		}
		require.NoError(t, err, "release %d after the lost one", i)
		assert.Equal(t, node.Done, res.Status, "release %d after the lost one: its own reply", i)
	}
	assert.EqualValues(t, 2, conns.Load(), "the connection out of step was replaced, once")
}
