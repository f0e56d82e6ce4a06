package goredis_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mode is how a test's go-redis clients are set up: with
// ContextTimeoutEnabled (go-redis bounds reads and writes by the
// context) or without (its default: the node must bound them itself),
// and which RESP version they speak.
type mode struct {
	name     string
	bounded  bool
	protocol int
}

var modes = []mode{
	{"ctx-timeout/resp3", true, 3},
	{"default/resp3", false, 3},
	{"ctx-timeout/resp2", true, 2},
	{"default/resp2", false, 2},
}

// eachMode runs f as a subtest per mode.
func eachMode(t *testing.T, f func(t *testing.T, m mode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// client returns a go-redis client for the server at addr (host:port) in
// mode m, with opts applied last, closed when the test ends.
func client(t *testing.T, addr string, m mode, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: m.bounded, Protocol: m.protocol}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// server starts a throw-away redis-server and returns its host:port and
// an admin connection. When the test ends, the server must hold no keys.
func server(t *testing.T) (string, *redistest.Admin) {
	t.Helper()
	url := redistest.Start(t)
	admin := redistest.Dial(t, url)
	t.Cleanup(func() {
		n, err := admin.Do(context.Background(), "DBSIZE")
		if assert.NoError(t, err) {
			assert.Equal(t, int64(0), n, "keys left behind")
		}
	})
	return strings.TrimPrefix(url, "redis://"), admin
}

// del deletes keys on the server behind admin.
func del(t *testing.T, admin *redistest.Admin, keys ...string) {
	t.Helper()
	args := append([]any{"DEL"}, anys(keys)...)
	_, err := admin.Do(context.Background(), args...)
	require.NoError(t, err)
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// TestGrantOnlyWithoutResends: a waiting acquire asks for a grant only
// through a client that sends each command once (MaxRetries -1); through
// one that may resend, the release reserves the key for it instead.
func TestGrantOnlyWithoutResends(t *testing.T) {
	addr, admin := server(t)
	ctx := context.Background()
	for _, tc := range []struct {
		retries int
		want    string
	}{{-1, node.GrantValue("b", "g")}, {0, "~b"}, {3, "~b"}} {
		c := client(t, addr, modes[0], func(o *redis.Options) { o.MaxRetries = tc.retries })
		n := goredis.New(c)
		holder := node.Key{Name: "k", Token: "tok-a", Owner: "a"}
		_, err := n.Acquire(ctx, &holder, time.Minute, false)
		require.NoError(t, err)
		_, err = n.Acquire(ctx, &node.Key{Name: "k", Token: "tok-b", Owner: "b", Grant: node.GrantValue("b", "g")}, time.Minute, true)
		require.NoError(t, err)
		_, err = n.Release(ctx, &holder, true)
		require.NoError(t, err)
		v, err := admin.Do(ctx, "GET", "k")
		require.NoError(t, err)
		assert.Equal(t, tc.want, string(v.([]byte)), "MaxRetries %d", tc.retries)
		del(t, admin, "k", node.WaitersKey("k"))
	}
}

func TestScriptsAreTheNodePackages(t *testing.T) {
	s := node.LuaScripts()
	for _, sc := range []node.Script{s.Acquire, s.Extend, s.Release, s.Inspect, s.AcquireFenced, s.ConfirmFence, s.Transfer, s.Leave,
		s.AcquireShared, s.ExtendShared, s.ReleaseShared} {
		assert.Equal(t, sc.Hash, redis.NewScript(sc.Src).Hash())
	}
	assert.Equal(t, 2, s.Acquire.Keys)
	assert.Equal(t, 2, s.Transfer.Keys)
	assert.Equal(t, 1, s.Extend.Keys)
	assert.Equal(t, 3, s.Release.Keys) // the key, its waiters, an election's record (optional)
	assert.Equal(t, 2, s.Leave.Keys)
	assert.Equal(t, 2, s.Inspect.Keys)
	assert.Equal(t, 3, s.AcquireShared.Keys)
	assert.Equal(t, 2, s.ExtendShared.Keys)
	assert.Equal(t, 3, s.ReleaseShared.Keys)
	assert.Equal(t, 3, s.AcquireFenced.Keys) // the key, its fence counter, its waiters
	assert.Equal(t, 3, s.ConfirmFence.Keys)  // the key, its fence counter, a campaign's record (optional)
}

// blackhole starts a loopback server that accepts connections and reads
// from them, and never answers.
func blackhole(t *testing.T) string {
	t.Helper()
	return redistest.Serve(t, func(c net.Conn) {
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
}

// ops are one call of each of a node's operations.
var ops = []struct {
	name string
	call func(ctx context.Context, n node.Node) error
}{
	{"acquire", func(ctx context.Context, n node.Node) error {
		_, err := n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
		return err
	}},
	{"extend", func(ctx context.Context, n node.Node) error {
		_, err := n.Extend(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute)
		return err
	}},
	{"release", func(ctx context.Context, n node.Node) error {
		_, err := n.Release(ctx, &node.Key{Name: "k", Token: "a"}, true)
		return err
	}},
	{"inspect", func(ctx context.Context, n node.Node) error {
		_, err := n.(node.Inspector).Inspect(ctx, "k")
		return err
	}},
	{"acquire", func(ctx context.Context, n node.Node) error { // fenced
		_, err := n.(node.Fencer).AcquireFenced(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, time.Minute)
		return err
	}},
	{"confirm", func(ctx context.Context, n node.Node) error {
		_, err := n.(node.Fencer).ConfirmFence(ctx, &node.Key{Name: "k", Token: "a"}, 1, time.Minute)
		return err
	}},
}

// slack is how much later than its deadline a call may return, for
// scheduling on a busy machine.
const slack = 150 * time.Millisecond

// within runs call with a context of deadline d and checks that it
// returns ErrTimeout by then (plus slack).
func within(t *testing.T, d time.Duration, op string, call func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, node.ErrTimeout, "%v", err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "a node timeout must not look like the caller's context ending")
	var ne *node.Error
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, op, ne.Op)
	assert.Less(t, took, d+slack, "%s took %v for a %v deadline", op, took, d)
}

// TestBlackhole: against a server that accepts and never answers, every
// operation returns ErrTimeout at its context's deadline, also without
// ContextTimeoutEnabled and with go-redis' own timeouts far longer: the
// first calls wait in the handshake (HELLO) of a new connection, later
// ones for a pooled connection (the pool holds one).
func TestBlackhole(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		addr := blackhole(t)
		c := client(t, addr, m, func(o *redis.Options) {
			o.PoolSize = 1
			o.DialTimeout = 10 * time.Second
			o.ReadTimeout = 10 * time.Second
			o.WriteTimeout = 10 * time.Second
			o.PoolTimeout = 10 * time.Second
		})
		n := goredis.New(c)
		for _, op := range ops {
			within(t, 100*time.Millisecond, op.name, func(ctx context.Context) error { return op.call(ctx, n) })
		}
		// Calls at once: each waits for the one connection, or for its
		// handshake.
		errs := make(chan error, len(ops))
		for _, op := range ops {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				err := op.call(ctx, n)
				if took := time.Since(start); took > 100*time.Millisecond+slack {
					err = errors.Join(err, errors.New("took "+took.String()))
				}
				errs <- err
			}()
		}
		for range ops {
			err := <-errs
			assert.ErrorIs(t, err, node.ErrTimeout)
			assert.NotContains(t, err.Error(), "took")
		}
	})
}

