// Package nodetest checks that a node.Node keeps the contract a Redlock
// client relies on, against real redis-server processes it starts itself
// (redis-server must be on PATH, or named by $REDIS_SERVER; the tests
// are skipped without it). Run it from a driver's tests, the way
// testing/fstest checks a file system:
//
//	func TestConformance(t *testing.T) {
//		nodetest.Run(t, func(t *testing.T, s nodetest.Server) node.Node {
//			c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, ...})
//			t.Cleanup(func() { c.Close() })
//			return mydriver.New(c)
//		})
//	}
//
// # The rules for a driver
//
// These are what Run checks; node.Redis (redigo) and the goredis module
// pass them (goredis over clients with DialerRetries 1: go-redis' default
// of five dials 100 ms apart turns a refused port into a timeout).
//
//   - Run the scripts of node.LuaScripts (EVALSHA, then EVAL on NOSCRIPT,
//     within the same call's deadline) and read their replies with
//     node.ParseAcquire, ParseStatus and ParseInspect. A plain Acquire
//     (holderTTL false) may instead send SET key token NX PX ttl GET and
//     read it with node.ParseSet. Never emulate a
//     script with several commands: the token check and the write must be
//     one atomic step.
//   - Bound every call by its context's deadline: waiting for a pooled
//     connection, dialling, TLS, AUTH, writing and reading. A server that
//     accepts and never answers must cost no more than the deadline. A
//     call whose context has no deadline is bounded by the driver's own
//     timeout. A timed-out call answers node.Unknown and an error that
//     wraps node.ErrTimeout; its late reply must never be taken for the
//     reply of a later call on the same connection. Send no command that
//     changes a key after its call has returned: one queued behind a
//     slow handshake and sent later would apply after its caller was
//     told it failed, and after the caller's rollback.
//   - Report failures as *node.Error values (node.Fail) whose kind
//     tells down (ErrTimeout, ErrUnreachable) from refused (ErrAuth,
//     ErrTLS, ErrProtocol) and ErrClosed after Close; never put a
//     password in an error, in Addr, or in what fmt prints of the node.
//   - Send node.Key.Tomb to release.lua as ARGV[7], in milliseconds
//     (ARGV[4] to ARGV[6] "0", "0", "" where the release does not
//     requeue): a release after a command that may run late leaves a
//     tombstone (node.TombKey) where it does not find its token, and no
//     script sets a key to a token that has one.
//   - Pass keys and tokens as binary-safe strings.
//   - Be safe for concurrent use.
//   - Optional interfaces (node.Inspector, node.Watcher, node.Fencer,
//     io.Closer) are checked when the node offers them. A Watch must
//     return at once, become Ready when the server confirmed the
//     subscription, survive a dropped connection, and send nothing after
//     Stop.
//
// A driver whose client retries a command after a lost reply (go-redis
// does, up to MaxRetries) is safe with these scripts: an acquire that
// finds its own token answers Done, and extend and release are
// idempotent, though a retried release that finds the key gone answers
// Absent.
package nodetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

// Server is a Redis server Run started, as a Factory must reach it.
type Server struct {
	// Addr is the server's host:port, on loopback.
	Addr string
	// Username is the ACL user, "" for the default user.
	Username string
	// Password is the password to send, "" for none.
	Password string
	// TLS, when not nil, means the server speaks only TLS on Addr: dial
	// with this configuration (which may or may not trust the server's
	// certificate: Run checks both).
	TLS *tls.Config
	// Timeout is the timeout the node must apply to a call whose context
	// has no deadline.
	Timeout time.Duration
}

// Factory makes the node under test for s. It may call t.Skip (say, a
// driver without TLS), and registers with t.Cleanup whatever it must
// close besides the node: Run closes the node itself when it is an
// io.Closer.
type Factory func(t *testing.T, s Server) node.Node

// Run checks the node contract (see the package comment) on nodes made
// by f, each in a subtest.
func Run(t *testing.T, f Factory) {
	t.Run("Acquire", func(t *testing.T) { testAcquire(t, f) })
	t.Run("Extend", func(t *testing.T) { testExtend(t, f) })
	t.Run("Release", func(t *testing.T) { testRelease(t, f) })
	t.Run("Inspect", func(t *testing.T) { testInspect(t, f) })
	t.Run("BinarySafe", func(t *testing.T) { testBinarySafe(t, f) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, f) })
	t.Run("NoScript", func(t *testing.T) { testNoScript(t, f) })
	t.Run("Blackhole", func(t *testing.T) { testBlackhole(t, f) })
	t.Run("Stalled", func(t *testing.T) { testStalled(t, f) })
	t.Run("NoLateSend", func(t *testing.T) { testNoLateSend(t, f) })
	t.Run("Unreachable", func(t *testing.T) { testUnreachable(t, f) })
	t.Run("NotRedis", func(t *testing.T) { testNotRedis(t, f) })
	t.Run("Auth", func(t *testing.T) { testAuth(t, f) })
	t.Run("TLS", func(t *testing.T) { testTLS(t, f) })
	t.Run("Watch", func(t *testing.T) { testWatch(t, f) })
	t.Run("Fence", func(t *testing.T) { testFence(t, f) })
	t.Run("Handoff", func(t *testing.T) { testHandoff(t, f) })
	t.Run("Queue", func(t *testing.T) { testQueue(t, f) })
	t.Run("FencedQueue", func(t *testing.T) { testFencedQueue(t, f) })
	t.Run("SharedQueue", func(t *testing.T) { testSharedQueue(t, f) })
	t.Run("Grant", func(t *testing.T) { testGrant(t, f) })
	t.Run("LeaveByCall", func(t *testing.T) { testLeaveByCall(t, f) })
	t.Run("LeaveAll", func(t *testing.T) { testLeaveAll(t, f) })
	t.Run("Shared", func(t *testing.T) { testShared(t, f) })
	t.Run("SharedAlone", func(t *testing.T) { testSharedAlone(t, f) })
	t.Run("Tomb", func(t *testing.T) { testTomb(t, f) })
	t.Run("Close", func(t *testing.T) { testClose(t, f) })
}

// timeout is the Server.Timeout Run gives factories.
const timeout = time.Second

// slack is what a bounded call may take beyond its deadline: scheduling
// on a loaded two-core machine under -race. It is a bound on a contract
// ("returns by its deadline"), far above any real cost, not a speed test.
const slack = 750 * time.Millisecond

// env is one subtest's server, admin connection and node.
type env struct {
	t     *testing.T
	admin *redistest.Admin
	n     node.Node
	addr  string // the server's host:port
	ctx   context.Context
}

// start starts a server with args, and makes a node for it with f.
func start(t *testing.T, f Factory, args ...string) *env {
	t.Helper()
	u := redistest.StartArgs(t, args...)
	addr := hostPort(t, u)
	admin := redistest.Dial(t, u)
	t.Cleanup(func() {
		// Every subtest releases or deletes what it made: a key left
		// means a command the driver was told had failed (or not sent)
		// did run.
		n, err := admin.Do(context.Background(), "DBSIZE")
		if assert.NoError(t, err) {
			assert.Equal(t, int64(0), n, "keys left on the server")
		}
	})
	return &env{t: t, admin: admin, n: newNode(t, f, Server{Addr: addr, Timeout: timeout}), addr: addr, ctx: context.Background()}
}

// newNode calls f, and closes the node at the end of the test when it is an
// io.Closer.
func newNode(t *testing.T, f Factory, s Server) node.Node {
	t.Helper()
	n := f(t, s)
	require.NotNil(t, n, "the factory returned no node")
	if c, ok := n.(io.Closer); ok {
		t.Cleanup(func() { _ = c.Close() })
	}
	return n
}

func hostPort(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	return u.Host
}

// do runs an admin command.
func (e *env) do(args ...any) any {
	e.t.Helper()
	v, err := e.admin.Do(e.ctx, args...)
	require.NoError(e.t, err, "%v", args)
	return v
}

// get returns the key's value, "" when absent.
func (e *env) get(key string) string {
	e.t.Helper()
	v, _ := e.do("GET", key).([]byte)
	return string(v)
}

// pttl returns the key's PTTL as the server sees it.
func (e *env) pttl(key string) time.Duration {
	e.t.Helper()
	v, _ := e.do("PTTL", key).(int64)
	return time.Duration(v) * time.Millisecond
}

// result checks a call's outcome.
func (e *env) result(res node.Result, err error, want node.Status, what string) node.Result {
	e.t.Helper()
	require.NoError(e.t, err, what)
	require.Equal(e.t, want, res.Status, what)
	return res
}

func testAcquire(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:acquire", Token: "tok-1"}
	res := e.resultOf(e.n.Acquire(e.ctx, &k, 10*time.Second, false))(node.Done, "acquire of a free key")
	assert.Equal(t, node.Result{Status: node.Done}, res, "a plain acquire reports no TTL and no fence")
	assert.Equal(t, "tok-1", e.get(k.Name))
	assert.InDelta(t, 10*time.Second, e.pttl(k.Name), float64(time.Second), "the key lives the TTL")

	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, false))(node.Taken, "acquire of a held key")
	assert.LessOrEqual(t, res.TTL, 10*time.Second, "a refused plain acquire reports the holder's TTL or 0")
	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, true))(node.Taken, "acquire of a held key, asking for its TTL")
	assert.Greater(t, res.TTL, time.Duration(0), "a refused acquire asked for it reports the holder's TTL")
	assert.LessOrEqual(t, res.TTL, 10*time.Second)
	assert.Equal(t, "tok-1", e.get(k.Name), "a refused acquire changes nothing")

	// The same command twice, as a client that retries after a lost
	// reply sends it: Done, in both forms.
	for _, holderTTL := range []bool{false, true} {
		e.resultOf(e.n.Acquire(e.ctx, &k, 10*time.Second, holderTTL))(node.Done, fmt.Sprintf("a repeated acquire of one's own key (holderTTL %v)", holderTTL))
		assert.Equal(t, "tok-1", e.get(k.Name))
		assert.Greater(t, e.pttl(k.Name), time.Duration(0), "the key still expires")
	}

	e.do("SET", "lk:forever", "someone")
	res = e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:forever", Token: "tok"}, time.Second, true))(node.Taken, "acquire of a key without expiry")
	assert.Zero(t, res.TTL, "a holder without expiry: TTL unknown")
	e.do("DEL", k.Name, "lk:forever")
}

// resultOf checks a call's outcome, written e.resultOf(call)(want, what).
func (e *env) resultOf(res node.Result, err error) func(node.Status, string) node.Result {
	return func(want node.Status, what string) node.Result {
		e.t.Helper()
		return e.result(res, err, want, what)
	}
}

