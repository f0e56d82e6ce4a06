package nodetest

// Failures: scripts refused, servers that never answer or stall, no
// command sent after its call returned, unreachable and non-Redis
// addresses, credentials and TLS.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
)

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
