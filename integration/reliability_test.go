package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// secretPassword is the password of the ACL users the fault tests make;
// no error or log line may carry it.
const secretPassword = "s3cret-Reliab1lity-pw"

// tokenLike matches a lock token (32 hex digits from crypto/rand) that is
// not part of a longer hex run (a script's SHA1 has 40).
var tokenLike = regexp.MustCompile(`(^|[^0-9a-f])[0-9a-f]{32}([^0-9a-f]|$)`)

// texts collects the error and log text a test produced, to be searched
// for secrets at its end.
type texts struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (x *texts) Write(p []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.buf.Write(p)
}

// String returns what was written so far.
func (x *texts) String() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.buf.String()
}

func (x *texts) add(err error) {
	if err != nil {
		fmt.Fprintln(x, err.Error())
	}
}

// logger logs everything, debug included, into x.
func (x *texts) logger() redlock.Option {
	return redlock.WithLogger(slog.New(slog.NewTextHandler(x, &slog.HandlerOptions{Level: slog.LevelDebug})))
}

// clean asserts that nothing in x carries a token or the password.
func (x *texts) clean(t *testing.T, tokens ...string) {
	t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.buf.String()
	assert.NotContains(t, s, secretPassword)
	for _, tok := range tokens {
		assert.NotContains(t, s, tok)
	}
	assert.False(t, tokenLike.MatchString(s), "a token-like run of 32 hex digits in: %s", tokenLike.FindString(s))
}

// TestPermanentErrorsFailFast: configuration mistakes on a majority of
// real redis-server processes end Lock after at most two attempts (the
// second is the first to ask for the holder's TTL by script) with the
// node package's sentinel for the mistake, and no error or log text
// carries a token or a password.
func TestPermanentErrorsFailFast(t *testing.T) {
	ctx := context.Background()
	// Nodes 0-2 of the first cluster have no EVAL or EVALSHA (renamed
	// away, as some hosted Redis and proxies do).
	noScripts, err := cluster.Start(ctx, cluster.Options{Nodes: 5, Backend: "process", NodeArgs: func(i int) []string {
		if i < 3 {
			return []string{"--rename-command", "EVAL", "", "--rename-command", "EVALSHA", ""}
		}
		return nil
	}})
	require.NoError(t, err)
	defer noScripts.Close()
	plain, err := cluster.Start(ctx, cluster.Options{Nodes: 5, Backend: "process"})
	require.NoError(t, err)
	defer plain.Close()

	var out texts
	// lockOnce runs Lock on a key held by no one (or by "held", when
	// held is set on every node first) and reports the attempts.
	lockOnce := func(t *testing.T, urls []string, key string, want error) {
		t.Helper()
		var attempts atomic.Int32
		cl, err := redlock.Dial(urls, out.logger(), redlock.WithTTL(5*time.Second),
			redlock.WithHooks(redlock.Hooks{Acquire: func(i redlock.AcquireInfo) { attempts.Store(int32(i.Attempts)) }}))
		require.NoError(t, err)
		start := time.Now()
		_, err = cl.Lock(ctx, key)
		took := time.Since(start)
		out.add(err)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.ErrorIs(t, err, want, "%v", err)
		assert.LessOrEqual(t, attempts.Load(), int32(2), "%v", err)
		t.Logf("%s: %d attempt(s), %v: %v", node.KindOf(want), attempts.Load(), took.Round(time.Millisecond), err)
		out.add(cl.Close())
	}

	t.Run("scripts renamed away", func(t *testing.T) {
		key := "rel:noscripts"
		for i := range 5 {
			_, err := noScripts.Direct(i).Command(ctx, "SET", key, "other-holder", "PX", 60000)
			require.NoError(t, err)
		}
		lockOnce(t, noScripts.URLs(), key, node.ErrNoScripts)
		for i := range 5 {
			_, err := noScripts.Direct(i).Command(ctx, "DEL", key)
			require.NoError(t, err)
		}

		// A free key is not taken either: a plain SET would give a lock
		// that no Extend or Unlock could ever act on there. The first
		// acquire on a connection is the script, which those nodes
		// refuse.
		cl, err := redlock.Dial(noScripts.URLs(), out.logger())
		require.NoError(t, err)
		l, err := cl.TryLock(ctx, "rel:noscripts2")
		out.add(err)
		assert.Nil(t, l)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.ErrorIs(t, err, node.ErrNoScripts)
		out.add(cl.Close())
		assertNoKeys(t, noScripts, "rel:*")
	})

	t.Run("ACL user without +set", func(t *testing.T) {
		for i := range 5 {
			_, err := plain.Direct(i).Command(ctx, "ACL", "SETUSER", "noset", "on", ">"+secretPassword, "~*", "&*", "+@all", "-set")
			require.NoError(t, err)
		}
		defer func() {
			for i := range 5 {
				_, _ = plain.Direct(i).Command(ctx, "ACL", "DELUSER", "noset")
			}
		}()
		urls := make([]string, 5)
		for i := range urls {
			urls[i] = "redis://noset:" + secretPassword + "@" + plain.Addr(i)
		}
		lockOnce(t, urls, "rel:acl", node.ErrAuth)
		assertNoKeys(t, plain, "rel:*")
	})

	t.Run("WRONGTYPE", func(t *testing.T) {
		key := "rel:wrongtype"
		for i := range 3 {
			_, err := plain.Direct(i).Command(ctx, "LPUSH", key, "x")
			require.NoError(t, err)
		}
		lockOnce(t, plain.URLs(), key, node.ErrWrongType)
		for i := range 3 {
			_, err := plain.Direct(i).Command(ctx, "DEL", key)
			require.NoError(t, err)
		}
		assertNoKeys(t, plain, "rel:*")
	})

	t.Run("replica given as a master", func(t *testing.T) {
		host, port, ok := strings.Cut(plain.Backend.Upstream(4), ":")
		require.True(t, ok)
		for i := range 3 {
			_, err := plain.Direct(i).Command(ctx, "REPLICAOF", host, port)
			require.NoError(t, err)
		}
		defer func() {
			for i := range 3 {
				_, err := plain.Direct(i).Command(ctx, "REPLICAOF", "NO", "ONE")
				assert.NoError(t, err)
			}
		}()
		lockOnce(t, plain.URLs(), "rel:readonly", node.ErrReadOnly)
		assertNoKeys(t, plain, "rel:*")
	})

	t.Run("out of memory", func(t *testing.T) {
		for i := range 3 {
			_, err := plain.Direct(i).Command(ctx, "CONFIG", "SET", "maxmemory", "1", "maxmemory-policy", "noeviction")
			require.NoError(t, err)
		}
		defer func() {
			for i := range 3 {
				_, err := plain.Direct(i).Command(ctx, "CONFIG", "SET", "maxmemory", "0")
				assert.NoError(t, err)
			}
		}()
		lockOnce(t, plain.URLs(), "rel:oom", node.ErrOOM)
		assertNoKeys(t, plain, "rel:*")
	})

	x := out.buf.String()
	assert.Contains(t, x, "ERR unknown command 'EVALSHA'", "the errors were searched")
	out.clean(t)
}