func testExtend(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:extend", Token: "tok-1"}
	e.resultOf(e.n.Acquire(e.ctx, &k, 2*time.Second, false))(node.Done, "acquire")
	e.resultOf(e.n.Extend(e.ctx, &k, 30*time.Second))(node.Done, "extend of one's own key")
	assert.Greater(t, e.pttl(k.Name), 20*time.Second, "extend lengthens the TTL")
	e.resultOf(e.n.Extend(e.ctx, &k, time.Second))(node.Done, "a shorter extend")
	assert.Greater(t, e.pttl(k.Name), 20*time.Second, "an extend never shortens the key")

	e.resultOf(e.n.Extend(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Hour))(node.Taken, "extend with another token")
	assert.Less(t, e.pttl(k.Name), 31*time.Second, "an extend with another token changes nothing")
	assert.Equal(t, "tok-1", e.get(k.Name))

	e.resultOf(e.n.Extend(e.ctx, &node.Key{Name: "lk:none", Token: "tok-1"}, time.Minute))(node.Absent, "extend of an absent key")
	assert.Equal(t, int64(0), e.do("EXISTS", "lk:none"), "an extend does not create a key")
	e.do("DEL", k.Name)
}

func testRelease(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:release", Token: "tok-1"}
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, true))(node.Taken, "release with another token")
	assert.Equal(t, "tok-1", e.get(k.Name), "a release with another token deletes nothing")

	// The announce flag reaches the script: a subscriber of the release
	// channel hears an announced release and not a silent one. A
	// Handoffer announces a delete only where a queue is there (see
	// node.Handoffer): here a registration of the releaser's own
	// client, which an announced release passes over and a silent one
	// (a rollback) hands the key on to, announced on its own channel.
	sub := redistest.Dial(t, "redis://"+e.addr)
	_, err := sub.Do(e.ctx, "SUBSCRIBE", node.ReleaseChannel(k.Name))
	require.NoError(t, err)
	h, queues := e.n.(node.Handoffer)
	k.Owner = "o"
	mine := node.Key{Name: k.Name, Token: "tok-3", Owner: "o"}
	if !queues {
		e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "a silent release")
		assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
	} else {
		e.resultOf(e.n.Acquire(e.ctx, &mine, time.Minute, true))(node.Taken, "a waiter of the holder's client")
		e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "a silent release")
		assert.Equal(t, "~o", e.get(k.Name), "handed on to the head, the holder's own client")
		assert.Nil(t, receive(t, sub, 300*time.Millisecond), "a silent release is not published on the release channel")
		require.NoError(t, h.Leave(e.ctx, &mine))
		require.NotNil(t, receive(t, sub, 5*time.Second), "the waiter leaves: the key is free, announced")
		e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire again")
		e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "an announced release, no one queued")
		assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
		assert.Nil(t, receive(t, sub, 300*time.Millisecond), "a Handoffer announces nothing where no one is queued")
	}
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire again")
	if queues {
		e.resultOf(e.n.Acquire(e.ctx, &mine, time.Minute, true))(node.Taken, "a waiter of the holder's client")
	}
	e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "an announced release")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "an announced release is published")
	assert.Equal(t, node.ReleaseChannel(k.Name), string(msg[1].([]byte)), "published on the release channel")
	if queues {
		require.NoError(t, h.Leave(e.ctx, &mine))
		assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(k.Name)), "nothing left of the queue")
	}
	assert.Nil(t, receive(t, sub, 300*time.Millisecond), "only the announced release was published")

	e.resultOf(e.n.Release(e.ctx, &k, true))(node.Absent, "release of an absent key")
}

// Announce takes key on n and releases it announced, so that the
// release is published on node.ReleaseChannel(key), for tests of a
// node.Watcher. A Handoffer announces a delete only where a queue is
// there (see node.Handoffer): on one, a waiter of the holder's own
// client queues first, which the release passes over, and leaves after.
// It returns the release's result.
func Announce(t testing.TB, n node.Node, key string) node.Result {
	t.Helper()
	ctx := context.Background()
	k := node.Key{Name: key, Token: "announce", Owner: "o"}
	next := node.Key{Name: key, Token: "announce-next", Owner: "o"}
	res, err := n.Acquire(ctx, &k, time.Minute, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status, "Announce takes the key")
	h, queues := n.(node.Handoffer)
	if queues {
		res, err = n.Acquire(ctx, &next, time.Minute, true)
		require.NoError(t, err)
		require.Equal(t, node.Taken, res.Status, "a waiter of the holder's client queues")
	}
	res, err = n.Release(ctx, &k, true)
	require.NoError(t, err)
	if queues {
		require.NoError(t, h.Leave(ctx, &next))
	}
	return res
}

// subscribe returns a connection subscribed to the release channel of
// key (node.ReleaseChannel).
func (e *env) subscribe(t *testing.T, key string) *redistest.Admin {
	t.Helper()
	sub := redistest.Dial(t, "redis://"+e.addr)
	_, err := sub.Do(e.ctx, "SUBSCRIBE", node.ReleaseChannel(key))
	require.NoError(t, err)
	return sub
}

// receive returns the next pub/sub message on sub ([message, channel,
// payload]), or nil if none comes within wait.
func receive(t *testing.T, sub *redistest.Admin, wait time.Duration) []any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	v, err := sub.Receive(ctx)
	if err != nil {
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "receive: %v", err)
		return nil
	}
	msg, _ := v.([]any)
	require.Len(t, msg, 3, "a pub/sub message")
	return msg
}

func testInspect(t *testing.T, f Factory) {
	e := start(t, f)
	in, ok := e.n.(node.Inspector)
	if !ok {
		t.Skip("the node is not a node.Inspector")
	}
	info, err := in.Inspect(e.ctx, "lk:inspect")
	require.NoError(t, err)
	assert.Equal(t, node.Info{}, info, "an absent key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:inspect", Token: "tok-1"}, time.Minute, false))(node.Done, "acquire")
	info, err = in.Inspect(e.ctx, "lk:inspect")
	require.NoError(t, err)
	assert.Equal(t, "tok-1", info.Token)
	assert.InDelta(t, time.Minute, info.TTL, float64(5*time.Second))
	e.do("SET", "lk:forever", "x")
	info, err = in.Inspect(e.ctx, "lk:forever")
	require.NoError(t, err)
	assert.Equal(t, node.Info{Token: "x", TTL: -time.Millisecond}, info, "a key without expiry")
	e.do("DEL", "lk:inspect", "lk:forever")
}

func testBinarySafe(t *testing.T, f Factory) {
	e := start(t, f)
	for _, k := range []node.Key{
		{Name: "lk:with space\r\n*3", Token: "tok\x00en"},
		{Name: "lk:ключ-\xff\xfe", Token: "токен \"quoted\" 'x'"},
	} {
		e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, fmt.Sprintf("acquire %q", k.Name))
		assert.Equal(t, k.Token, e.get(k.Name), "the token is stored byte for byte")
		e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: k.Name, Token: k.Token + "x"}, time.Minute, false))(node.Taken, "another token")
		e.resultOf(e.n.Extend(e.ctx, &k, 2*time.Minute))(node.Done, "extend")
		e.resultOf(e.n.Release(e.ctx, &k, true))(node.Done, "release")
	}
}

func testConcurrent(t *testing.T, f Factory) {
	e := start(t, f)
	const n = 32
	var wg sync.WaitGroup
	results := make([]node.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			results[i], errs[i] = e.n.Acquire(ctx, &node.Key{Name: "lk:race", Token: fmt.Sprint("tok-", i)}, time.Minute, false)
		}()
	}
	wg.Wait()
	winner := -1
	for i := range n {
		require.NoError(t, errs[i])
		if results[i].Status == node.Done {
			require.Equal(t, -1, winner, "two concurrent acquires were granted")
			winner = i
		} else {
			require.Equal(t, node.Taken, results[i].Status)
		}
	}
	require.NotEqual(t, -1, winner, "one concurrent acquire is granted")
	assert.Equal(t, fmt.Sprint("tok-", winner), e.get("lk:race"))
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: "lk:race", Token: fmt.Sprint("tok-", winner)}, false))(node.Done, "release")
}

func testNoScript(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:noscript", Token: "tok-1"}
	flush := func() { e.t.Helper(); e.do("SCRIPT", "FLUSH") }
	flush()
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire after SCRIPT FLUSH")
	flush()
	e.resultOf(e.n.Extend(e.ctx, &k, time.Minute))(node.Done, "extend after SCRIPT FLUSH")
	if in, ok := e.n.(node.Inspector); ok {
		flush()
		info, err := in.Inspect(e.ctx, k.Name)
		require.NoError(t, err, "inspect after SCRIPT FLUSH")
		assert.Equal(t, k.Token, info.Token)
	}
	flush()
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release after SCRIPT FLUSH")
	if fe, ok := e.n.(node.Fencer); ok {
		flush()
		res := e.resultOf(fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour))(node.Done, "fenced acquire after SCRIPT FLUSH")
		flush()
		e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence, time.Hour))(node.Done, "confirm after SCRIPT FLUSH")
		e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release")
		e.do("DEL", node.FenceKey(k.Name))
	}
}

// calls are every operation of n, for the deadline tests: each returns
// the call's error.
func calls(n node.Node) map[string]func(context.Context) error {
	k := deadlineKey
	m := map[string]func(context.Context) error{
		"acquire": func(ctx context.Context) error { _, err := n.Acquire(ctx, &k, time.Minute, false); return err },
		"extend":  func(ctx context.Context) error { _, err := n.Extend(ctx, &k, time.Minute); return err },
		"release": func(ctx context.Context) error { _, err := n.Release(ctx, &k, true); return err },
	}
	if in, ok := n.(node.Inspector); ok {
		m["inspect"] = func(ctx context.Context) error { _, err := in.Inspect(ctx, k.Name); return err }
	}
	if fe, ok := n.(node.Fencer); ok {
		m["acquire fenced"] = func(ctx context.Context) error {
			_, err := fe.AcquireFenced(ctx, &k, time.Minute, time.Hour)
			return err
		}
		m["confirm fence"] = func(ctx context.Context) error { _, err := fe.ConfirmFence(ctx, &k, 1, time.Hour); return err }
	}
	return m
}

// deadlineKey is the key calls uses.
var deadlineKey = node.Key{Name: "lk:deadline", Token: "tok"}

// blackhole listens on loopback, accepts connections and never answers;
// it closes them when the test ends.
func blackhole(t *testing.T) string {
	t.Helper()
	return redistest.Serve(t, func(c net.Conn) {
		_, _ = io.Copy(io.Discard, c)
	})
}

// bounded runs call with a context of deadline d (none when d is 0) and
// checks that it fails with ErrTimeout and Unknown by d (or the node's
// Timeout) plus slack.
func bounded(t *testing.T, what string, d time.Duration, call func(context.Context) error) {
	t.Helper()
	ctx := context.Background()
	limit := timeout
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		limit = d
	}
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	require.Error(t, err, what)
	assert.ErrorIs(t, err, node.ErrTimeout, what)
	var ne *node.Error
	assert.ErrorAs(t, err, &ne, "%s: errors are *node.Error", what)
	assert.LessOrEqual(t, took, limit+slack, "%s took %v with a deadline of %v", what, took, limit)
}

func testBlackhole(t *testing.T, f Factory) {
	n := newNode(t, f, Server{Addr: blackhole(t), Timeout: timeout})
	// A fresh connection each time would be dialled within the call;
	// the first call dials, later ones may reuse a connection stuck on
	// a reply that never comes, or dial again.
	for what, call := range calls(n) {
		bounded(t, what, 200*time.Millisecond, call)
		bounded(t, what+" again", 200*time.Millisecond, call)
	}
	bounded(t, "acquire without a deadline", 0, calls(n)["acquire"])
}

