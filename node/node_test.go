package node_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseURL(t *testing.T) {
	cases := []struct {
		in   string
		want node.Endpoint
		str  string
	}{
		{"redis://h", node.Endpoint{Host: "h", Port: 6379}, "redis://h:6379"},
		{"redis://h:7001/3", node.Endpoint{Host: "h", Port: 7001, DB: 3}, "redis://h:7001/3"},
		{"redis://:pw@h:1", node.Endpoint{Host: "h", Port: 1, Password: "pw"}, "redis://:xxxxx@h:1"},
		{"redis://alice:pw@h:1", node.Endpoint{Host: "h", Port: 1, Username: "alice", Password: "pw"}, "redis://alice:xxxxx@h:1"},
		{"rediss://[::1]:6380", node.Endpoint{TLS: true, Host: "::1", Port: 6380}, "rediss://[::1]:6380"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			ep, err := node.ParseURL(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want, ep)
			assert.Equal(t, c.str, ep.String())
		})
	}
	for _, bad := range []string{"", "h:1", "http://h:1", "redis://", "redis://h:0", "redis://h:x", "redis://h/db", "redis://h/-1", "redis://h?x=1", "redis:h", "redis://u:s3cret@h:bad"} {
		_, err := node.ParseURL(bad)
		require.ErrorIs(t, err, node.ErrBadURL, bad)
		assert.NotContains(t, err.Error(), "s3cret")
	}
	// Passwords with characters that should have been percent-encoded
	// break parsing in odd places; no piece of them may reach the error.
	for _, bad := range []string{"redis://app:s3cr/et@h:6379", "redis://app:s3%zzet@h", "redis://app:6380/s3cret@h", "redis://app:s3c?ret@h", "redis://app:s3c#ret@h:1",
		"redis://app:p@s3c/ret@h:6379"} {
		_, err := node.ParseURL(bad)
		require.ErrorIs(t, err, node.ErrBadURL, bad)
		for _, piece := range []string{"s3c", "/et", "et@", "ret", "zz"} {
			assert.NotContains(t, strings.TrimPrefix(err.Error(), node.ErrBadURL.Error()), piece, bad)
		}
		assert.Contains(t, err.Error(), "percent-encode", bad)
	}
	// A URL with credentials that parses but is wrong elsewhere: the bad
	// part is not quoted either (it may be the tail of a password).
	for _, bad := range []string{"redis://app:pw@h/s3cret", "redis://app:pw@h:s3c"} {
		_, err := node.ParseURL(bad)
		require.ErrorIs(t, err, node.ErrBadURL, bad)
		assert.NotContains(t, err.Error(), "s3c", bad)
	}
}

// TestParseURLRejectsBareIPv6: an IPv6 address without brackets cannot
// be told apart from host:port ("::1" would be host ":" port 1, and
// "::1:6379" is ambiguous), so it is rejected with a hint, never guessed.
func TestParseURLRejectsBareIPv6(t *testing.T) {
	for _, bad := range []string{"redis://::1", "redis://::1:6379", "rediss://2001:db8::1", "redis://fe80::1/2", "redis://::", "redis://u:s3cret@::1"} {
		ep, err := node.ParseURL(bad)
		require.ErrorIs(t, err, node.ErrBadURL, "%s parsed as %+v", bad, ep)
		assert.Contains(t, err.Error(), "put an IPv6 address in brackets: redis://[::1]:6379", bad)
		assert.NotContains(t, err.Error(), "s3cret")
	}
	for _, good := range []string{"redis://[::1]", "redis://[::1]:6379", "rediss://[2001:db8::1]:7001/2", "redis://u:pw@[::1]:1"} {
		ep, err := node.ParseURL(good)
		require.NoError(t, err, good)
		assert.Contains(t, ep.Host, "::", good)
	}
}

func TestStringHidesPassword(t *testing.T) {
	r, err := node.Dial("redis://bob:hunter2@127.0.0.1:1", node.Options{})
	require.NoError(t, err)
	defer r.Close()
	assert.NotContains(t, r.String(), "hunter2")
	assert.Equal(t, "127.0.0.1:1", r.Addr())
}