// assertNoKeys fails when key is left on a node of c.
func assertNoKeys(t *testing.T, c *cluster.Cluster, key string) {
	t.Helper()
	keys, err := c.Keys(context.Background(), key)
	require.NoError(t, err)
	for i, ks := range keys {
		assert.Empty(t, ks, "node %d", i)
	}
}

// TestUnlockFinishesDroppedReleases: two nodes drop every request for a
// moment during Unlock (a proxy that holds the bytes back and loses them;
// a paused node would keep them and run them on resume). Unlock returns at
// the three others; once requests flow again, the key is gone from the
// two within a second, far below its TTL.
func TestUnlockFinishesDroppedReleases(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 2*time.Second)
	var out texts
	c := client(t, redlock.WithTTL(30*time.Second), out.logger())
	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holdersOf(t, l) == 5 }, 5*time.Second, 5*time.Millisecond)

	blackhole(t, 3, 4)
	require.NoError(t, l.Unlock(ctx), "three of five released")
	time.Sleep(300 * time.Millisecond) // requests to 3 and 4 are lost meanwhile
	assert.Equal(t, 2, holdersOf(t, l), "the dropped releases did not reach nodes 3 and 4")
	healUntilGone(t, l, "TTL 30s")
	out.clean(t, l.Token())
}

// TestUnlockFinishesReleasesLostOnOpenConnections: as
// TestUnlockFinishesDroppedReleases, but the two nodes' connections stay
// open when requests flow again, the releases sent meanwhile lost: on
// the shared connection every later reply would go to the command before
// its own (the first, a release's NOSCRIPT, to a caller gone), and no
// retry would ever see its reply. The key must still be gone from the
// two within a second of the network healing (TTL 20s).
func TestUnlockFinishesReleasesLostOnOpenConnections(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 2*time.Second)
	var out texts
	c := client(t, redlock.WithTTL(20*time.Second), out.logger())
	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holdersOf(t, l) == 5 }, 5*time.Second, 5*time.Millisecond)

	for _, i := range []int{3, 4} {
		require.NoError(t, shared.Drop(i))
		t.Cleanup(func() { shared.Heal(i) })
	}
	require.NoError(t, l.Unlock(ctx), "three of five released")
	time.Sleep(300 * time.Millisecond) // requests to 3 and 4 are lost meanwhile
	assert.Equal(t, 2, holdersOf(t, l), "the lost releases did not reach nodes 3 and 4")
	healUntilGone(t, l, "TTL 20s")
	out.clean(t, l.Token())
}

