package integration_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// contend runs one separate client per worker against one key for d and
// records every grant in a checker; each grant does a read-pause-write on
// a shared counter (see scContend).
func contend(t *testing.T, workers int, d time.Duration, key string, opts ...redlock.Option) (*checker.Checker, *checker.Counter) {
	t.Helper()
	var chk checker.Checker
	var ctr checker.Counter
	scContend(scClients(t, workers, opts...), d, key, &chk, &ctr)
	return &chk, &ctr
}

func TestTwoClientsNeverHoldTheSameKey(t *testing.T) {
	p := prefix(t, 2*time.Second)
	chk, ctr := contend(t, 4, 2*time.Second, p+"shared",
		redlock.WithNodeTimeout(100*time.Millisecond),
		redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
	require.Empty(t, chk.Overlaps(), chk.Report())
	lost, value, want := ctr.Lost()
	require.Zero(t, lost, "lost updates: counter %d, increments %d", value, want)
	grants := chk.Grants()
	require.Len(t, grants, 4, "every client made progress: %v", grants)
	t.Logf("%d critical sections: %v", want, grants)
}

func TestGrantedWithTwoOfFiveDown(t *testing.T) {
	p := prefix(t, 2*time.Second)
	down(t, 3, 4)
	c := client(t, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := c.TryLock(context.Background(), p+"k")
	require.NoError(t, err)
	require.Greater(t, l.TTL(), time.Duration(0))
	// The other client cannot get it while it is held.
	_, err = client(t, redlock.WithNodeTimeout(200*time.Millisecond)).TryLock(context.Background(), p+"k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Unlock(context.Background()))
}

func TestThreeOfFiveDownFailsFast(t *testing.T) {
	p := prefix(t, 2*time.Second)
	down(t, 0, 2, 4)
	c := client(t, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := c.TryLock(context.Background(), p+"k")
	require.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.ElementsMatch(t, []int{0, 2, 4}, qe.Failed(), "%v", err)
	for _, i := range []int{0, 2, 4} {
		assert.Contains(t, err.Error(), shared.Addr(i))
	}
	// Lock with retries gives up too; the error says how often it tried.
	_, err = c.Lock(context.Background(), p+"k", redlock.WithRetry(redlock.LimitRetry(redlock.ExponentialBackoff(time.Millisecond, 5*time.Millisecond), 3)))
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 3, qe.Attempts)
}

func TestBlackholedNodeCostsAtMostTheNodeTimeout(t *testing.T) {
	p := prefix(t, 2*time.Second)
	blackhole(t, 1)
	ttl := 10 * time.Second
	// With a 3 s node timeout, waiting for the blackholed node would cost
	// 3 s of validity; returning at quorum costs nothing like it.
	c := client(t, redlock.WithTTL(ttl), redlock.WithNodeTimeout(3*time.Second))
	l, err := c.TryLock(context.Background(), p+"k")
	require.NoError(t, err)
	assert.Greater(t, l.TTL(), ttl-time.Second, "acquire did not wait for the blackholed node")
	require.NoError(t, l.Unlock(context.Background()))
	// Unlock returns at a majority: let the other releases land before
	// nodes 2 and 3 go dark, or one of them loses its release and keeps
	// the key for the TTL.
	require.Eventually(t, func() bool {
		keys, err := shared.Keys(context.Background(), p+"k")
		return err == nil && len(slices.Concat(keys...)) == 0
	}, 5*time.Second, 10*time.Millisecond, "released on every reachable node")

	// Three blackholed: every call to them ends at the node timeout with
	// node.ErrTimeout — not at a socket timeout of seconds.
	blackhole(t, 2, 3)
	timeout := 150 * time.Millisecond
	c2 := client(t, redlock.WithNodeTimeout(timeout))
	_, err = c2.TryLock(context.Background(), p+"k2")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrTimeout)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context did not end")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	for _, i := range qe.Failed() {
		assert.Less(t, qe.Replies[i].Latency, 10*timeout, "node %d: %v", i, qe.Replies[i].Latency)
	}
	assert.ElementsMatch(t, []int{1, 2, 3}, qe.Failed())
}

func TestExtendAndUnlockOnRealNodes(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 3*time.Second)
	c := client(t, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(100*time.Millisecond))

	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	assert.Greater(t, l.TTL(), 4*time.Second)
	// Extend returns at quorum; the minority's replies land just after.
	everyNode(t, func(i int) bool {
		info, err := shared.Direct(i).Inspect(ctx, p+"k")
		return err == nil && info.Token == l.Token() && info.TTL > 4*time.Second
	})
	// A shorter extend shortens Until, never a key on a node.
	require.NoError(t, l.Extend(ctx, 2*time.Second))
	assert.Less(t, l.TTL(), 2*time.Second)
	for i := 0; i < shared.Size(); i++ {
		info, err := shared.Direct(i).Inspect(ctx, p+"k")
		require.NoError(t, err)
		assert.Greater(t, info.TTL, 3*time.Second, "node %d shortened the key", i)
	}
	require.NoError(t, l.Unlock(ctx))
	everyNode(t, func(i int) bool {
		info, err := shared.Direct(i).Inspect(ctx, p+"k")
		return err == nil && info.Token == ""
	})
	require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld)

	// An expired lock: extend and unlock say ErrNotHeld, not "taken".
	short, err := c.TryLock(ctx, p+"short", redlock.WithTTL(200*time.Millisecond))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	assert.ErrorIs(t, short.Extend(ctx, time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, short.Unlock(ctx), redlock.ErrNotHeld)

	// Taken over after expiry: the old holder cannot touch the new lock.
	old, err := c.TryLock(ctx, p+"over", redlock.WithTTL(200*time.Millisecond))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	next, err := c.TryLock(ctx, p+"over")
	require.NoError(t, err)
	assert.ErrorIs(t, old.Extend(ctx, time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, old.Unlock(ctx), redlock.ErrNotHeld)
	everyNode(t, func(i int) bool {
		info, err := shared.Direct(i).Inspect(ctx, p+"over")
		return err == nil && info.Token == next.Token()
	})
	require.NoError(t, next.Unlock(ctx))
}

func TestWrongPassword(t *testing.T) {
	ctx := context.Background()
	single, err := cluster.Start(ctx, cluster.Options{Nodes: 1, Backend: "process"})
	require.NoError(t, err)
	defer single.Close()
	_, err = single.Direct(0).Command(ctx, "CONFIG", "SET", "requirepass", "right-pass")
	require.NoError(t, err)

	bad, err := redlock.Dial([]string{"redis://:wrong-pass@" + single.Addr(0)}, redlock.WithNodeTimeout(500*time.Millisecond))
	require.NoError(t, err)
	defer bad.Close()
	_, err = bad.Lock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, node.ErrAuth, "%v", err)
	assert.NotContains(t, err.Error(), "wrong-pass")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Attempts, "bad credentials are not retried")

	good, err := redlock.Dial([]string{"redis://:right-pass@" + single.Addr(0)}, redlock.WithNodeTimeout(500*time.Millisecond))
	require.NoError(t, err)
	defer good.Close()
	l, err := good.TryLock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
}