// listen starts a loopback server that runs serve on each connection until
// the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// silent starts a loopback server that accepts and reads, never answers.
func silent(t *testing.T) string {
	t.Helper()
	return listen(t, func(c net.Conn) {
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
}

// acquireSilent runs one Acquire on a node at url (a silent server) with
// a 10 s node timeout and a 100 ms context, and checks that the context's
// deadline, not the node timeout nor a socket or handshake timeout, ended
// the call. It returns the call's error.
func acquireSilent(t *testing.T, url string) error {
	t.Helper()
	r, err := node.Dial(url, node.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	res, err := r.Acquire(ctx, &node.Key{Name: "k", Token: "tok"}, time.Second, false)
	assert.Equal(t, node.Unknown, res.Status)
	require.ErrorIs(t, err, node.ErrTimeout)
	dl, _ := ctx.Deadline()
	assert.WithinDuration(t, dl, time.Now(), 2*time.Second, "the call outlived its deadline")
	return err
}

func TestBlackholeCostsTheDeadlineOnly(t *testing.T) {
	addr := silent(t)
	err := acquireSilent(t, "redis://"+addr)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "a node timeout must not look like the caller's context ending")
	var ne *node.Error
	require.True(t, errors.As(err, &ne))
	assert.Equal(t, "acquire", ne.Op)
	assert.Equal(t, addr, ne.Addr)
}

// TestTLSHandshakeCostsTheDeadlineOnly: a rediss:// node that accepts
// and never answers the TLS handshake costs the call's deadline, not the
// 10 s handshake timeout redigo would apply on its own.
func TestTLSHandshakeCostsTheDeadlineOnly(t *testing.T) {
	acquireSilent(t, "rediss://"+silent(t))
}

// TestTLSRefused: an untrusted certificate is ErrTLS, and a peer that
// does not speak TLS to a rediss:// URL is ErrProtocol; neither is a
// timeout.
func TestTLSRefused(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	r, err := node.Dial("rediss://"+srv.Listener.Addr().String(), node.Options{})
	require.NoError(t, err)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = r.Acquire(ctx, &node.Key{Name: "k", Token: "tok"}, time.Second, false)
	require.ErrorIs(t, err, node.ErrTLS, "%v", err)
	assert.Contains(t, err.Error(), "certificate")

	plain := listen(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	})
	p, err := node.Dial("rediss://"+plain, node.Options{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Acquire(ctx, &node.Key{Name: "k", Token: "tok"}, time.Second, false)
	require.ErrorIs(t, err, node.ErrProtocol, "%v", err)
}

func TestNotRedis(t *testing.T) {
	addr := listen(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
		c.Close()
	})
	r, err := node.Dial("redis://"+addr, node.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Release(context.Background(), &node.Key{Name: "k", Token: "tok"}, true)
	require.ErrorIs(t, err, node.ErrProtocol, "%v", err)
}

func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	r, err := node.Dial("redis://"+addr, node.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Acquire(context.Background(), &node.Key{Name: "k", Token: "tok"}, time.Second, false)
	require.ErrorIs(t, err, node.ErrUnreachable, "%v", err)
}

// TestConnectionReset: a node that resets the connection under a call
// (ECONNRESET: it crashed, or a middlebox dropped the flow) is
// ErrUnreachable, a kind a retry may change, on the shared connection
// and on a pooled one.
func TestConnectionReset(t *testing.T) {
	addr := listen(t, func(c net.Conn) {
		buf := make([]byte, 512)
		if _, err := c.Read(buf); err != nil {
			return
		}
		_ = c.(*net.TCPConn).SetLinger(0) // close with a RST
		c.Close()
	})
	for _, pooled := range []bool{false, true} {
		r, err := node.Dial("redis://"+addr, node.Options{Timeout: 5 * time.Second, Pooled: pooled})
		require.NoError(t, err)
		_, err = r.Acquire(context.Background(), &node.Key{Name: "k", Token: "tok"}, time.Second, false)
		require.ErrorIs(t, err, syscall.ECONNRESET, "pooled %v", pooled)
		assert.ErrorIs(t, err, node.ErrUnreachable, "pooled %v: %v", pooled, err)
		assert.Equal(t, "unreachable", node.KindOf(err))
		assert.False(t, node.Permanent(err))
		require.NoError(t, r.Close())
	}
}

func TestClosed(t *testing.T) {
	r, err := node.Dial("redis://127.0.0.1:1", node.Options{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	_, err = r.Acquire(context.Background(), &node.Key{Name: "k", Token: "tok"}, time.Second, false)
	require.ErrorIs(t, err, node.ErrClosed)
}

func TestStatusString(t *testing.T) {
	assert.Equal(t, "done", node.Done.String())
	assert.Equal(t, "taken", node.Taken.String())
	assert.Equal(t, "absent", node.Absent.String())
	assert.Equal(t, "unknown", node.Unknown.String())
}

// TestParseReplies: the reply readers accept what redigo returns (bulk
// strings as []byte) and what go-redis returns (strings), and refuse
// anything else with ErrProtocol.
func TestParseReplies(t *testing.T) {
	for _, ok := range []any{"OK", []byte("OK")} {
		res, err := node.ParseAcquire(ok)
		require.NoError(t, err)
		assert.Equal(t, node.Result{Status: node.Done}, res)
	}
	for _, fenced := range []any{[]any{"OK", int64(42)}, []any{[]byte("OK"), int64(42)}} {
		res, err := node.ParseAcquire(fenced)
		require.NoError(t, err)
		assert.Equal(t, node.Result{Status: node.Done, Fence: 42}, res)
	}
	res, err := node.ParseAcquire(int64(1500))
	require.NoError(t, err)
	assert.Equal(t, node.Result{Status: node.Taken, TTL: 1500 * time.Millisecond}, res)
	res, err = node.ParseAcquire(int64(-1)) // no expiry: unknown
	require.NoError(t, err)
	assert.Equal(t, node.Result{Status: node.Taken}, res)

	for reply, want := range map[int64]node.Status{1: node.Done, 0: node.Taken, -1: node.Absent} {
		res, err := node.ParseStatus(reply)
		require.NoError(t, err)
		assert.Equal(t, want, res.Status)
	}
	info, err := node.ParseInspect([]any{"tok", int64(900), int64(0)})
	require.NoError(t, err)
	assert.Equal(t, node.Info{Token: "tok", TTL: 900 * time.Millisecond}, info)
	info, err = node.ParseInspect([]any{node.SharedValue, int64(900), int64(3)})
	require.NoError(t, err)
	assert.Equal(t, node.Info{Token: node.SharedValue, TTL: 900 * time.Millisecond, Readers: 3}, info)
	info, err = node.ParseInspect([]any{nil, int64(-2), int64(0)})
	require.NoError(t, err)
	assert.Equal(t, node.Info{}, info)
	_, err = node.ParseInspect([]any{"tok", int64(900)})
	require.ErrorIs(t, err, node.ErrProtocol, "the readers are missing")

	for _, bad := range []any{"QUEUED", []any{"OK", int64(0)}, []any{"OK"}, nil} {
		_, err := node.ParseAcquire(bad)
		require.ErrorIs(t, err, node.ErrProtocol, "%v", bad)
		_, err = node.ParseStatus(bad)
		require.ErrorIs(t, err, node.ErrProtocol, "%v", bad)
	}
	err = node.Fail("h:1", "extend", nil, errors.New("NOAUTH Authentication required."))
	require.ErrorIs(t, err, node.ErrAuth)
	assert.Equal(t, "node h:1: extend: node rejected the credentials: NOAUTH Authentication required.", err.Error())
	_, err = node.ParseStatus("x")
	err = node.Fail("h:1", "release", nil, err)
	assert.Equal(t, "node h:1: release: peer does not speak the Redis protocol: unexpected reply x", err.Error())
}