// TestUnlockFinishesPastOpenBreakers: as TestUnlockFinishesDroppedReleases,
// but the two nodes stay cut off until the retries of their releases have
// opened their breakers (cooldown 10 s). The retries go on past the open
// breakers, and the key is gone from the two within a second of the
// network healing, not at the end of the cooldown; the answer closes the
// breakers. (A torture trace: three nodes' breakers open, the rollback's
// key kept on them, a majority, for their cooldown after they answered.)
func TestUnlockFinishesPastOpenBreakers(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 2*time.Second)
	var out texts
	var mu sync.Mutex
	state := map[int]redlock.BreakerState{}
	hooks := redlock.Hooks{Breaker: func(b redlock.BreakerChange) { mu.Lock(); state[b.Node] = b.To; mu.Unlock() }}
	both := func(s redlock.BreakerState) bool {
		mu.Lock()
		defer mu.Unlock()
		return state[3] == s && state[4] == s
	}
	c := client(t, redlock.WithTTL(30*time.Second), out.logger(), redlock.WithHooks(hooks),
		redlock.WithBreaker(redlock.Breaker{Cooldown: 10 * time.Second}))
	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holdersOf(t, l) == 5 }, 5*time.Second, 5*time.Millisecond)

	blackhole(t, 3, 4)
	require.NoError(t, l.Unlock(ctx), "three of five released")
	require.Eventually(t, func() bool { return both(redlock.BreakerOpen) }, 10*time.Second, 5*time.Millisecond,
		"the failed retries open both breakers")
	assert.Equal(t, 2, holdersOf(t, l), "the dropped releases did not reach nodes 3 and 4")
	healUntilGone(t, l, "cooldown 10s")
	assert.Eventually(t, func() bool { return both(redlock.BreakerClosed) }, time.Second, 5*time.Millisecond,
		"the answers closed the breakers")
	out.clean(t, l.Token())
}

// healUntilGone heals nodes 3 and 4, whose releases of l were lost, and
// requires l's key gone from them within a second; why names what would
// have kept it longer (a TTL, a cooldown).
func healUntilGone(t *testing.T, l *redlock.Lock, why string) {
	t.Helper()
	shared.Heal(3)
	shared.Heal(4)
	healed := time.Now()
	require.Eventually(t, func() bool { return holdersOf(t, l) == 0 }, time.Second, 5*time.Millisecond,
		"the key is gone from nodes 3 and 4 within a second of the network healing (%s)", why)
	t.Logf("key gone from the healed nodes %v after they healed", time.Since(healed).Round(time.Millisecond))
}

// holdersOf counts the nodes that hold l's token, read directly.
func holdersOf(t *testing.T, l *redlock.Lock) int {
	t.Helper()
	n := 0
	for i := range shared.Size() {
		info, err := shared.Direct(i).Inspect(context.Background(), l.Key())
		require.NoError(t, err)
		if info.Token == l.Token() {
			n++
		}
	}
	return n
}

// TestKeepAliveReseedsRestartedNodes: two of five nodes restart empty
// while a lock is kept alive; after the next extension they hold the key
// again, so that a third restart still leaves the holder a majority, and a
// second client, trying all along, never gets the lock.
func TestKeepAliveReseedsRestartedNodes(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 5*time.Second)
	var out texts
	c := client(t, redlock.WithTTL(3*time.Second), out.logger())
	l, err := c.TryLock(ctx, p+"k")
	require.NoError(t, err)
	job, stop := l.KeepAlive(ctx)

	rival := client(t, redlock.WithTTL(3*time.Second), out.logger())
	var rivalWon atomic.Bool
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 10000; i++ { // bounded; ends long before
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if rl, err := rival.TryLock(ctx, p+"k"); err == nil {
				rivalWon.Store(true)
				_ = rl.Unlock(ctx)
			} else {
				out.add(err)
			}
		}
	}()

	for _, i := range []int{0, 1} {
		require.NoError(t, shared.Restart(ctx, i, 0))
	}
	// The next extension (at half the TTL) puts the key back.
	require.Eventually(t, func() bool { return holdersOf(t, l) == 5 }, 6*time.Second, 20*time.Millisecond,
		"nodes 0 and 1 hold the key again after an extension")
	require.NoError(t, shared.Restart(ctx, 2, 0))
	time.Sleep(2 * time.Second) // at least one more extension with node 2 empty
	require.NoError(t, job.Err(), "the holder kept the lock throughout")
	assert.GreaterOrEqual(t, holdersOf(t, l), 4)

	close(quit)
	wg.Wait()
	assert.False(t, rivalWon.Load(), "a second client got the lock while it was held")
	stop()
	require.NoError(t, l.Unlock(ctx))
	out.clean(t, l.Token())
}