// testStalled: a server that stops answering on a connection in use
// (DEBUG SLEEP) costs the deadline, and the late reply is not taken for
// a later call's reply.
func testStalled(t *testing.T, f Factory) {
	e := start(t, f)
	k := node.Key{Name: "lk:stalled", Token: "tok-1"}
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:warm", Token: "w"}, time.Minute, false))(node.Done, "warm-up")
	stalled := make(chan error, 1)
	go func() {
		_, err := e.admin.Do(context.Background(), "DEBUG", "SLEEP", "0.6")
		stalled <- err
	}()
	time.Sleep(100 * time.Millisecond) // the server is asleep
	bounded(t, "acquire on a stalled server", 150*time.Millisecond, func(ctx context.Context) error {
		_, err := e.n.Acquire(ctx, &k, time.Minute, false)
		return err
	})
	require.NoError(t, <-stalled)
	// The acquire applied late; whatever connection the release uses,
	// its answer must be its own: Done (the late SET), not the SET's OK
	// read as something else, nor an error.
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release after a late acquire")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: "lk:warm", Token: "w"}, false))(node.Done, "release warm-up")
	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Absent, "release again")
}

// testNoLateSend: a call's command reaches the server before the call
// returns, or never. A timed-out acquire that reached the server later
// would take the key after its caller was told it had failed, and after
// the caller's rollback had run. A proxy holds the server's replies for a
// while (a server slow to answer a new connection's handshake, or a
// pooled connection's command) and records when bytes naming the call's
// key arrive from the node; the rest of a handshake (CLIENT SETINFO after
// a late HELLO) may follow late, it changes no key. What a call wrote
// before it returned may still apply late: that is what the rollback of
// late replies is for.
func testNoLateSend(t *testing.T, f Factory) {
	e := start(t, f)
	const hold = 500 * time.Millisecond
	check := func(what string, p *holdProxy, call func(context.Context) error) {
		t.Helper()
		p.hold(hold)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := call(ctx)
		cancel()
		returned := time.Now()
		require.ErrorIs(t, err, node.ErrTimeout, "%s: replies held for %v", what, hold)
		// Until the replies flow again and a while after: a driver that
		// queued the command behind its handshake sends it then.
		time.Sleep(time.Until(returned.Add(hold + 250*time.Millisecond)))
		// Bytes written just before the return may be read by the proxy
		// a little after it; a late send comes when the replies flow.
		late := p.lastMarked().Sub(returned)
		assert.Less(t, late, 150*time.Millisecond, "%s: the node sent the command %v after the call returned", what, late)
	}
	for what := range calls(e.n) {
		if what == "inspect" {
			continue // it changes nothing: sent late, it harms no one
		}
		// A fresh node: the call dials, and its handshake waits.
		p := newHoldProxy(t, e.addr, deadlineKey.Name)
		n := newNode(t, f, Server{Addr: p.addr, Timeout: timeout})
		check(what+", new connection", p, calls(n)[what])
	}
	// A pooled connection that answered before.
	p := newHoldProxy(t, e.addr, "lk:nolate")
	n := newNode(t, f, Server{Addr: p.addr, Timeout: timeout})
	warm := node.Key{Name: "lk:warm", Token: "w"}
	e.resultOf(n.Acquire(e.ctx, &warm, time.Minute, false))(node.Done, "warm-up")
	check("acquire, pooled connection", p, func(ctx context.Context) error {
		_, err := n.Acquire(ctx, &node.Key{Name: "lk:nolate", Token: "tok"}, time.Minute, false)
		return err
	})
	// What was sent in time applied: the server was slow, not stopped.
	e.do("FLUSHALL")
}

// holdProxy forwards loopback TCP to a server; while holding, it keeps
// the server's bytes back until the hold ends. It records when bytes from
// the node that contain the marker last arrived.
type holdProxy struct {
	addr   string
	marker []byte
	mu     sync.Mutex
	until  time.Time // hold the server's bytes until then
	marked time.Time // bytes with the marker arrived then
}

func newHoldProxy(t *testing.T, server, marker string) *holdProxy {
	t.Helper()
	p := &holdProxy{marker: []byte(marker)}
	p.addr = redistest.Serve(t, func(c net.Conn) {
		s, err := net.DialTimeout("tcp", server, 2*time.Second)
		if err != nil {
			c.Close()
			return
		}
		back := make(chan struct{})
		go func() { // server → node, held back while holding
			defer close(back)
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				k, err := s.Read(buf)
				if k > 0 {
					p.mu.Lock()
					wait := time.Until(p.until)
					p.mu.Unlock()
					time.Sleep(wait)
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 32<<10) // node → server
		var seen []byte             // the last bytes read, so that a marker split between reads is found
		for {
			k, err := c.Read(buf)
			if k > 0 {
				seen = append(seen, buf[:k]...)
				if bytes.Contains(seen, p.marker) {
					p.mu.Lock()
					p.marked = time.Now()
					p.mu.Unlock()
				}
				seen = seen[max(0, len(seen)-len(p.marker)):]
				if _, err := s.Write(buf[:k]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		s.Close()
		<-back
	})
	return p
}

// hold keeps the server's bytes back for d from now.
func (p *holdProxy) hold(d time.Duration) {
	p.mu.Lock()
	p.until = time.Now().Add(d)
	p.mu.Unlock()
}

// lastMarked is when bytes with the marker last arrived from the node.
func (p *holdProxy) lastMarked() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.marked
}

func testUnreachable(t *testing.T, f Factory) {
	n := newNode(t, f, Server{Addr: redistest.DeadAddr(t), Timeout: timeout})
	for what, call := range calls(n) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := call(ctx)
		cancel()
		require.ErrorIs(t, err, node.ErrUnreachable, what)
	}
}

// testNotRedis: a peer that answers, but not in RESP (an HTTP server on
// a node's port, by mistake), is ErrProtocol.
func testNotRedis(t *testing.T, f Factory) {
	addr := redistest.Serve(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		_, _ = c.Read(buf)
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		c.Close()
	})
	n := newNode(t, f, Server{Addr: addr, Timeout: timeout})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := n.Acquire(ctx, &node.Key{Name: "lk:http", Token: "tok"}, time.Minute, false)
	assert.Equal(t, node.Unknown, res.Status)
	require.ErrorIs(t, err, node.ErrProtocol)
}

const password = "s3cret-pw-9"

// testAuth: a wrong password and an ACL user without the right to run
// the scripts are ErrAuth, and no password shows in errors or in what
// fmt prints of the node; the right credentials work.
func testAuth(t *testing.T, f Factory) {
	u := redistest.StartArgs(t, "--requirepass", password)
	admin := redistest.Dial(t, u)
	ctx := context.Background()
	_, err := admin.Do(ctx, "AUTH", password)
	require.NoError(t, err)
	_, err = admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">"+password+"-u", "~lk:*", "&lk:*", "+@all")
	require.NoError(t, err)
	_, err = admin.Do(ctx, "ACL", "SETUSER", "reader", "on", ">"+password+"-r", "~lk:*", "+get", "+ping", "+hello", "+client", "+auth")
	require.NoError(t, err)
	addr := hostPort(t, u)
	k := node.Key{Name: "lk:auth", Token: "tok"}

	for _, s := range []Server{
		{Addr: addr, Password: "wrong-" + password},
		{Addr: addr},
		{Addr: addr, Username: "locker", Password: "wrong-" + password},
		{Addr: addr, Username: "reader", Password: password + "-r"}, // NOPERM
	} {
		s.Timeout = timeout
		what := fmt.Sprintf("user %q, password given: %v", s.Username, s.Password != "")
		n := newNode(t, f, s)
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := n.Acquire(c, &k, time.Minute, false)
		cancel()
		require.ErrorIs(t, err, node.ErrAuth, what)
		var ne *node.Error
		require.ErrorAs(t, err, &ne, what)
		noSecret(t, what, err.Error(), n.Addr(), fmt.Sprintf("%v", n), fmt.Sprintf("%+v", n))
	}
	for _, s := range []Server{{Addr: addr, Password: password}, {Addr: addr, Username: "locker", Password: password + "-u"}} {
		s.Timeout = timeout
		n := newNode(t, f, s)
		res, err := n.Acquire(ctx, &k, time.Minute, false)
		require.NoError(t, err, "user %q", s.Username)
		require.Equal(t, node.Done, res.Status)
		noSecret(t, "a working node", n.Addr(), fmt.Sprintf("%v", n), fmt.Sprintf("%+v", n))
		res, err = n.Release(ctx, &k, true)
		require.NoError(t, err)
		require.Equal(t, node.Done, res.Status)
	}
}

func noSecret(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		assert.NotContains(t, s, "s3cret", "%s: a password shows in %q", what, s)
	}
}

// testTLS: a server that speaks only TLS works with a configuration that
// trusts it, and is ErrTLS with one that does not.
func testTLS(t *testing.T, f Factory) {
	_, addr, roots := redistest.StartTLS(t)
	ctx := context.Background()
	trusted := newNode(t, f, Server{Addr: addr, TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, Timeout: timeout})
	k := node.Key{Name: "lk:tls", Token: "tok"}
	c, cancel := context.WithTimeout(ctx, 5*time.Second) // handshakes under -race
	defer cancel()
	res, err := trusted.Acquire(c, &k, time.Minute, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)
	res, err = trusted.Release(c, &k, false)
	require.NoError(t, err)
	require.Equal(t, node.Done, res.Status)

	untrusted := newNode(t, f, Server{Addr: addr, TLS: &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}, Timeout: timeout})
	_, err = untrusted.Acquire(c, &k, time.Minute, false)
	require.ErrorIs(t, err, node.ErrTLS)
}

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