func TestUnreachableAndNonRedisAddresses(t *testing.T) {
	ctx := context.Background()
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	ln.Close()
	// A server that answers like HTTP.
	http, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer http.Close()
	go func() {
		for {
			conn, err := http.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			conn.Close()
		}
	}()
	c, err := redlock.Dial([]string{"redis://" + closed, "redis://" + http.Addr().String(), shared.URLs()[0]},
		redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithRetry(redlock.NoRetry()))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.TryLock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, node.ErrUnreachable, "%v", err)
	assert.ErrorIs(t, err, node.ErrProtocol, "%v", err)
	var ne *redlock.NodeError
	require.True(t, errors.As(err, &ne))
}

// everyNode waits (up to 2 s) until ok holds on every node of the shared
// cluster.
func everyNode(t *testing.T, ok func(i int) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i := 0; i < shared.Size(); i++ {
			if !ok(i) {
				return false
			}
		}
		return true
	}, 2*time.Second, 10*time.Millisecond)
}

func TestScriptsSurviveScriptFlush(t *testing.T) {
	// A restarted node has no scripts cached: EVALSHA answers NOSCRIPT and
	// the node must fall back to EVAL.
	ctx := context.Background()
	p := prefix(t, 2*time.Second)
	c := client(t, redlock.WithNodeTimeout(200*time.Millisecond))
	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	for i := 0; i < shared.Size(); i++ {
		_, err := shared.Direct(i).Command(ctx, "SCRIPT", "FLUSH")
		require.NoError(t, err)
	}
	require.NoError(t, l.Extend(ctx, 5*time.Second))
	for i := 0; i < shared.Size(); i++ {
		_, err := shared.Direct(i).Command(ctx, "SCRIPT", "FLUSH")
		require.NoError(t, err)
	}
	require.NoError(t, l.Unlock(ctx))
}

func TestIdleConnectionsSurviveANodeRestart(t *testing.T) {
	// A restart leaves dead connections in the pool; the idle check must
	// catch them so the first call after the restart does not fail.
	ctx := context.Background()
	n, err := node.Dial(shared.URLs()[4], node.Options{CheckIdle: 100 * time.Millisecond})
	require.NoError(t, err)
	defer n.Close()
	_, err = n.Inspect(ctx, "warm-up")
	require.NoError(t, err)
	require.NoError(t, shared.Stop(ctx, 4))
	require.NoError(t, shared.Start(ctx, 4))
	time.Sleep(150 * time.Millisecond) // idle for longer than CheckIdle
	_, err = n.Inspect(ctx, "after-restart")
	require.NoError(t, err, "the first call after a restart")
}
