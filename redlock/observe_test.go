package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// recorder is a Hooks that keeps everything it is told.
type recorder struct {
	mu       sync.Mutex
	acquires []redlock.AcquireInfo
	extends  []redlock.OpInfo
	unlocks  []redlock.OpInfo
	lost     []error
	calls    []redlock.NodeCallInfo
	changes  []redlock.BreakerChange
}

func (r *recorder) hooks() redlock.Hooks {
	return redlock.Hooks{
		Acquire:  func(i redlock.AcquireInfo) { r.mu.Lock(); r.acquires = append(r.acquires, i); r.mu.Unlock() },
		Extend:   func(i redlock.OpInfo) { r.mu.Lock(); r.extends = append(r.extends, i); r.mu.Unlock() },
		Unlock:   func(i redlock.OpInfo) { r.mu.Lock(); r.unlocks = append(r.unlocks, i); r.mu.Unlock() },
		Lost:     func(_ string, err error) { r.mu.Lock(); r.lost = append(r.lost, err); r.mu.Unlock() },
		NodeCall: func(i redlock.NodeCallInfo) { r.mu.Lock(); r.calls = append(r.calls, i); r.mu.Unlock() },
		Breaker:  func(c redlock.BreakerChange) { r.mu.Lock(); r.changes = append(r.changes, c); r.mu.Unlock() },
	}
}

func (r *recorder) callsOf(op string) (n, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.Op == op {
			n++
			if c.Err != nil {
				failed++
			}
		}
	}
	return n, failed
}

// nodeCalls counts the calls of op to node i that have ended.
func (r *recorder) nodeCalls(i int, op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Node == i && c.Op == op {
			n++
		}
	}
	return n
}

func TestHooksReceiveWhatHappened(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	fakes, clk, c := setup(t, 3, redlock.WithHooks(rec.hooks()))
	fakes[2].setBefore(failOn("acquire"))
	l, err := c.TryLock(ctx, "k")
	require.NoError(t, err)
	clk.Advance(time.Second)
	require.NoError(t, l.Extend(ctx, time.Minute))
	clk.Advance(2 * time.Second)
	require.NoError(t, l.Unlock(ctx))
	for _, f := range fakes {
		f.put("busy", "other", time.Hour)
	}
	_, err = c.TryLock(ctx, "busy")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, c.Close())

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.acquires, 2)
	assert.Equal(t, "k", rec.acquires[0].Key)
	assert.NoError(t, rec.acquires[0].Err)
	assert.Equal(t, 1, rec.acquires[0].Attempts)
	assert.ErrorIs(t, rec.acquires[1].Err, redlock.ErrNotAcquired)
	require.Len(t, rec.extends, 1)
	assert.NoError(t, rec.extends[0].Err)
	require.Len(t, rec.unlocks, 1)
	assert.Equal(t, 3*time.Second, rec.unlocks[0].Held, "held from the acquisition to the unlock, on the client's clock")
	n, failed := 0, 0
	for _, call := range rec.calls {
		if call.Op == "acquire" {
			n++
			if call.Err != nil {
				failed++
				assert.Equal(t, 2, call.Node)
				assert.Equal(t, fakes[2].Addr(), call.Addr)
			}
		}
	}
	assert.Equal(t, 6, n, "every acquire call on every node")
	assert.Equal(t, 2, failed, "node 2 failed both")
	assert.Empty(t, rec.changes, "two failures do not open a breaker")
}

func TestHooksLost(t *testing.T) {
	rec := &recorder{}
	fakes, clk, c := setup(t, 3, redlock.WithTTL(9*time.Second), redlock.WithHooks(rec.hooks()))
	l, err := c.TryLock(context.Background(), "k")
	require.NoError(t, err)
	job, cancel := l.KeepAlive(context.Background())
	defer cancel()
	for _, f := range fakes {
		f.put("k", "thief", time.Hour)
	}
	waitWaiters(t, clk, 2)
	clk.Advance(3 * time.Second)
	<-job.Done()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.lost, 1)
	assert.ErrorIs(t, rec.lost[0], redlock.ErrLost)
}

// TestBreakerSkipsADeadNode: after three failures a second apart, a node is
// skipped — no call, no goroutine — and locks are still granted by the
// others; after the cooldown one probe goes, and its success brings the
// node back.
func TestBreakerSkipsADeadNode(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	fakes, clk, c := setup(t, 3, redlock.WithHooks(rec.hooks()),
		redlock.WithBreaker(redlock.Breaker{Failures: 3, Cooldown: 5 * time.Second}))
	down := func(context.Context, string) error { return &node.Error{Kind: node.ErrUnreachable, Err: errInjected} }
	fakes[2].setBefore(down)
	cycle := func() {
		t.Helper()
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	// Unlock returns at a majority: each cycle's release to the dead node
	// is let fail before the clock moves, so that it counts at its time.
	// (Its NodeCall hook runs once the breaker has counted it; the fake's
	// own count moves before the call fails.)
	released := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return rec.nodeCalls(2, "release") == n }, 5*time.Second, time.Millisecond)
	}
	cycle() // acquire and release fail together: they count once
	released(1)
	clk.Advance(time.Second)
	cycle() // 2: a default Span (2 × the 500ms node timeout) later
	released(2)
	clk.Advance(time.Second)
	cycle() // 3: open (during the acquire or the release)
	require.Eventually(t, func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.changes) == 1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, redlock.BreakerChange{Node: 2, Addr: fakes[2].Addr(), From: redlock.BreakerClosed, To: redlock.BreakerOpen}, rec.changes[0])

	// Unlock returns at a majority, so cycle 3's release to the dead node
	// (sent: the lock had sent that node its acquire) may still be on its way.
	require.Eventually(t, func() bool { return fakes[2].count("release") == 3 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 3, fakes[2].count("acquire"))
	sent := fakes[2].count("acquire") + fakes[2].count("release")
	before := goroutines()
	for range 20 {
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err, "granted by the two live nodes")
		assert.LessOrEqual(t, goroutines()-before, 2, "a goroutine for the skipped node")
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Equal(t, sent, fakes[2].count("acquire")+fakes[2].count("release"), "calls sent to an open node")
	_, skipped := rec.callsOf("acquire")
	assert.GreaterOrEqual(t, skipped, 20)

	// The node comes back; after the cooldown one probe closes the breaker.
	fakes[2].setBefore(nil)
	clk.Advance(5 * time.Second)
	cycle()
	// TryLock returns at the first two grants: the probe's reply may come
	// in after it.
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.changes[len(rec.changes)-1].To == redlock.BreakerClosed
	}, 5*time.Second, time.Millisecond, "closed by the probe")
	n := fakes[2].count("acquire")
	cycle()
	require.Eventually(t, func() bool { return fakes[2].count("acquire") == n+1 }, 5*time.Second, time.Millisecond, "used again")
}

// TestBreakerIgnoresTaken: a node that answers "taken" is up: however
// often, it is never skipped.
func TestBreakerIgnoresTaken(t *testing.T) {
	rec := &recorder{}
	fakes, _, c := setup(t, 3, redlock.WithHooks(rec.hooks()))
	fakes[0].put("k", "other", time.Hour)
	for range 10 {
		l, err := c.TryLock(context.Background(), "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(context.Background()))
	}
	// TryLock returns at a majority: node 0's last "taken" may still be
	// on its way.
	require.Eventually(t, func() bool { return fakes[0].count("acquire") == 10 }, 5*time.Second, time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Empty(t, rec.changes)
}
