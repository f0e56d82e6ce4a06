package integration_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// countingProxy forwards loopback connections to upstream and counts the
// connections clients open to it.
type countingProxy struct {
	ln       net.Listener
	upstream string
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newCountingProxy(t *testing.T, upstream string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &countingProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *countingProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		up, err := net.DialTimeout("tcp", p.upstream, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (p *countingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestBreakerSkipsAStoppedNode: with node 4 stopped, once its breaker is
// open (and the releases owed to it from before have expired) a
// lock+unlock cycle opens no connection to it (counted at a proxy in
// front of it) and locks are still granted; when the node is back it is
// used again within one cooldown.
func TestBreakerSkipsAStoppedNode(t *testing.T) {
	// Longer than the wait for the owed releases to expire and the
	// cycles counted after it: a probe, which the breaker lets through
	// once a cooldown is over, is a call by design.
	const cooldown = 3 * time.Second
	p := prefix(t, 5*time.Second)
	proxy := newCountingProxy(t, shared.Addr(4))
	urls := append(shared.URLs()[:4:4], "redis://"+proxy.ln.Addr().String())
	var (
		mu      sync.Mutex
		changes []redlock.BreakerChange
		node4ok atomic.Int64
	)
	hooks := redlock.Hooks{
		Breaker: func(c redlock.BreakerChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() },
		NodeCall: func(i redlock.NodeCallInfo) {
			if i.Node == 4 && i.Err == nil {
				node4ok.Add(1)
			}
		},
	}
	state := func() redlock.BreakerState {
		mu.Lock()
		defer mu.Unlock()
		if len(changes) == 0 {
			return redlock.BreakerClosed
		}
		return changes[len(changes)-1].To
	}
	c, err := redlock.Dial(urls, redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithHooks(hooks),
		// A short TTL: the background releases of the cycles before the
		// breaker opened (their acquire reached the proxy) go past the
		// breaker until their keys would have expired (see below).
		redlock.WithTTL(time.Second),
		// A background retry that comes when the cooldown is over is
		// the probe; its failure would double the cooldown: capped, the
		// node is used again within a cooldown of its restart.
		redlock.WithBreaker(redlock.Breaker{Failures: 3, Cooldown: cooldown, MaxCooldown: cooldown}))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	cycle := func() {
		t.Helper()
		l, err := c.TryLock(ctx, p+"k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}

	start := scStop(t, shared, 4)
	stopped := time.Now()
	for state() != redlock.BreakerOpen {
		// A refused connection fails at once: the breaker opens at the
		// third failure counted, each a Span (2 × 100ms) after the last.
		require.Less(t, time.Since(stopped), 5*time.Second, "the breaker never opened")
		cycle()
		time.Sleep(10 * time.Millisecond)
	}
	// Calls already under way land, and the releases still owed to the
	// node, which go on past its breaker one at a time (each may open a
	// connection), end with their keys' TTL and two node timeouts.
	time.Sleep(1500 * time.Millisecond)
	before := proxy.accepted.Load()
	for range 20 {
		cycle()
	}
	assert.Equal(t, before, proxy.accepted.Load(), "connections opened to a node whose breaker is open")

	start()
	back := time.Now()
	for state() != redlock.BreakerClosed {
		require.Less(t, time.Since(back), 4*cooldown, "node not used again")
		cycle()
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("node back in use %v after it restarted (cooldown %v)", time.Since(back).Round(time.Millisecond), cooldown)
	n := node4ok.Load()
	cycle()
	assert.Eventually(t, func() bool { return node4ok.Load() > n }, 5*time.Second, time.Millisecond, "node 4 answers again")
}

// TestBreakerSparesASlowNode: a node slower than the node timeout, but
// answering (its replies come in late), is not taken for dead: its breaker
// stays closed over many cycles. A blackholed node, whose replies never
// come, is skipped after a few.
func TestBreakerSparesASlowNode(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 3*time.Second)
	var opened [5]atomic.Int32
	c := client(t, redlock.WithNodeTimeout(20*time.Millisecond), redlock.WithHooks(redlock.Hooks{
		Breaker: func(b redlock.BreakerChange) {
			if b.To == redlock.BreakerOpen {
				opened[b.Node].Add(1)
			}
		},
	}))
	require.NoError(t, shared.Latency(3, 30*time.Millisecond))
	t.Cleanup(func() { shared.Heal(3) })
	blackhole(t, 4)
	for i := range 100 {
		l, err := c.Lock(ctx, p+"k")
		require.NoError(t, err, "cycle %d", i)
		require.NoError(t, l.Unlock(ctx))
		time.Sleep(5 * time.Millisecond) // late replies keep coming in between
	}
	assert.Zero(t, opened[3].Load(), "the slow node (+30ms, timeout 20ms) was taken for dead")
	assert.Positive(t, opened[4].Load(), "the blackholed node was not skipped")
}

// TestSlowNodeTimeoutAdapts: with the default node timeout (50ms for the
// 10s TTL), a node 70ms away first times out, its replies come in late,
// and its timeout grows to fit its round trips: after a few cycles its
// calls succeed (all but the odd one a stall of the machine times out),
// so it holds the lock's key like the others.
func TestSlowNodeTimeoutAdapts(t *testing.T) {
	ctx := context.Background()
	p := prefix(t, 3*time.Second)
	var warm atomic.Bool
	var ok, failed atomic.Int32
	var mu sync.Mutex
	var errs []string
	c := client(t, redlock.WithHooks(redlock.Hooks{NodeCall: func(i redlock.NodeCallInfo) {
		if i.Node == 3 && warm.Load() {
			if i.Err == nil {
				ok.Add(1)
			} else {
				failed.Add(1)
				mu.Lock()
				errs = append(errs, i.Op+": "+i.Err.Error())
				mu.Unlock()
			}
		}
	}}))
	require.NoError(t, shared.Latency(3, 70*time.Millisecond))
	t.Cleanup(func() { shared.Heal(3) })
	for i := range 60 {
		l, err := c.Lock(ctx, p+"k")
		require.NoError(t, err, "cycle %d", i)
		require.NoError(t, l.Unlock(ctx))
		if i == 30 {
			warm.Store(true)
		}
		time.Sleep(10 * time.Millisecond) // a cycle returns at the majority; give the slow node's replies time
	}
	mu.Lock()
	t.Logf("after 30 cycles: %d calls to the slow node answered, %d failed %q", ok.Load(), failed.Load(), errs)
	mu.Unlock()
	assert.Positive(t, ok.Load(), "calls to the slow node succeed once its timeout has grown")
	// Without the adaptation every one of them fails; with it, a
	// scheduling stall of this loaded machine may still time some out
	// (make test saw 1 of 60 once, and 4 to 6 of about 40 in three runs
	// in a row of 2026-11-27 on a busier host, the test alone passing 6
	// of 6 then): a fifth tells the two apart.
	assert.LessOrEqual(t, failed.Load()*5, ok.Load(), "calls to the slow node still fail after 30 cycles (300ms+): %d failed, %d answered", failed.Load(), ok.Load())
}
