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
//     requeue), and to release_shared.lua as ARGV[3]: a release after
//     a command that may run late leaves a tombstone (node.TombKey),
//     and no script sets a key to a token that has one.
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
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/url"
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
	t.Run("FencedGrant", func(t *testing.T) { testFencedGrant(t, f) })
	t.Run("SharedQueue", func(t *testing.T) { testSharedQueue(t, f) })
	t.Run("Grant", func(t *testing.T) { testGrant(t, f) })
	t.Run("LeaveByCall", func(t *testing.T) { testLeaveByCall(t, f) })
	t.Run("LeaveAll", func(t *testing.T) { testLeaveAll(t, f) })
	t.Run("Shared", func(t *testing.T) { testShared(t, f) })
	t.Run("SharedAlone", func(t *testing.T) { testSharedAlone(t, f) })
	t.Run("Tomb", func(t *testing.T) { testTomb(t, f) })
	t.Run("Announce", func(t *testing.T) { testAnnounce(t, f) })
	t.Run("ConfirmAnnounce", func(t *testing.T) { testConfirmAnnounce(t, f) })
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

// resultOf checks a call's outcome, written e.resultOf(call)(want, what).
func (e *env) resultOf(res node.Result, err error) func(node.Status, string) node.Result {
	return func(want node.Status, what string) node.Result {
		e.t.Helper()
		return e.result(res, err, want, what)
	}
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

// deadlineKey is the key calls uses.
var deadlineKey = node.Key{Name: "lk:deadline", Token: "tok"}

const password = "s3cret-pw-9"
