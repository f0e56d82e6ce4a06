package integration_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// lockACL is the least a lock client needs on a node: SET NX PX, the
// scripts (EVALSHA, and EVAL after a restart emptied the script cache)
// and the commands they run (TIME for fenced locks and waiter leases,
// PUBLISH to announce a release, EXISTS and the hash commands for the
// queue of waiters), SUBSCRIBE for waiters to be woken, and PING for
// idle-connection checks, on the lock keys and their release channels
// only. docs/OPERATIONS.md shows the same rule.
var lockACL = []string{"on", "resetkeys", "~lk:*", "resetchannels", "&lk:*", "-@all",
	"+set", "+get", "+del", "+pexpire", "+pttl", "+time", "+eval", "+evalsha",
	"+publish", "+subscribe", "+unsubscribe", "+ping",
	"+exists", "+hget", "+hset", "+hdel", "+hlen", "+hgetall", "+hincrby"}

// TestTLSAndACL runs the lock over rediss:// with an ACL user limited to
// lockACL, against three redis-server processes serving TLS with a
// certificate made here. It also checks that a wrong password, a key
// outside the user's pattern and an untrusted certificate each fail with
// a clear error that does not carry the password.
func TestTLSAndACL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	roots := redistest.WriteCert(t, dir)
	tlsPorts := make([]int, 3)
	for i := range tlsPorts {
		tlsPorts[i] = freeLoopbackPort(t)
	}
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 3, Backend: "process", NodeArgs: func(i int) []string {
		return []string{
			"--tls-port", strconv.Itoa(tlsPorts[i]),
			"--tls-cert-file", filepath.Join(dir, "cert.pem"),
			"--tls-key-file", filepath.Join(dir, "key.pem"),
			"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"),
			"--tls-auth-clients", "no",
		}
	}})
	require.NoError(t, err, "Debian's redis-server is built with TLS")
	defer c.Close()
	for i := range tlsPorts {
		args := append([]any{"SETUSER", "locker"}, anys(lockACL)...)
		_, err := c.Direct(i).Command(ctx, "ACL", append(args, ">s3cret-pw")...)
		require.NoError(t, err)
	}

	urls := func(userinfo string) []string {
		out := make([]string, len(tlsPorts))
		for i, p := range tlsPorts {
			out[i] = "rediss://" + userinfo + "@127.0.0.1:" + strconv.Itoa(p)
		}
		return out
	}
	trusted := redlock.WithNodeOptions(node.Options{TLSConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	timeout := redlock.WithNodeTimeout(time.Second) // TLS handshakes under -race

	good, err := redlock.Dial(urls("locker:s3cret-pw"), trusted, timeout)
	require.NoError(t, err)
	defer good.Close()
	l, err := good.TryLock(ctx, "lk:tls")
	require.NoError(t, err)
	// TryLock returns at a quorum; the last node's SET may still be on
	// its way.
	holds := func(token string) func() bool {
		return func() bool {
			for i := range tlsPorts {
				info, err := c.Direct(i).Inspect(ctx, "lk:tls")
				if err != nil || info.Token != token {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, holds(l.Token()), 2*time.Second, 10*time.Millisecond, "every node holds the token")
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, holds(""), 2*time.Second, 10*time.Millisecond, "every node released the key")

	// Fenced locks (TIME in a script) and wake-ups (SUBSCRIBE, PUBLISH)
	// work within the rule: the waiter's retry delay is an hour.
	f, err := good.TryLock(ctx, "lk:fenced", redlock.WithFencing())
	require.NoError(t, err)
	assert.NotZero(t, f.Fence())
	waiter, err := redlock.Dial(urls("locker:s3cret-pw"), trusted, timeout, redlock.WithRetry(redlock.LinearBackoff(time.Hour)))
	require.NoError(t, err)
	defer waiter.Close()
	woken := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, "lk:fenced")
		if err == nil {
			err = l.Unlock(ctx)
		}
		woken <- err
	}()
	require.Eventually(t, func() bool {
		for i := range tlsPorts {
			v, err := c.Direct(i).Command(ctx, "PUBSUB", "NUMSUB", node.ReleaseChannel("lk:fenced"))
			if err != nil || v.([]any)[1].(int64) != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the waiter subscribed on every node")
	time.Sleep(50 * time.Millisecond) // its attempt after subscribing has failed
	require.NoError(t, f.Unlock(ctx))
	select {
	case err := <-woken:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the waiter")
	}
	for i := range tlsPorts {
		_, err := c.Direct(i).Command(ctx, "DEL", node.FenceKey("lk:fenced"))
		require.NoError(t, err)
	}

	// Read holds (the readers hash, TIME) and permits work within the
	// rule too.
	r1, err := good.TryRLock(ctx, "lk:shared")
	require.NoError(t, err)
	r2, err := waiter.TryRLock(ctx, "lk:shared")
	require.NoError(t, err, "a second reader")
	require.NoError(t, r1.Extend(ctx, time.Minute))
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))
	sem, err := good.Semaphore("lk:sem", 2)
	require.NoError(t, err)
	p, err := sem.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Unlock(ctx))

	// A key outside ~lk:*: every node refuses, and Lock does not retry.
	_, err = good.Lock(ctx, "other:tls")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrAuth, "%v", err)
	assert.Contains(t, err.Error(), "NOPERM")
	assert.Equal(t, 1, attempts(t, err), "NOPERM is not retried")

	wrong, err := redlock.Dial(urls("locker:wrong-pw"), trusted, timeout)
	require.NoError(t, err)
	defer wrong.Close()
	_, err = wrong.Lock(ctx, "lk:tls")
	require.ErrorIs(t, err, node.ErrAuth, "%v", err)
	assert.NotContains(t, err.Error(), "wrong-pw")
	assert.Equal(t, 1, attempts(t, err), "a wrong password is not retried")

	untrusted, err := redlock.Dial(urls("locker:s3cret-pw"), timeout)
	require.NoError(t, err)
	defer untrusted.Close()
	_, err = untrusted.Lock(ctx, "lk:tls")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrTLS, "%v", err)
	assert.Contains(t, err.Error(), "certificate", "%v", err)
	assert.NotContains(t, err.Error(), "s3cret-pw")
	assert.Equal(t, 1, attempts(t, err), "an untrusted certificate is not retried")

	left, err := c.Keys(ctx, "*")
	require.NoError(t, err)
	for i, ks := range left {
		assert.Empty(t, ks, "node %d", i)
	}
}

// writeSelfSigned writes cert.pem and key.pem for 127.0.0.1 into dir and
// returns a pool that trusts the certificate.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func attempts(t *testing.T, err error) int {
	t.Helper()
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	return qe.Attempts
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