// TestTLSBlackhole: go-redis' TLS dialer ignores the context
// (tls.DialWithDialer, bounded by DialTimeout only), yet a call against a
// server that accepts and never answers the handshake returns at its
// deadline: the dial goes on in go-redis' background.
func TestTLSBlackhole(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		c := client(t, blackhole(t), m, func(o *redis.Options) {
			o.TLSConfig = &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
			o.DialTimeout = 2 * time.Second
			o.DialerRetries = 1
		})
		n := goredis.New(c)
		for _, op := range ops[:2] {
			within(t, 100*time.Millisecond, op.name, func(ctx context.Context) error { return op.call(ctx, n) })
		}
	})
}

// TestDefaultTimeout: a call whose context has no deadline ends at the
// node's timeout.
func TestDefaultTimeout(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		c := client(t, blackhole(t), m, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
		n := goredis.NewWithOptions(c, goredis.Options{Timeout: 200 * time.Millisecond})
		start := time.Now()
		_, err := n.Acquire(context.Background(), &node.Key{Name: "k", Token: "a"}, time.Minute, false)
		require.ErrorIs(t, err, node.ErrTimeout)
		assert.Less(t, time.Since(start), 200*time.Millisecond+slack)
	})
	if testing.Short() {
		return
	}
	c := client(t, blackhole(t), modes[1])
	start := time.Now()
	_, err := goredis.New(c).Acquire(context.Background(), &node.Key{Name: "k", Token: "a"}, time.Minute, false)
	require.ErrorIs(t, err, node.ErrTimeout)
	assert.InDelta(t, goredis.DefaultTimeout, time.Since(start), float64(slack))
}