func testFence(t *testing.T, f Factory) {
	e := start(t, f)
	fe, ok := e.n.(node.Fencer)
	if !ok {
		t.Skip("the node is not a node.Fencer")
	}
	k := node.Key{Name: "lk:fence", Token: "tok-1"}
	fk := node.FenceKey(k.Name)
	now := serverMicros(t, e)
	res := e.resultOf(fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour))(node.Done, "fenced acquire")
	assert.GreaterOrEqual(t, res.Fence, now, "the counter starts at the server's time in µs")
	assert.Equal(t, fmt.Sprint(res.Fence), e.get(fk), "the counter holds the fence")
	assert.InDelta(t, time.Hour, e.pttl(fk), float64(time.Minute), "the counter lives its own TTL")
	assert.InDelta(t, time.Minute, e.pttl(k.Name), float64(5*time.Second), "the key lives the lock's TTL")

	again := e.resultOf(fe.AcquireFenced(e.ctx, &k, time.Minute, time.Hour))(node.Done, "a repeated fenced acquire")
	assert.Equal(t, res.Fence, again.Fence, "a repeated acquire answers the same fence")
	taken := e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, time.Minute, time.Hour))(node.Taken, "fenced acquire of a held key")
	assert.Greater(t, taken.TTL, time.Duration(0))
	assert.Zero(t, taken.Fence)

	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence+1000, time.Hour))(node.Done, "confirm a higher fence")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm raises the counter")
	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence, time.Hour))(node.Done, "confirm a lower fence")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm never lowers the counter")
	e.resultOf(fe.ConfirmFence(e.ctx, &node.Key{Name: k.Name, Token: "tok-2"}, res.Fence+5000, time.Hour))(node.Taken, "confirm with another token")
	assert.Equal(t, fmt.Sprint(res.Fence+1000), e.get(fk), "a confirm with another token changes nothing")

	e.resultOf(e.n.Release(e.ctx, &k, false))(node.Done, "release")
	e.resultOf(fe.ConfirmFence(e.ctx, &k, res.Fence+5000, time.Hour))(node.Absent, "confirm of a released key")
	next := e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-3"}, time.Minute, time.Hour))(node.Done, "the next fenced acquire")
	assert.Greater(t, next.Fence, res.Fence+1000, "fences grow from one grant to the next")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: k.Name, Token: "tok-3"}, false))(node.Done, "release")

	// A fenced acquire without an owner does not queue, and a refused
	// one leaves nothing behind (it used to mark the queue key for a
	// lease, which outlived the calls that made it).
	if _, queues := e.n.(node.Handoffer); queues {
		holder := node.Key{Name: k.Name, Token: "tok-4"}
		e.resultOf(fe.AcquireFenced(e.ctx, &holder, time.Minute, time.Hour))(node.Done, "a fenced holder")
		e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: k.Name, Token: "tok-5"}, time.Minute, time.Hour))(node.Taken, "a fenced attempt that does not queue")
		assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(k.Name)), "leaves no mark on the queue key")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	}
	e.do("DEL", fk, node.WaitersKey(k.Name))
}

// startHandoffer is start for a test of node.Handoffer; it skips the
// test for a node that is not one.
func startHandoffer(t *testing.T, f Factory) (*env, node.Handoffer) {
	t.Helper()
	e := start(t, f)
	h, ok := e.n.(node.Handoffer)
	if !ok {
		t.Skip("the node is not a node.Handoffer")
	}
	return e, h
}

// testHandoff: a waiting acquire registers its owner, a transfer within
// one client replaces the token in one step, and a waiter of another
// client turns the transfer into an announced release.
func testHandoff(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	k := node.Key{Name: "lk:handoff", Token: "tok-1", Owner: "client-a"}
	wk := node.WaitersKey(k.Name)
	e.resultOf(e.n.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire")

	// A first (plain) attempt of another goroutine of client a registers
	// nothing; a waiting one does, for the lease.
	next := node.Key{Name: k.Name, Token: "tok-2", Owner: "client-a"}
	e.resultOf(e.n.Acquire(e.ctx, &next, time.Minute, false))(node.Taken, "a plain acquire of a held key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "a plain attempt does not register")
	res := e.resultOf(e.n.Acquire(e.ctx, &next, time.Minute, true))(node.Taken, "a waiting acquire")
	assert.Positive(t, res.Ticket, "a waiting attempt gets a ticket")
	assert.Equal(t, int64(1), e.do("HEXISTS", wk, "client-a"), "a waiting attempt queues its owner")
	assert.InDelta(t, node.WaiterLease, e.pttl(wk), float64(time.Second), "for the lease")

	e.resultOf(h.Transfer(e.ctx, &k, &next, 30*time.Second))(node.Done, "a transfer within one client")
	assert.Equal(t, "tok-2", e.get(k.Name), "the successor holds the key")
	assert.InDelta(t, 30*time.Second, e.pttl(k.Name), float64(2*time.Second), "for the TTL given")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "the owner's registration is gone")
	e.resultOf(h.Transfer(e.ctx, &k, &next, 30*time.Second))(node.Done, "the same transfer again")
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: k.Name, Token: "tok-9", Owner: "client-a"}, &k, time.Minute))(node.Taken, "a transfer from a token that does not hold the key")
	assert.Equal(t, "tok-2", e.get(k.Name), "changes nothing")

	// A waiter of client b: the next transfer releases, reserving the
	// key for b, and names b.
	other := node.Key{Name: k.Name, Token: "tok-b", Owner: "client-b"}
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits")
	all := e.subscribe(t, k.Name)
	sub := e.subscribe(t, node.ReservedKey(k.Name, "client-b"))
	third := node.Key{Name: k.Name, Token: "tok-3", Owner: "client-a"}
	e.resultOf(h.Transfer(e.ctx, &next, &third, time.Minute))(node.Absent, "a transfer while another client waits")
	assert.Equal(t, "~client-b", e.get(k.Name), "the holder's key is reserved for b instead")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "and the release announced to b")
	assert.Equal(t, "client-b", string(msg[2].([]byte)), "naming b")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "client b takes the lock")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "its place in the queue is gone")

	// A transfer to a free key acts as an acquire; Leave drops a
	// registration.
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Done, "release")
	e.resultOf(h.Transfer(e.ctx, &next, &third, time.Minute))(node.Done, "a transfer to a free key")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits again")
	require.NoError(t, h.Leave(e.ctx, &other))
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "Leave drops the registration")
	e.resultOf(e.n.Release(e.ctx, &third, false))(node.Done, "release")

	// A transfer that finds the key gone from this node (it expired here,
	// or the holder's majority did not include the node) while b waits
	// hands the key to b, as an Unlock's release would: the node rejoins
	// the next holder's majority instead of being taken and rolled back
	// by b's attempts.
	e.resultOf(e.n.Acquire(e.ctx, &third, time.Minute, false))(node.Done, "acquire")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "client b waits once more")
	e.do("DEL", k.Name)
	fourth := node.Key{Name: k.Name, Token: "tok-4", Owner: "client-a"}
	e.resultOf(h.Transfer(e.ctx, &third, &fourth, time.Minute))(node.Absent, "a transfer of a key gone from the node while another client waits")
	assert.Equal(t, "~client-b", e.get(k.Name), "reserves the key for b")
	msg = receive(t, sub, 5*time.Second)
	require.NotNil(t, msg, "and announces it to b")
	assert.Equal(t, "client-b", string(msg[2].([]byte)), "naming b")
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "client b takes the lock")
	e.resultOf(e.n.Release(e.ctx, &other, false))(node.Done, "release")

	// An ACL user without the hash commands still locks and waits (in no
	// order); its transfers release instead of handing over.
	e.do("ACL", "SETUSER", "nohash", "on", ">"+password+"-h", "~lk:*", "&lk:*", "+@all", "-@hash")
	t.Cleanup(func() { e.do("ACL", "DELUSER", "nohash") })
	limited := newNode(t, f, Server{Addr: e.addr, Username: "nohash", Password: password + "-h", Timeout: timeout})
	lh, ok := limited.(node.Handoffer)
	require.True(t, ok)
	e.resultOf(limited.Acquire(e.ctx, &k, time.Minute, false))(node.Done, "acquire without hash rights")
	res = e.resultOf(limited.Acquire(e.ctx, &other, time.Minute, true))(node.Taken, "a waiting acquire without hash rights")
	assert.Zero(t, res.Ticket, "is not queued")
	e.resultOf(lh.Transfer(e.ctx, &k, &next, time.Minute))(node.Absent, "a transfer that cannot read the queue releases")
	assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
	e.resultOf(limited.Acquire(e.ctx, &other, time.Minute, true))(node.Done, "a waiting acquire without hash rights takes a free key")
	e.resultOf(limited.Release(e.ctx, &other, true))(node.Done, "and releases it")
	require.NoError(t, lh.Leave(e.ctx, &other), "Leave without hash rights")
	assert.Equal(t, int64(0), e.do("EXISTS", k.Name), "released")
}

// testQueue checks the waiter queue of node.Handoffer: tickets in order,
// reservations for the head, leases, Leave.
// testFencedQueue: a waiting fenced acquire (k.Owner set) queues as a
// waiting Acquire does, in ticket order with plain waiters; a release
// reserves the key for it in its turn, and its fenced acquire takes the
// reservation and raises the counter; while it heads the queue, a
// plain waiter does not take the free key, nor does a fenced acquire
// that does not queue take a reserved one.
func testFencedQueue(t *testing.T, f Factory) {
	e, _ := startHandoffer(t, f)
	fe, ok := e.n.(node.Fencer)
	if !ok {
		t.Skip("the node is not a node.Fencer")
	}
	name := "lk:fqueue"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk, node.FenceKey(name)) })
	key := func(tok, owner string, ticket int64) *node.Key {
		return &node.Key{Name: name, Token: tok, Owner: owner, Ticket: ticket}
	}
	holder := key("tok-a", "a", 0)
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")
	fw := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f1", "f", 0), time.Minute, time.Hour))(node.Taken, "fenced f waits")
	require.Positive(t, fw.Ticket, "a waiting fenced acquire is queued")
	assert.InDelta(t, time.Minute, fw.TTL, float64(5*time.Second), "a held key: the holder's TTL")
	b := e.resultOf(e.n.Acquire(e.ctx, key("tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits").Ticket
	assert.Greater(t, b, fw.Ticket, "b came after f")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f2", "f", fw.Ticket), time.Minute, time.Hour))(node.Taken, "f renews its place")

	toF := e.subscribe(t, node.ReservedKey(name, "f"))
	e.resultOf(e.n.Release(e.ctx, holder, true))(node.Done, "a releases")
	assert.Equal(t, "~f", e.get(name), "reserved for f, the head")
	require.NotNil(t, receive(t, toF, 5*time.Second), "named on f's channel")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-x", "", 0), time.Minute, time.Hour))(node.Taken, "a fenced acquire that does not queue does not take a reserved key")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b2", "b", b), time.Minute, true))(node.Taken, "b waits behind f")
	res := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f3", "f", fw.Ticket), time.Minute, time.Hour))(node.Done, "f takes the key reserved for it")
	assert.Positive(t, res.Fence, "and gets a fence")
	assert.Equal(t, fmt.Sprint(res.Fence), e.get(node.FenceKey(name)), "the counter holds the fence")
	assert.Equal(t, "tok-f3", e.get(name))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "f"), "f has left the queue")
	again := e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f3", "f", fw.Ticket), time.Minute, time.Hour))(node.Done, "the same command run twice")
	assert.Equal(t, res.Fence, again.Fence)

	// Free key, b queued: a waiting fenced acquire that came after b
	// does not take it; b does.
	e.resultOf(e.n.Release(e.ctx, key("tok-f3", "f", 0), false))(node.Done, "f's rollback reserves the key for b")
	assert.Equal(t, "~b", e.get(name))
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b3", "b", b), time.Minute, true))(node.Done, "b takes it")
	e.resultOf(e.n.Release(e.ctx, key("tok-b3", "b", 0), true))(node.Done, "b releases, no one queued")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the key is free")
	e.resultOf(fe.AcquireFenced(e.ctx, key("tok-f4", "f", 0), time.Minute, time.Hour))(node.Done, "a lone fenced waiter takes a free key")
	e.resultOf(e.n.Release(e.ctx, key("tok-f4", "f", 0), true))(node.Done, "release")
}