// TestEndedContext: nothing is sent for a context that has already ended.
func TestEndedContext(t *testing.T) {
	addr, admin := server(t)
	n := goredis.New(client(t, addr, modes[1]))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
	require.ErrorIs(t, err, node.ErrTimeout)
	v, err := admin.Do(context.Background(), "EXISTS", "k")
	require.NoError(t, err)
	assert.Equal(t, int64(0), v)
}

// stall makes the server behind admin busy for d (DEBUG SLEEP) and
// returns a channel that yields the command's error when it ends.
func stall(t *testing.T, admin *redistest.Admin, d time.Duration) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := admin.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds())
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the server is asleep
	return done
}

// TestLateReply: a call whose reply comes after its deadline fails with
// ErrTimeout at the deadline, and the late reply (the SET did apply) is
// not taken for the next call's.
func TestLateReply(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		addr, admin := server(t)
		n := goredis.New(client(t, addr, m, func(o *redis.Options) { o.PoolSize = 1 }))
		bg := context.Background()
		k := node.Key{Name: "k", Token: "a"}
		_, err := n.(node.Inspector).Inspect(bg, "k") // a connection, and the scripts loaded
		require.NoError(t, err)
		_, err = n.Release(bg, &k, false)
		require.NoError(t, err)
		_, err = n.Acquire(bg, &node.Key{Name: "warm", Token: "w"}, time.Minute, false)
		require.NoError(t, err)
		del(t, admin, "warm")

		stalled := stall(t, admin, 300*time.Millisecond)
		within(t, 100*time.Millisecond, "acquire", func(ctx context.Context) error {
			_, err := n.Acquire(ctx, &k, time.Minute, false)
			return err
		})
		require.NoError(t, <-stalled)
		res, err := n.Release(bg, &k, false)
		require.NoError(t, err)
		assert.Equal(t, node.Done, res.Status, "the late SET applied; its OK is not the release's reply")
	})
}

// TestNoLateSend: a command is never sent after its call has returned.
// Here the call times out while its new connection's handshake (HELLO)
// waits for a stalled server; without ContextTimeoutEnabled go-redis
// finishes the handshake once the server wakes and then writes the
// command, which the node refuses to let out: the SET NX must not apply
// after the caller was told it timed out (its rollback may already have
// run). The connection, on which nothing was sent, serves the next call.
func TestNoLateSend(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		addr, admin := server(t)
		// HELLO is the handshake's only round trip (as the package
		// comment advises): go-redis' CLIENT SETINFO pipeline would notice
		// the ended context and drop the connection before the command.
		n := goredis.New(client(t, addr, m, func(o *redis.Options) {
			o.PoolSize = 1
			o.DisableIdentity = true
			o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		}))
		bg := context.Background()
		// The script cached, as on any node in use: the late EVALSHA
		// would run, not answer NOSCRIPT.
		_, err := admin.Do(bg, "SCRIPT", "LOAD", node.LuaScripts().Acquire.Src)
		require.NoError(t, err)
		before := admin.Connections(t)
		stalled := stall(t, admin, 300*time.Millisecond)
		within(t, 100*time.Millisecond, "acquire", func(ctx context.Context) error {
			_, err := n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
			return err
		})
		require.NoError(t, <-stalled)
		time.Sleep(200 * time.Millisecond) // the handshake ends, and the command would follow
		v, err := admin.Do(bg, "EXISTS", "k")
		require.NoError(t, err)
		assert.Equal(t, int64(0), v, "the acquire was sent after its call returned")
		res, err := n.Release(bg, &node.Key{Name: "k", Token: "a"}, false)
		require.NoError(t, err)
		assert.Equal(t, node.Absent, res.Status)
		if !m.bounded {
			// ContextTimeoutEnabled drops the connection at the deadline.
			assert.Equal(t, before+1, admin.Connections(t), "new connections")
		}

		// A key too long for go-redis' write buffer: part of the command
		// may have been flushed before the guard refused, so the
		// connection goes, and the server never sees a whole command.
		if m.bounded {
			return
		}
		_, err = admin.Do(bg, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		require.NoError(t, err)
		long := node.Key{Name: strings.Repeat("k", 40<<10), Token: "a"}
		stalled = stall(t, admin, 300*time.Millisecond)
		within(t, 100*time.Millisecond, "acquire", func(ctx context.Context) error {
			_, err := n.Acquire(ctx, &long, time.Minute, false)
			return err
		})
		require.NoError(t, <-stalled)
		time.Sleep(200 * time.Millisecond)
		v, err = admin.Do(bg, "DBSIZE")
		require.NoError(t, err)
		assert.Equal(t, int64(0), v, "the acquire was sent after its call returned")
		res, err = n.Release(bg, &long, false)
		require.NoError(t, err)
		assert.Equal(t, node.Absent, res.Status)
	})
}

// TestAuth: a wrong password or none is ErrAuth, and no error tells the
// password; an ACL user without the right to run scripts is ErrAuth too.
func TestAuth(t *testing.T) {
	addr, admin := server(t)
	_, err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">right-pw", "~*", "&*", "+@all")
	require.NoError(t, err)
	_, err = admin.Do(context.Background(), "ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "&*", "+@read")
	require.NoError(t, err)
	_, err = admin.Do(context.Background(), "CONFIG", "SET", "requirepass", "default-pw")
	require.NoError(t, err)
	eachMode(t, func(t *testing.T, m mode) {
		for _, cred := range []struct{ user, pw string }{
			{"", "wrong-secret-1"}, {"locker", "wrong-secret-2"}, {"", ""}, {"reader", "reader-pw"},
		} {
			c := client(t, addr, m, func(o *redis.Options) { o.Username, o.Password = cred.user, cred.pw })
			n := goredis.New(c)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
			cancel()
			require.ErrorIs(t, err, node.ErrAuth, "user %q: %v", cred.user, err)
			if cred.pw != "" {
				assert.NotContains(t, err.Error(), cred.pw)
			}
			assert.NotContains(t, err.Error(), "default-pw")
			assert.NotContains(t, n.(interface{ String() string }).String(), "pw")
		}
		c := client(t, addr, m, func(o *redis.Options) { o.Username, o.Password = "locker", "right-pw" })
		n := goredis.New(c)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		k := node.Key{Name: "k", Token: "a"}
		res, err := n.Acquire(ctx, &k, time.Minute, false)
		require.NoError(t, err)
		require.Equal(t, node.Done, res.Status)
		res, err = n.Release(ctx, &k, true)
		require.NoError(t, err)
		require.Equal(t, node.Done, res.Status)
	})
	// The DBSIZE check at the end must get in.
	_, err = admin.Do(context.Background(), "AUTH", "default-pw")
	require.NoError(t, err)
}

// TestNotRedis: a peer that answers something else than RESP is
// ErrProtocol.
func TestNotRedis(t *testing.T) {
	addr := redistest.Serve(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		c.Close()
	})
	eachMode(t, func(t *testing.T, m mode) {
		n := goredis.New(client(t, addr, m))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := n.Release(ctx, &node.Key{Name: "k", Token: "a"}, true)
		require.ErrorIs(t, err, node.ErrProtocol, "%v", err)
	})
}

// TestUnreachable: a port where nothing listens is ErrUnreachable within
// a Redlock-sized deadline once go-redis neither dials again (DialerRetries
// 1) nor waits between its retries of the command (MinRetryBackoff -1);
// with its defaults (five dials 100 ms apart) the deadline comes first, and
// it is ErrTimeout, at the deadline.
func TestUnreachable(t *testing.T) {
	addr := redistest.DeadAddr(t)
	acquire := func(n node.Node) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := n.Acquire(ctx, &node.Key{Name: "k", Token: "a"}, time.Minute, false)
			return err
		}
	}
	eachMode(t, func(t *testing.T, m mode) {
		n := goredis.New(client(t, addr, m, func(o *redis.Options) { o.DialerRetries = 1; o.MinRetryBackoff = -1 }))
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := acquire(n)(ctx)
		require.ErrorIs(t, err, node.ErrUnreachable, "%v", err)
		assert.NoError(t, ctx.Err(), "the deadline passed")

		within(t, 100*time.Millisecond, "acquire", acquire(goredis.New(client(t, addr, m))))
	})
}

// TestClosedClient: a node over a closed client fails with ErrClosed.
func TestClosedClient(t *testing.T) {
	addr, _ := server(t)
	eachMode(t, func(t *testing.T, m mode) {
		c := client(t, addr, m)
		n := goredis.New(c)
		require.NoError(t, c.Close())
		_, err := n.Acquire(context.Background(), &node.Key{Name: "k", Token: "a"}, time.Minute, false)
		require.ErrorIs(t, err, node.ErrClosed, "%v", err)
	})
}