func testQueue(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:queue"
	wk := node.WaitersKey(name)
	key := func(tok, owner string, ticket int64) *node.Key {
		return &node.Key{Name: name, Token: tok, Owner: owner, Ticket: ticket}
	}
	holder := key("tok-a", "a", 0)
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")

	// Tickets in the order the waiters came, kept across attempts.
	b := e.resultOf(e.n.Acquire(e.ctx, key("tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits").Ticket
	c := e.resultOf(e.n.Acquire(e.ctx, key("tok-c1", "c", 0), time.Minute, true))(node.Taken, "c waits").Ticket
	require.Positive(t, b)
	assert.Greater(t, c, b, "c came after b")
	assert.Equal(t, b, e.resultOf(e.n.Acquire(e.ctx, key("tok-b2", "b", 0), time.Minute, true))(node.Taken, "b again").Ticket, "b keeps its ticket")
	res := e.resultOf(e.n.Acquire(e.ctx, key("tok-b3", "b", b), time.Minute, true))(node.Taken, "b with its ticket")
	assert.Equal(t, b, res.Ticket)
	assert.InDelta(t, time.Minute, res.TTL, float64(5*time.Second), "a held key: the holder's TTL")

	// a's release reserves the key for b, the head, and names b; nobody
	// else takes it, a plain acquire neither.
	all := e.subscribe(t, name)
	toB := e.subscribe(t, node.ReservedKey(name, "b"))
	toC := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(e.n.Release(e.ctx, holder, true))(node.Done, "a releases")
	assert.Equal(t, "~b", e.get(name), "reserved for b")
	assert.LessOrEqual(t, e.pttl(name), node.WaiterLease, "for what is left of b's lease")
	msg := receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "b", string(msg[2].([]byte)), "the release names b, on b's channel")
	assert.Nil(t, receive(t, toC, 100*time.Millisecond), "c does not hear it")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "nor anyone else")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-c2", "c", c), time.Minute, true))(node.Taken, "c waits behind b")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-d", "", 0), time.Minute, false))(node.Taken, "a plain acquire does not take a reserved key")
	bk := key("tok-b4", "b", b)
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes the key reserved for it")
	assert.Equal(t, "tok-b4", e.get(name))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b has left the queue")

	// b's release reserves for c; c gives up: the key is free again,
	// announced to all, and nothing is left.
	e.resultOf(e.n.Release(e.ctx, bk, true))(node.Done, "b releases")
	assert.Equal(t, "~c", e.get(name), "reserved for c")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	require.NoError(t, h.Leave(e.ctx, key("", "c", c)))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c's reservation is gone with it")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "and the queue")
	msg = receive(t, all, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "", string(msg[2].([]byte)), "the key is free for all")

	// A free key and a queue: only the head takes it; a ticket given by
	// the waiter raises the counter, so that later waiters come after it.
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key again")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b5", "b", 100), time.Minute, true))(node.Taken, "b waits with ticket 100")
	c = e.resultOf(e.n.Acquire(e.ctx, key("tok-c3", "c", 0), time.Minute, true))(node.Taken, "c waits").Ticket
	assert.Equal(t, int64(101), c, "after b")
	// A rollback hands the key on as a release does, but to whoever
	// heads the queue, the caller's client too (its waiting attempt
	// is its next), and announces it on the head's channel only: an
	// attempt that lost the majority must not leave a free key that
	// its waiters hear nothing of.
	e.resultOf(e.n.Release(e.ctx, holder, false))(node.Done, "a rollback")
	assert.Equal(t, "~b", e.get(name), "reserved for b, the head")
	require.NotNil(t, receive(t, toB, 5*time.Second), "announced to b")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")
	res = e.resultOf(e.n.Acquire(e.ctx, key("tok-c4", "c", c), time.Minute, true))(node.Taken, "c is not the head")
	assert.InDelta(t, node.WaiterLease, res.TTL, float64(time.Second), "and waits for the head's lease at most")

	// A waiter whose lease ends is out of the queue: c, renewing, heads
	// it and takes the free key.
	time.Sleep(node.WaiterLease + 100*time.Millisecond)
	ck := key("tok-c5", "c", c)
	e.resultOf(e.n.Acquire(e.ctx, ck, time.Minute, true))(node.Done, "c heads the queue once b's lease is over")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nothing is left of the queue")
	e.resultOf(e.n.Release(e.ctx, ck, true))(node.Done, "c releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "a release with no one queued deletes the key")

	// A node whose key is free while another client holds the majority:
	// a waiting attempt that heads its (empty) queue takes the key, and
	// its rollback (Requeue, the ticket the refusing nodes gave) queues
	// it again and deletes the key quietly, the caller being the head;
	// the next waiter is refused there and queued behind it, in the
	// nodes' order, instead of taking the key in its turn.
	bk = key("tok-b6", "b", 0)
	bk.Grant = node.GrantValue("b", "g9")
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes the free key, heading an empty queue")
	rb := *bk
	rb.Ticket, rb.Requeue = 7, true
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "b's attempt is rolled back")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the key is free")
	assert.Nil(t, receive(t, toB, 100*time.Millisecond), "and b, the head, is not told")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "nor anyone")
	res = e.resultOf(e.n.Acquire(e.ctx, key("tok-c6", "c", 0), time.Minute, true))(node.Taken, "c does not take it: b heads the queue")
	assert.Equal(t, int64(8), res.Ticket, "c is queued after b's ticket")
	// An Unlock that finds the key absent where waiters are queued hands
	// it on to the head all the same, announced on its channel: granted,
	// as b's requeued registration asks, naming the rolled-back attempt.
	e.resultOf(e.n.Release(e.ctx, key("tok-z", "z", 0), true))(node.Absent, "an Unlock where the key is absent")
	v := e.get(name)
	assert.LessOrEqual(t, e.pttl(name), node.WaiterLease, "for a lease at most")
	msg = receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	if v == "~b" {
		// A node that asks for no grants (see testGrant) reserves.
		assert.Equal(t, "b", string(msg[2].([]byte)), "announced to b")
	} else {
		assert.Equal(t, rb.Grant, v, "the key is granted to b, the head")
		assert.Equal(t, node.GrantMessage(rb.Grant, "tok-b6"), string(msg[2].([]byte)), "announced to b")
	}
	bk = key("tok-b7", "b", 7)
	bk.Grant = rb.Grant
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes it")
	// A rollback whose caller is not the head (a waiter with a lower
	// ticket queued since its attempt) hands the key on to the head.
	e.resultOf(e.n.Acquire(e.ctx, key("tok-d1", "d", 5), time.Minute, true))(node.Taken, "d waits with ticket 5")
	toD := e.subscribe(t, node.ReservedKey(name, "d"))
	rb = *bk
	rb.Requeue, rb.Grant = true, ""
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "b's attempt is rolled back")
	assert.Equal(t, "~d", e.get(name), "reserved for d, the head")
	require.NotNil(t, receive(t, toD, 5*time.Second), "announced to d")
	for _, w := range []string{"b", "c", "d"} {
		require.NoError(t, h.Leave(e.ctx, key("", w, 0)))
	}
	assert.Equal(t, int64(0), e.do("EXISTS", name), "nothing is left of the key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nor of the queue")
	require.NotNil(t, receive(t, all, 5*time.Second), "d's leave frees the key for all")
	e.resultOf(e.n.Release(e.ctx, key("tok-z", "z", 0), true))(node.Absent, "an Unlock where the key is absent and no one waits")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: node.GrantValue("z", "g1"), Owner: "z"}, true))(node.Absent,
		"so does a lock held by a grant")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and neither announces anything")

	// A waiter that gives up where the key is absent (its last
	// attempt's rollback deleted it quietly, heading the queue) hands it
	// on to the next head.
	e.resultOf(e.n.Acquire(e.ctx, holder, time.Minute, false))(node.Done, "a takes the key")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-b8", "b", 20), time.Minute, true))(node.Taken, "b waits")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-c8", "c", 21), time.Minute, true))(node.Taken, "c waits")
	e.do("DEL", name)
	require.NoError(t, h.Leave(e.ctx, key("", "b", 0)))
	assert.Equal(t, "~c", e.get(name), "b's leave hands the free key to c")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	require.NoError(t, h.Leave(e.ctx, key("", "c", 0)))
	require.NotNil(t, receive(t, all, 5*time.Second), "c's leave frees the key for all")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "nothing is left of the key")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nor of the queue")
}

// testGrant checks direct grants (node.Key.Grant): a release hands the
// key to the head that asked for one by setting the key to its grant,
// for node.GrantTTL of the TTL it asked (the TTL, at most
// node.WaiterLease), and announces the grant on the head's channel;
// the head's next waiting attempt takes a key that holds its grant; a
// Leave hands on a key granted to the leaver, not one granted to another
// waiter of its client; a release or transfer by a grant drops the
// registration asking for it, granted or not; a release passes over its
// own client's place; a watch for a grant message wakes for it alone;
// semaphore slots reserve; nothing is left. A node that asks for no
// grants (it reserves) skips the test.
// testLeaveByCall: a Leave with a grant names its call. A late Leave
// of a client's call that gave up, which comes after the client's next
// call registered (asking for another grant), leaves that entry and a
// key reserved for the client alone; the next call's own Leave takes
// the entry out and hands the reservation on. A key granted to the
// leaving call goes on to the next head, the next call included.
func testLeaveByCall(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:leavecall"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk) })
	holder := node.Key{Name: name, Token: "tok-a", Owner: "a"}
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "a takes the key")
	g1, g2 := node.GrantValue("b", "call1"), node.GrantValue("b", "call2")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b1", Owner: "b", Grant: g1}, 30*time.Second, true))(node.Taken, "b's first call waits")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b", Grant: g2}, 30*time.Second, true))(node.Taken, "b's next call registers")
	if entry, _ := e.do("HGET", wk, "b").([]byte); !strings.HasSuffix(string(entry), g2) {
		// A node that sends no grant (see testGrant) names no call.
		e.resultOf(e.n.Release(e.ctx, &holder, false))(node.Done, "a's rollback")
		require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b"}))
		t.Skip("the node asks for no grants: its waiters are known by tag")
	}
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g1}), "the first call's late Leave")
	assert.Equal(t, int64(1), e.do("HEXISTS", wk, "b"), "the next call's entry stays")
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "a releases")
	assert.Equal(t, g2, e.get(name), "granted to the next call")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g1}), "the first call's Leave, later still")
	assert.Equal(t, g2, e.get(name), "the next call's grant stays")

	// With a third client queued: the next call's own Leave hands its
	// grant on to c.
	c := node.Key{Name: name, Token: "tok-c", Owner: "c"}
	e.resultOf(e.n.Acquire(e.ctx, &c, time.Minute, true))(node.Taken, "c waits")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: g2}), "the next call gives up")
	assert.Equal(t, "~c", e.get(name), "its grant goes on to c")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "c"}))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c leaves: the key is free")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "and no one is queued")
}

// testLeaveAll: a Leave with node.LeaveAll (a client that closes) takes
// its entry out whatever grant it asks, and hands on a key granted to any
// call of the client or reserved for it; a key another client holds, or
// one of this client's attempt tokens, stays.
func testLeaveAll(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:leaveall"
	wk := node.WaitersKey(name)
	t.Cleanup(func() { e.do("DEL", name, wk) })
	all := func(owner string) *node.Key { return &node.Key{Name: name, Owner: owner, Grant: node.LeaveAll} }

	// A grant of an earlier call of b's, b registered again (a late
	// command of that call), c queued behind: the grant goes on to c.
	e.do("SET", name, node.GrantValue("b", "call1"), "PX", 60000)
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-b2", Owner: "b", Grant: node.GrantValue("b", "call2")}, 30*time.Second, true))(node.Taken, "b registered")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-c", Owner: "c"}, time.Minute, true))(node.Taken, "c waits")
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b's entry is gone")
	assert.Equal(t, "~c", e.get(name), "the grant of b's call went on to c")

	// A key reserved for c, c closing: freed (no one else waits).
	require.NoError(t, h.Leave(e.ctx, all("c")))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "c's reservation is freed")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "no one is queued")

	// A key held by another client's token, or by the closing client's
	// attempt token, stays.
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-a", Owner: "a"}, time.Minute, false))(node.Done, "a holds")
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, "tok-a", e.get(name), "a's key stays")
	e.do("SET", name, "tok-b3", "PX", 60000)
	require.NoError(t, h.Leave(e.ctx, all("b")))
	assert.Equal(t, "tok-b3", e.get(name), "an attempt token of b's stays: its release frees it")
}

func testGrant(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	name := "lk:grant"
	wk := node.WaitersKey(name)
	holder := node.Key{Name: name, Token: "tok-a", Owner: "a"}
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "a takes the key")
	gb := node.GrantValue("b", "g1")
	b := node.Key{Name: name, Token: "tok-b1", Owner: "b", Grant: gb}
	tb := e.resultOf(e.n.Acquire(e.ctx, &b, 30*time.Second, true))(node.Taken, "b waits, asking for a grant").Ticket
	c := node.Key{Name: name, Token: "tok-c1", Owner: "c", Grant: node.GrantValue("c", "g2")}
	tc := e.resultOf(e.n.Acquire(e.ctx, &c, 30*time.Second, true))(node.Taken, "c waits behind b").Ticket

	toB := e.subscribe(t, node.ReservedKey(name, "b"))
	all := e.subscribe(t, name)
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "a releases")
	if e.get(name) == "~b" {
		// A node may send no grant (the go-redis node over a client
		// that resends commands): then it reserves, as for any waiter.
		e.do("DEL", name, wk)
		t.Skip("the node asks for no grants: it reserved the key")
	}
	assert.Equal(t, gb, e.get(name), "the key holds b's grant")
	assert.InDelta(t, node.GrantTTL(30*time.Second), e.pttl(name), float64(300*time.Millisecond), "for node.GrantTTL (2 s) of the 30 s TTL b asked for")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "b"), "b has left the queue")
	msg := receive(t, toB, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, node.GrantMessage(gb, "tok-b1"), string(msg[2].([]byte)), "the grant is announced to b, naming the attempt it registered with")
	assert.Nil(t, receive(t, all, 100*time.Millisecond), "and to no one else")

	// The grant is b's lock: it extends and releases it by the grant, and
	// its release hands the key on to c.
	gk := node.Key{Name: name, Token: gb, Owner: "b"}
	e.resultOf(e.n.Extend(e.ctx, &gk, time.Minute))(node.Done, "b extends by its grant")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-d", Owner: "d"}, time.Minute, false))(node.Taken, "a plain acquire does not take a granted key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-c2", Owner: "c", Ticket: tc, Grant: c.Grant}, 1500*time.Millisecond, true))(node.Taken, "c still waits")
	e.resultOf(e.n.Release(e.ctx, &gk, true))(node.Done, "b releases by its grant")
	assert.Equal(t, c.Grant, e.get(name), "granted to c")
	assert.InDelta(t, 1500*time.Millisecond, e.pttl(name), float64(300*time.Millisecond), "for the 1.5 s TTL c asked for, node.GrantTTL of it")

	// c's next waiting attempt, which its grant's announcement did not
	// stop, takes the key with its own token.
	ck := node.Key{Name: name, Token: "tok-c3", Owner: "c", Ticket: tc, Grant: c.Grant}
	e.resultOf(e.n.Acquire(e.ctx, &ck, time.Minute, true))(node.Done, "c's attempt takes its granted key")
	assert.Equal(t, "tok-c3", e.get(name))

	// b waits again with a new grant; c's rollback-free release grants it.
	// b's Leave with another waiting call's grant leaves it alone; with
	// its own, the key goes on to the next head, or is freed.
	b2 := node.Key{Name: name, Token: "tok-b2", Owner: "b", Ticket: tb, Grant: node.GrantValue("b", "g3")}
	e.resultOf(e.n.Acquire(e.ctx, &b2, time.Minute, true))(node.Taken, "b waits again")
	e.resultOf(e.n.Release(e.ctx, &ck, true))(node.Done, "c releases")
	assert.Equal(t, b2.Grant, e.get(name), "granted to b's new call")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: gb}))
	assert.Equal(t, b2.Grant, e.get(name), "a Leave with another grant does not free it")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "b", Grant: b2.Grant}))
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the leaver's grant is freed: no one else waits")
	assert.Equal(t, int64(0), e.do("EXISTS", wk), "nothing is left of the queue")

	// A lock held by a grant whose release (or transfer) finds the key
	// not granted here yet takes its registration out of the queue, so
	// that the node does not grant it once the lock is gone.
	other := node.Key{Name: name, Token: "tok-y", Owner: "y"}
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, false))(node.Done, "y takes the key")
	gz := node.GrantValue("z", "g7")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits")
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, true))(node.Taken, "z's lock, granted elsewhere, releases here")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z2", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits again")
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, &node.Key{Name: name, Token: "tok-z3", Owner: "z"}, time.Minute))(node.Taken, "z's lock hands over within its client")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	e.resultOf(e.n.Release(e.ctx, &other, true))(node.Done, "y releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "granted to no one: nothing is left")
	// The same where the key is absent and another client waits.
	e.resultOf(e.n.Acquire(e.ctx, &other, time.Minute, false))(node.Done, "y takes the key again")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-w", Owner: "w"}, time.Minute, true))(node.Taken, "w waits")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-z4", Owner: "z", Grant: gz}, time.Minute, true))(node.Taken, "z waits")
	e.do("DEL", name) // y's key expires
	e.resultOf(h.Transfer(e.ctx, &node.Key{Name: name, Token: gz, Owner: "z"}, &node.Key{Name: name, Token: "tok-z5", Owner: "z"}, time.Minute))(node.Absent, "z's transfer yields to w")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "z"), "z's registration is gone")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "w"}))
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "nothing is left")

	// A release hands the key on to a head of another client than the
	// releaser's: its own client's place (here x's, ahead of c) is for
	// its next holder to take in its turn, or a stale one.
	x := node.Key{Name: name, Token: "tok-x1", Owner: "x"}
	e.resultOf(e.n.Acquire(e.ctx, &x, time.Minute, false))(node.Done, "x takes the key")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-x2", Owner: "x", Grant: node.GrantValue("x", "g5")}, time.Minute, true))(node.Taken, "x queues too")
	c3 := node.Key{Name: name, Token: "tok-c4", Owner: "c", Grant: node.GrantValue("c", "g6")}
	e.resultOf(e.n.Acquire(e.ctx, &c3, time.Minute, true))(node.Taken, "c queues behind x")
	e.resultOf(e.n.Release(e.ctx, &x, true))(node.Done, "x releases")
	assert.Equal(t, c3.Grant, e.get(name), "granted to c, not to x's own place")
	require.NoError(t, h.Leave(e.ctx, &node.Key{Name: name, Owner: "x"}))
	e.resultOf(e.n.Release(e.ctx, &node.Key{Name: name, Token: c3.Grant, Owner: "c"}, true))(node.Done, "c releases by its grant")
	assert.Equal(t, int64(0), e.do("EXISTS", name, wk), "nothing is left")

	// A watch for a grant message wakes for that message only: not for
	// an empty one (a lock named like the channel's key), not for another.
	if w, ok := e.n.(node.Watcher); ok {
		msg := node.GrantMessage(gb, "tok-b1")
		got := make(chan struct{}, 1)
		watch := w.Watch(node.ReservedKey(name, "b"), msg, got)
		select {
		case <-watch.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("the watch was not confirmed")
		}
		channel := node.ReleaseChannel(node.ReservedKey(name, "b"))
		for _, other := range []string{"", "b", msg + "x"} {
			e.do("PUBLISH", channel, other)
		}
		select {
		case <-got:
			t.Fatal("a grant watch woke for another message")
		case <-time.After(100 * time.Millisecond):
		}
		e.do("PUBLISH", channel, msg)
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			watch.Stop()
			t.Fatal("a grant watch did not wake for its message")
		}
		watch.Stop()
		e.do("PUBLISH", channel, msg)
		select {
		case <-got:
			t.Fatal("a message was sent after Stop")
		case <-time.After(200 * time.Millisecond): // and the node unsubscribes
		}
	}

	// A semaphore's slots (a shared queue) reserve, never grant.
	line := "lk:grant:line"
	s1 := node.Key{Name: "lk:grant:s1", Token: "tok-s", Owner: "a"}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &s1, time.Minute, false))(node.Done, "a takes the slot")
	sb := node.Key{Name: s1.Name, Token: "tok-sb", Owner: "b", Grant: node.GrantValue("b", "g4")}.InQueue(line)
	e.resultOf(e.n.Acquire(e.ctx, &sb, time.Minute, true))(node.Taken, "b waits in the line")
	e.resultOf(e.n.Release(e.ctx, &s1, true))(node.Done, "a releases the slot")
	assert.Equal(t, "~b", e.get(s1.Name), "reserved, not granted")
	e.resultOf(e.n.Acquire(e.ctx, &sb, time.Minute, true))(node.Done, "b takes it")
	e.resultOf(e.n.Release(e.ctx, &sb, true))(node.Done, "b releases")
	assert.Equal(t, int64(0), e.do("EXISTS", s1.Name, line), "nothing is left")
}