// TestAddr: one master has its address; a cluster, a ring or a failover
// client has none, and redlock.New refuses it.
func TestAddr(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390", Password: "secret-pw"})
	defer c.Close()
	n := goredis.New(c)
	assert.Equal(t, "127.0.0.1:6390", n.Addr())
	assert.NotContains(t, n.(interface{ String() string }).String(), "secret-pw")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:6391"}})
	defer cc.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:6392"}})
	defer ring.Close()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:26379"}})
	defer fc.Close()
	for _, uc := range []redis.UniversalClient{cc, ring, fc} {
		n := goredis.New(uc)
		assert.Empty(t, n.Addr(), "%T", uc)
		_, err := redlock.New([]node.Node{n})
		require.ErrorIs(t, err, redlock.ErrInvalid)
		assert.Contains(t, err.Error(), "has no address")
	}

	assert.Nil(t, goredis.New(nil))
	_, err := redlock.New(goredis.Nodes(c, nil))
	require.ErrorIs(t, err, redlock.ErrInvalid)

	d := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6390"})
	defer d.Close()
	_, err = redlock.New(goredis.Nodes(c, d))
	require.ErrorIs(t, err, redlock.ErrInvalid, "the same master twice")
}

// TestClient: a redlock.Client over three goredis nodes locks, extends,
// unlocks, and leaves the clients open.
func TestClient(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		var clients []redis.UniversalClient
		var admins []*redistest.Admin
		for range 3 {
			addr, admin := server(t)
			clients = append(clients, client(t, addr, m))
			admins = append(admins, admin)
		}
		rl, err := redlock.New(goredis.Nodes(clients...), redlock.WithTTL(5*time.Second), redlock.WithFencing())
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := rl.Lock(ctx, "res")
		require.NoError(t, err)
		assert.Positive(t, l.Fence())
		_, err = rl.TryLock(ctx, "res")
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, rl.Close())
		for i, c := range clients {
			require.NoError(t, c.Ping(ctx).Err(), "client %d closed by the redlock client", i)
			del(t, admins[i], node.FenceKey("res"))
		}
	})
}

// BenchmarkAcquireRelease: one Acquire and one Release on one node, with
// and without ContextTimeoutEnabled (allocations: go test -benchmem).
func BenchmarkAcquireRelease(b *testing.B) {
	url := redistest.Start(b)
	for _, m := range modes[:2] {
		b.Run(m.name, func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(url, "redis://"), ContextTimeoutEnabled: m.bounded,
				DisableIdentity: true, MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
			defer c.Close()
			n := goredis.New(c)
			k := node.Key{Name: "bench", Token: "0123456789abcdef0123456789abcdef"}
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if _, err := n.Acquire(ctx, &k, time.Minute, false); err != nil {
					b.Fatal(err)
				}
				if _, err := n.Release(ctx, &k, false); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}

// TestNoScriptsRefusedAtAcquire: on a server with EVAL and EVALSHA
// renamed away, the node's acquire (a script here, never a plain SET)
// fails with node.ErrNoScripts, a refusal for good, and sets nothing: no
// lock is taken that could not be released. Shared acquires too.
func TestNoScriptsRefusedAtAcquire(t *testing.T) {
	url := redistest.StartArgs(t, "--rename-command", "EVAL", "", "--rename-command", "EVALSHA", "")
	admin := redistest.Dial(t, url)
	addr := strings.TrimPrefix(url, "redis://")
	eachMode(t, func(t *testing.T, m mode) {
		n := goredis.New(client(t, addr, m))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		k := node.NewKey("k", "tok")
		res, err := n.Acquire(ctx, &k, time.Minute, false)
		require.ErrorIs(t, err, node.ErrNoScripts)
		assert.True(t, node.Permanent(err))
		assert.Equal(t, node.Unknown, res.Status)
		_, err = n.(node.Sharer).AcquireShared(ctx, &k, time.Minute, false)
		require.ErrorIs(t, err, node.ErrNoScripts, "shared")
		_, err = n.Release(ctx, &k, true)
		require.ErrorIs(t, err, node.ErrNoScripts, "release")
		keys, err := admin.Do(ctx, "DBSIZE")
		require.NoError(t, err)
		assert.EqualValues(t, 0, keys)
	})
}

// TestDialClusterRefusesWhatIsNoCluster: no ClusterClient, or one whose
// node is not in cluster mode, is redlock.ErrInvalid (the cluster itself
// is tested in integration/rediscluster).
func TestDialClusterRefusesWhatIsNoCluster(t *testing.T) {
	_, err := goredis.DialCluster(nil)
	require.ErrorIs(t, err, redlock.ErrInvalid)
	addr, _ := server(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	defer cc.Close()
	_, err = goredis.DialCluster(cc)
	require.ErrorIs(t, err, redlock.ErrInvalid)
	require.ErrorIs(t, err, node.ErrNotCluster)
}