// testSharedQueue checks one queue under two keys (node.Key.Queue, a
// semaphore's slots): each release reserves its key for the head that
// has no key reserved yet, a waiter keeps its reservation as it renews
// its place through the other key, and each takes its own; a transfer
// within a client does not yield to the queue; a rollback hands the key
// on quietly where anyone is queued, and deletes it where no one is;
// nothing is left.
func testSharedQueue(t *testing.T, f Factory) {
	e, h := startHandoffer(t, f)
	names := []string{"lk:sq:permit:0", "lk:sq:permit:1"}
	q := "lk:sq:permits:2:line"
	key := func(i int, tok, owner string, ticket int64) *node.Key {
		k := node.Key{Name: names[i], Token: tok, Owner: owner, Ticket: ticket}.InQueue(q)
		return &k
	}
	h0, h1 := key(0, "tok-h0", "h", 0), key(1, "tok-h1", "h", 0)
	e.resultOf(e.n.Acquire(e.ctx, h0, time.Minute, false))(node.Done, "h takes key 0")
	e.resultOf(e.n.Acquire(e.ctx, h1, time.Minute, false))(node.Done, "h takes key 1")
	b := e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-b1", "b", 0), time.Minute, true))(node.Taken, "b waits at key 0").Ticket
	c := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-c1", "c", 0), time.Minute, true))(node.Taken, "c waits at key 1").Ticket
	assert.Greater(t, c, b, "one line: c came after b")
	assert.Equal(t, int64(0), e.do("EXISTS", node.WaitersKey(names[0])), "no queue of a key's own")

	toB := e.subscribe(t, node.ReservedKey(names[1], "b"))
	toC := e.subscribe(t, node.ReservedKey(names[1], "c"))
	e.resultOf(e.n.Release(e.ctx, h0, true))(node.Done, "h releases key 0")
	assert.Equal(t, "~b", e.get(names[0]), "key 0 reserved for b, the head")
	// b renews its place through key 1, which h still holds: its
	// reservation of key 0 stays on record.
	e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-b2", "b", b), time.Minute, true))(node.Taken, "b renews at key 1")
	e.resultOf(e.n.Release(e.ctx, h1, true))(node.Done, "h releases key 1")
	assert.Equal(t, "~c", e.get(names[1]), "key 1 goes to c: b has key 0 reserved")
	require.NotNil(t, receive(t, toC, 5*time.Second), "announced to c")
	assert.Nil(t, receive(t, toB, 100*time.Millisecond), "not to b")
	res := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-b3", "b", b), time.Minute, true))(node.Taken, "b does not take c's key")
	assert.Equal(t, b, res.Ticket, "and stays queued with its ticket")
	bk := key(0, "tok-b4", "b", b)
	ck := key(1, "tok-c2", "c", c)
	e.resultOf(e.n.Acquire(e.ctx, bk, time.Minute, true))(node.Done, "b takes key 0")
	e.resultOf(e.n.Acquire(e.ctx, ck, time.Minute, true))(node.Done, "c takes key 1")
	assert.Equal(t, int64(0), e.do("EXISTS", q), "nobody is left in the queue")

	d := e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-d1", "d", 0), time.Minute, true))(node.Taken, "d waits").Ticket
	ck2 := key(1, "tok-c3", "c", 0)
	e.resultOf(h.Transfer(e.ctx, ck, ck2, time.Minute))(node.Done, "c hands key 1 to its own next holder, d waiting")
	assert.Equal(t, "tok-c3", e.get(names[1]))
	toD := e.subscribe(t, node.ReservedKey(names[1], "d"))
	e.resultOf(e.n.Release(e.ctx, ck2, false))(node.Done, "a rollback of key 1")
	assert.Equal(t, "~d", e.get(names[1]), "handed on to d")
	require.NotNil(t, receive(t, toD, 5*time.Second), "and announced to d")
	dk := key(1, "tok-d2", "d", d)
	e.resultOf(e.n.Acquire(e.ctx, dk, time.Minute, true))(node.Done, "d takes key 1")
	e.resultOf(e.n.Release(e.ctx, bk, false))(node.Done, "a rollback of key 0, nobody queued")
	assert.Equal(t, int64(0), e.do("EXISTS", names[0]), "deletes it")
	e.resultOf(e.n.Release(e.ctx, dk, true))(node.Done, "d releases")

	// x, alone in line with key 0 reserved for it, does not take key 1
	// when it finds it free: it takes its own.
	e.resultOf(e.n.Acquire(e.ctx, h0, time.Minute, false))(node.Done, "h takes key 0 again")
	e.resultOf(e.n.Acquire(e.ctx, h1, time.Minute, false))(node.Done, "h takes key 1 again")
	x := e.resultOf(e.n.Acquire(e.ctx, key(0, "tok-x1", "x", 0), time.Minute, true))(node.Taken, "x waits").Ticket
	e.resultOf(e.n.Release(e.ctx, h0, true))(node.Done, "h releases key 0")
	assert.Equal(t, "~x", e.get(names[0]))
	e.resultOf(e.n.Release(e.ctx, h1, false))(node.Done, "a rollback of key 1, only x in line")
	assert.Equal(t, int64(0), e.do("EXISTS", names[1]), "x has a key reserved: key 1 is free")
	res = e.resultOf(e.n.Acquire(e.ctx, key(1, "tok-x2", "x", x), time.Minute, true))(node.Taken, "x does not take key 1")
	assert.Equal(t, x, res.Ticket)
	xk := key(0, "tok-x3", "x", x)
	e.resultOf(e.n.Acquire(e.ctx, xk, time.Minute, true))(node.Done, "x takes key 0")
	e.resultOf(e.n.Release(e.ctx, xk, true))(node.Done, "x releases")
	for _, k := range append(names, q) {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s is gone", k)
	}
}

// testShared checks node.Sharer: readers together, never with a writer,
// a waiting writer stops new readers, the last reader out hands the key
// to the waiting writer, lapsed readers stop blocking, nothing is left.
func testShared(t *testing.T, f Factory) {
	e := start(t, f)
	sh, ok := e.n.(node.Sharer)
	if !ok {
		t.Skip("the node is not a node.Sharer")
	}
	name := "lk:shared"
	rk, wk := node.ReadersKey(name), node.WaitersKey(name)
	key := func(tok, owner string) *node.Key { return &node.Key{Name: name, Token: tok, Owner: owner} }
	r1, r2, w := key("tok-r1", "a"), key("tok-r2", "b"), key("tok-w", "c")

	// Readers together; a writer's plain acquire, extend and release
	// touch nothing.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads")
	e.resultOf(sh.AcquireShared(e.ctx, r2, 2*time.Minute, false))(node.Done, "r2 reads too")
	e.resultOf(sh.AcquireShared(e.ctx, r2, 2*time.Minute, false))(node.Done, "the same command twice")
	assert.Equal(t, node.SharedValue, e.get(name))
	assert.InDelta(t, 2*time.Minute, e.pttl(name), float64(5*time.Second), "the marker lives as long as the last reader")
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w0", ""), time.Minute, false))(node.Taken, "a plain acquire")
	e.resultOf(e.n.Extend(e.ctx, key("tok-w0", ""), time.Hour))(node.Taken, "a writer's extend")
	e.resultOf(e.n.Release(e.ctx, key("tok-w0", ""), true))(node.Taken, "a writer's release")
	assert.Equal(t, node.SharedValue, e.get(name))
	if in, ok := e.n.(node.Inspector); ok {
		info, err := in.Inspect(e.ctx, name)
		require.NoError(t, err)
		assert.Equal(t, node.SharedValue, info.Token)
		assert.Equal(t, 2, info.Readers)
	}

	// A writer that waits (queued) keeps new readers out, not the ones
	// in; extend works for a reader in, never shortening.
	res := e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Taken, "the writer waits")
	assert.InDelta(t, 2*time.Minute, res.TTL, float64(5*time.Second), "for the readers' marker")
	res = e.resultOf(sh.AcquireShared(e.ctx, key("tok-r3", "d"), time.Minute, false))(node.Taken, "a new reader behind a waiting writer")
	assert.Positive(t, res.TTL)
	e.resultOf(sh.ExtendShared(e.ctx, r1, 3*time.Minute))(node.Done, "r1 extends")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Second))(node.Done, "a shorter extend")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "is not a shorter hold")
	e.resultOf(sh.ExtendShared(e.ctx, key("tok-x", ""), time.Minute))(node.Absent, "a token that is no reader")

	// The last reader out hands the key to the waiting writer, by name.
	sub := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.Equal(t, node.SharedValue, e.get(name), "r2 still reads")
	assert.InDelta(t, 2*time.Minute, e.pttl(name), float64(5*time.Second), "the marker now lasts as long as r2")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Absent, "r1 again")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, true))(node.Done, "r2 leaves, the last")
	assert.Equal(t, "~c", e.get(name), "reserved for the waiting writer")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no readers left")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "c", string(msg[2].([]byte)), "the release names the writer")
	e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Taken, "no reader while a writer holds")
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Minute))(node.Taken, "nor extends")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Taken, "nor releases")
	e.resultOf(e.n.Release(e.ctx, w, true))(node.Done, "the writer releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name))

	// A reader whose hold lapses stops blocking a writer; a rollback of
	// the last reader frees the key quietly.
	e.resultOf(sh.AcquireShared(e.ctx, r1, 200*time.Millisecond, false))(node.Done, "r1 reads briefly")
	time.Sleep(300 * time.Millisecond)
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w2", ""), time.Minute, false))(node.Done, "a writer once r1's hold has lapsed")
	e.resultOf(e.n.Release(e.ctx, key("tok-w2", ""), false))(node.Done, "")
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, false))(node.Done, "r2's rollback")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}
	// Where a writer waits, the rollback of the last reader hands the
	// key on to it as an Unlock would, announced to it alone.
	wq := key("tok-wq", "wq")
	toWq := e.subscribe(t, node.ReservedKey(name, "wq"))
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads again")
	e.resultOf(e.n.Acquire(e.ctx, wq, time.Minute, true))(node.Taken, "a writer waits")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, false))(node.Done, "r2's rollback")
	assert.Equal(t, "~wq", e.get(name), "reserved for the writer")
	require.NotNil(t, receive(t, toWq, 5*time.Second), "announced to it")
	e.resultOf(e.n.Acquire(e.ctx, wq, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(e.n.Release(e.ctx, wq, false))(node.Done, "and rolls it back")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}

	// Queued readers and writers take turns in the order they came: a
	// reader queued before a writer goes first, one queued after waits.
	w1, w2, w3 := key("tok-w1", "w1"), key("tok-w2", "w2"), key("tok-w3", "w3")
	rq := node.Key{Name: name, Token: "tok-rq", Owner: "rq"}
	e.resultOf(e.n.Acquire(e.ctx, w1, time.Minute, false))(node.Done, "w1 writes")
	t2 := e.resultOf(e.n.Acquire(e.ctx, w2, time.Minute, true))(node.Taken, "w2 waits").Ticket
	res = e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Taken, "rq waits")
	assert.Greater(t, res.Ticket, t2, "rq queued after w2")
	rq.Ticket = res.Ticket
	t3 := e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Taken, "w3 waits").Ticket
	assert.Greater(t, t3, rq.Ticket)
	toW2, all := e.subscribe(t, node.ReservedKey(name, "w2")), e.subscribe(t, name)
	e.resultOf(e.n.Release(e.ctx, w1, true))(node.Done, "w1 releases")
	assert.Equal(t, "~w2", e.get(name), "reserved for w2, queued first")
	e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Taken, "rq behind w2")
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: name, Token: "tok-w2b", Owner: "w2", Ticket: t2}, time.Minute, true))(node.Done, "w2 takes its turn")
	msg = receive(t, toW2, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "w2", string(msg[2].([]byte)))
	e.resultOf(e.n.Release(e.ctx, key("tok-w2b", "w2"), true))(node.Done, "w2 releases")
	assert.Equal(t, int64(0), e.do("EXISTS", name), "the head is a reader: the key is free, no reservation")
	msg = receive(t, all, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "", string(msg[2].([]byte)), "announced to all")
	w3.Ticket = t3
	e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Taken, "w3 waits for the reader queued before it")
	e.resultOf(sh.AcquireShared(e.ctx, &rq, time.Minute, true))(node.Done, "rq goes in")
	assert.Equal(t, int64(0), e.do("HEXISTS", wk, "rq"), "rq left the queue")
	e.resultOf(sh.AcquireShared(e.ctx, key("tok-r9", ""), time.Minute, false))(node.Taken, "a reader that comes after w3")
	e.resultOf(sh.ReleaseShared(e.ctx, &rq, true))(node.Done, "rq leaves")
	assert.Equal(t, "~w3", e.get(name), "reserved for w3")
	e.resultOf(e.n.Acquire(e.ctx, w3, time.Minute, true))(node.Done, "w3 writes")
	e.resultOf(e.n.Release(e.ctx, w3, true))(node.Done, "w3 releases")
	for _, k := range []string{name, rk, wk} {
		assert.Equal(t, int64(0), e.do("EXISTS", k), "%s left behind", k)
	}
}

// testSharedAlone checks node.Sharer for a reader alone on a key, which
// is held in the key's value (node.SharedValue + ":" + token) with no
// readers hash: it shuts writers out, extends, releases, hands the key to
// a waiting writer and rolls back as a reader among others does, and a
// second reader keeps its hold.
func testSharedAlone(t *testing.T, f Factory) {
	e := start(t, f)
	sh, ok := e.n.(node.Sharer)
	if !ok {
		t.Skip("the node is not a node.Sharer")
	}
	name := "lk:alone"
	rk, wk := node.ReadersKey(name), node.WaitersKey(name)
	key := func(tok, owner string) *node.Key { return &node.Key{Name: name, Token: tok, Owner: owner} }
	r1, r2, w, other := key("tok-r1", "ra"), key("tok-r2", "rb"), key("tok-w", "c"), key("tok-x", "")
	empty := func(what string) {
		t.Helper()
		for _, k := range []string{name, rk, wk} {
			assert.Equal(t, int64(0), e.do("EXISTS", k), "%s: %s left behind", what, k)
		}
	}

	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "held in the value")
	assert.Equal(t, int64(0), e.do("EXISTS", rk), "no readers hash")
	assert.InDelta(t, time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(e.n.Acquire(e.ctx, key("tok-w0", ""), time.Minute, false))(node.Taken, "a writer's acquire")
	e.resultOf(e.n.Extend(e.ctx, key("tok-w0", ""), time.Hour))(node.Taken, "a writer's extend")
	e.resultOf(e.n.Release(e.ctx, key("tok-w0", ""), true))(node.Taken, "a writer's release")
	e.resultOf(sh.ExtendShared(e.ctx, r1, 3*time.Minute))(node.Done, "r1 extends")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second))
	e.resultOf(sh.ExtendShared(e.ctx, r1, time.Second))(node.Done, "a shorter extend")
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "is not a shorter hold")
	e.resultOf(sh.ExtendShared(e.ctx, other, time.Minute))(node.Absent, "a token that is no reader extends nothing")
	e.resultOf(sh.ReleaseShared(e.ctx, other, true))(node.Absent, "nor releases")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name))
	if in, ok := e.n.(node.Inspector); ok {
		info, err := in.Inspect(e.ctx, name)
		require.NoError(t, err)
		assert.Equal(t, node.SharedValue, info.Token, "inspect names a reader alone as readers")
		assert.Equal(t, 1, info.Readers)
	}

	// A second reader moves the first to the hash, its hold unchanged.
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Done, "r2 reads too")
	assert.Equal(t, node.SharedValue, e.get(name))
	assert.InDelta(t, 3*time.Minute, e.pttl(name), float64(5*time.Second), "r1's hold kept")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.InDelta(t, time.Minute, e.pttl(name), float64(5*time.Second), "the marker now lasts as long as r2")
	assert.LessOrEqual(t, e.pttl(rk), e.pttl(name)+time.Second, "the readers hash lives no longer than the marker")
	e.resultOf(sh.ReleaseShared(e.ctx, r2, true))(node.Done, "r2 leaves")
	empty("both left")

	// The same command twice; a rollback frees the key quietly.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "the same command twice")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "still held alone, in the value")
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, true))(node.Done, "and once more, waiting")
	assert.Equal(t, node.SharedValue+":tok-r1", e.get(name), "still held alone, in the value")
	e.resultOf(sh.ReleaseShared(e.ctx, r1, false))(node.Done, "r1's rollback")
	empty("rolled back")

	// The reader alone hands the key to a waiting writer, by name.
	e.resultOf(sh.AcquireShared(e.ctx, r1, time.Minute, false))(node.Done, "r1 reads alone")
	res := e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Taken, "the writer waits")
	assert.InDelta(t, time.Minute, res.TTL, float64(5*time.Second), "for r1's hold")
	e.resultOf(sh.AcquireShared(e.ctx, r2, time.Minute, false))(node.Taken, "a new reader behind the waiting writer")
	sub := e.subscribe(t, node.ReservedKey(name, "c"))
	e.resultOf(sh.ReleaseShared(e.ctx, r1, true))(node.Done, "r1 leaves")
	assert.Equal(t, "~c", e.get(name), "reserved for the waiting writer")
	msg := receive(t, sub, 5*time.Second)
	require.NotNil(t, msg)
	assert.Equal(t, "c", string(msg[2].([]byte)), "the release names the writer")
	e.resultOf(e.n.Acquire(e.ctx, w, time.Minute, true))(node.Done, "the writer takes it")
	e.resultOf(e.n.Release(e.ctx, w, true))(node.Done, "the writer releases")
	empty("handed on")
}

// serverMicros is the server's TIME in microseconds.
func serverMicros(t *testing.T, e *env) int64 {
	t.Helper()
	v, _ := e.do("TIME").([]any)
	require.Len(t, v, 2)
	var s, us int64
	_, err := fmt.Sscan(string(v[0].([]byte)), &s)
	require.NoError(t, err)
	_, err = fmt.Sscan(string(v[1].([]byte)), &us)
	require.NoError(t, err)
	return s*1_000_000 + us
}

func testClose(t *testing.T, f Factory) {
	e := start(t, f)
	c, ok := e.n.(io.Closer)
	if !ok {
		t.Skip("the node is not an io.Closer")
	}
	e.resultOf(e.n.Acquire(e.ctx, &node.Key{Name: "lk:close", Token: "tok"}, time.Minute, false))(node.Done, "acquire")
	require.NoError(t, c.Close())
	_, err := e.n.Release(e.ctx, &node.Key{Name: "lk:close", Token: "tok"}, false)
	require.ErrorIs(t, err, node.ErrClosed, "a call after Close")
	e.do("DEL", "lk:close")
}

// testTomb: a release with Key.Tomb that does not find its token leaves
// a tombstone (node.TombKey) for Tomb; while it lives, a waiting Acquire
// (a script) of that token takes neither a free key nor one reserved for
// its owner, and a Transfer to it sets nothing. A release without Tomb,
// or one that finds its token, leaves none.
func testTomb(t *testing.T, f Factory) {
	e := start(t, f)
	holder := node.Key{Name: "lk:tomb", Token: "holder", Owner: "a"}
	dead := node.Key{Name: holder.Name, Token: "dead", Owner: "w"}
	tomb := node.TombKey(dead.Name, dead.Token)
	e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder")

	plain := node.Key{Name: holder.Name, Token: "plain"}
	e.resultOf(e.n.Release(e.ctx, &plain, false))(node.Taken, "a rollback without Tomb, another token there")
	assert.Equal(t, int64(0), e.do("EXISTS", node.TombKey(plain.Name, plain.Token)), "no Tomb, no tombstone")

	rb := dead
	rb.Tomb = 10 * time.Second
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Taken, "a rollback with Tomb, another token there")
	assert.Equal(t, "holder", e.get(holder.Name), "the holder's key stays")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone of the token")
	assert.InDelta(t, 10*time.Second, e.pttl(tomb), float64(time.Second), "it lives Tomb")

	// The holder's Unlock frees the key; the attempt rolled back above
	// runs now, late: as a waiting Acquire (a script) it sets nothing.
	e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	res := e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late waiting acquire of a token with a tombstone, the key free")
	assert.LessOrEqual(t, res.TTL, node.WaiterLease, "no holder: at most a waiter's lease")
	assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
	h, queues := e.n.(node.Handoffer)
	if queues {
		// Reserved for the late attempt's owner, as an Unlock hands it
		// on: still not taken, the reservation left for its live call.
		e.do("SET", dead.Name, "~"+dead.Owner, "PX", 60000)
		e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late waiting acquire of a token with a tombstone, the key reserved for its owner")
		assert.Equal(t, "~"+dead.Owner, e.get(dead.Name), "the reservation stays")
		e.do("DEL", dead.Name)
		require.NoError(t, h.Leave(e.ctx, &dead))

		// A transfer to a token with a tombstone (the successor's
		// rollback overtook it) sets nothing, where the holder's
		// release has freed the key.
		e.resultOf(h.Transfer(e.ctx, &holder, &dead, time.Minute))(node.Taken, "a late transfer to a token with a tombstone, the key free")
		assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
		e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder again")
		e.resultOf(h.Transfer(e.ctx, &holder, &dead, time.Minute))(node.Taken, "a late transfer to a token with a tombstone, the holder's key there")
		assert.Equal(t, "holder", e.get(holder.Name), "nothing changed")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
	}

	if fe, ok := e.n.(node.Fencer); ok {
		// A late fenced acquire of a token with a tombstone sets
		// nothing either, waiting or not.
		e.resultOf(fe.AcquireFenced(e.ctx, &node.Key{Name: dead.Name, Token: dead.Token}, time.Minute, time.Hour))(node.Taken, "a late fenced acquire of a token with a tombstone, the key free")
		assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
		if queues {
			e.resultOf(fe.AcquireFenced(e.ctx, &dead, time.Minute, time.Hour))(node.Taken, "a late waiting fenced acquire of a token with a tombstone, the key free")
			assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
			require.NoError(t, h.Leave(e.ctx, &dead))
		}
		e.do("DEL", node.FenceKey(dead.Name))
	}

	// A release with Tomb that finds its token frees the key, and
	// leaves a tombstone all the same: another command of the token (a
	// re-seed after the acquire) may still be on its way.
	e.do("DEL", tomb)
	e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Done, "the token without a tombstone")
	e.resultOf(e.n.Release(e.ctx, &rb, false))(node.Done, "a release with Tomb that finds its token")
	assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone")
	e.resultOf(e.n.Acquire(e.ctx, &dead, time.Minute, true))(node.Taken, "a late acquire of the token after it")
	assert.Equal(t, int64(0), e.do("EXISTS", dead.Name), "the key stays free")
	if queues {
		require.NoError(t, h.Leave(e.ctx, &dead)) // it queued its owner
	}
	e.do("DEL", tomb)
	if queues {
		// The requeueing rollback carries Tomb too.
		rq := rb
		rq.Ticket, rq.Requeue = 7, true
		e.resultOf(e.n.Acquire(e.ctx, &holder, time.Minute, false))(node.Done, "the holder again")
		e.resultOf(e.n.Release(e.ctx, &rq, false))(node.Taken, "a requeueing rollback with Tomb, another token there")
		assert.Equal(t, int64(1), e.do("EXISTS", tomb), "a tombstone of the token")
		e.resultOf(e.n.Release(e.ctx, &holder, true))(node.Done, "the holder's Unlock")
		e.do("DEL", tomb, node.WaitersKey(dead.Name))
	}
}
