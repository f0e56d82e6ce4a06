// Command drift runs the clock-drift experiments on five real Redis nodes:
// when does Redlock's mutual exclusion hold, and when does it break, if
// one node's clock runs fast, jumps forward, or the client pauses?
//
//	cd bench && go run ./drift -out ../docs        # full run, ~12 minutes
//	cd bench && go run ./drift -quick              # smoke run, ~1 minute
//
// Node clocks are emulated, not skewed: Debian's redis-server is linked
// with jemalloc and hangs under libfaketime. What a node's clock does to a
// lock is decide when its key expires, so a node whose clock runs at rate
// 1+ρ gets every TTL divided by 1+ρ (integration/skew.Node), and a forward
// jump of Δ shortens the live TTLs on that node by Δ (skew.Jump). Every
// client sees the same fast node, as with a real fast clock.
//
// It writes docs/EXPERIMENTS-results.md (tables) and docs/drift.png (the
// plot); docs/EXPERIMENTS.md explains them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/cluster"
	"github.com/quorumlock/redlock/integration/skew"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

const (
	nodes    = 5
	fastNode = 2 // the node whose clock is off: in both majorities of the split geometry
)

// geometry says which nodes each client can reach.
type geometry struct {
	name    string
	clients int
	// cut reports whether client c is partitioned from node i.
	cut func(c, i int) bool
	doc string
}

var (
	// split is Kleppmann's worst case: client 0 reaches nodes 0,1,2 and
	// client 1 reaches 2,3,4, so every grant is a bare majority that
	// includes the fast node 2.
	split = geometry{"split", 2, func(c, i int) bool {
		if c == 0 {
			return i >= 3
		}
		return i <= 1
	}, "2 clients; client 0 reaches nodes 0,1,2, client 1 reaches 2,3,4 (every grant is a bare majority holding the fast node 2)"}
	// open is the ordinary case: every client reaches every node, so a
	// grant overlaps only if the holder had a bare majority that included
	// the fast node.
	open = geometry{"open", 3, func(int, int) bool { return false },
		"3 clients, each reaching all 5 nodes"}
)

type params struct {
	cell    time.Duration // per sweep cell
	ttls    []time.Duration
	openTTL time.Duration
	slowTTL time.Duration // the slow-client experiment
	rhos    []float64
	drifts  []float64
	reps    int // repetitions of the jump and pause experiments
}

func main() {
	var (
		quick = flag.Bool("quick", false, "short smoke run (~1 minute)")
		out   = flag.String("out", "", "directory for EXPERIMENTS-results.md and drift.png (e.g. ../docs)")
	)
	flag.Parse()
	p := params{
		cell:    10 * time.Second,
		ttls:    []time.Duration{200 * time.Millisecond, time.Second},
		openTTL: 200 * time.Millisecond,
		slowTTL: 500 * time.Millisecond,
		rhos:    []float64{0, 0.005, 0.01, 0.02, 0.05, 0.10},
		drifts:  []float64{0, 0.01, 0.05},
		reps:    5,
	}
	if *quick {
		p.cell, p.reps = 2*time.Second, 2
		p.ttls = []time.Duration{200 * time.Millisecond}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, p, *out, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "drift:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, p params, outDir string, args []string) error {
	began := time.Now()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	cl, err := cluster.Start(sctx, cluster.Options{Nodes: nodes, Backend: "process"})
	cancel()
	if err != nil {
		return err
	}
	defer cl.Close()
	upstreams := make([]string, nodes)
	for i := range upstreams {
		upstreams[i] = cl.Backend.Upstream(i)
	}
	e := &exp{p: p, upstreams: upstreams, cl: cl}
	fmt.Fprintf(os.Stderr, "drift: five redis-server processes up: %v\n", upstreams)

	var sweep []cellResult
	for _, g := range []geometry{split, open} {
		ttls := p.ttls
		if g.name == "open" {
			ttls = []time.Duration{p.openTTL}
		}
		for _, ttl := range ttls {
			for _, drift := range p.drifts {
				for _, rho := range p.rhos {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					r, err := e.cell(ctx, g, ttl, rho, drift)
					if err != nil {
						return err
					}
					fmt.Fprintf(os.Stderr, "drift: %s\n", r.line())
					sweep = append(sweep, r)
				}
			}
		}
	}
	for _, drift := range []float64{0.01, 0.05} {
		for _, slow := range p.rhos {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := e.cellWith(ctx, open, p.slowTTL, 0, drift, slow)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "drift: %s\n", r.line())
			sweep = append(sweep, r)
		}
	}
	jumps, err := e.jumps(ctx)
	if err != nil {
		return err
	}
	pauses, err := e.pauses(ctx)
	if err != nil {
		return err
	}
	rep := report{p: p, args: args, took: time.Since(began), sweep: sweep, jumps: jumps, pauses: pauses}
	var w io.Writer = os.Stdout
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(outDir, "EXPERIMENTS-results.md"))
		if err != nil {
			return err
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
		if err := plotSweep(sweep, p, filepath.Join(outDir, "drift.png")); err != nil {
			return err
		}
	}
	rep.write(w)
	return nil
}

// exp holds what every experiment shares.
type exp struct {
	p         params
	upstreams []string
	cl        *cluster.Cluster
	seq       int
}

// key returns a key no earlier run used.
func (e *exp) key(what string) string {
	e.seq++
	return fmt.Sprintf("drift:%d:%d:%s", time.Now().UnixNano(), e.seq, what)
}

// clients dials one redlock client per client of g, each with pools of
// its own; node fastNode runs at rate 1+rho for all of them. close ends
// the clients and their pools.
func (e *exp) clients(g geometry, rho float64, opts ...redlock.Option) (cs []*redlock.Client, close func(), err error) {
	return e.clientsWith(g, rho, nil, opts...)
}

// clientsWith is clients with extra options for client c from perClient
// (nil: none).
func (e *exp) clientsWith(g geometry, rho float64, perClient func(c int) []redlock.Option, opts ...redlock.Option) (cs []*redlock.Client, close func(), err error) {
	var pools []*node.Redis
	close = func() {
		for _, c := range cs {
			c.Close()
		}
		for _, p := range pools {
			p.Close()
		}
	}
	for c := range g.clients {
		ns := make([]node.Node, nodes)
		for i := range ns {
			ep, err := node.ParseURL("redis://" + e.upstreams[i])
			if err != nil {
				close()
				return nil, nil, err
			}
			if g.cut(c, i) {
				ns[i] = skew.Cut{Address: ep.Addr()}
				continue
			}
			r := node.New(ep, node.Options{})
			pools = append(pools, r)
			ns[i] = r
			if i == fastNode && rho != 0 {
				ns[i] = &skew.Node{Node: r, Rate: 1 + rho}
			}
		}
		all := opts
		if perClient != nil {
			all = append(append([]redlock.Option(nil), opts...), perClient(c)...)
		}
		cl, err := redlock.New(ns, all...)
		if err != nil {
			close()
			return nil, nil, err
		}
		cs = append(cs, cl)
	}
	return cs, close, nil
}

// cellResult is one cell of the sweep.
type cellResult struct {
	geom        string
	ttl         time.Duration
	rho, drift  float64
	grants      int
	overlapping int           // grants whose window overlaps another client's
	maxOverlap  time.Duration // longest overlap
	held        time.Duration // union of the windows
	dur         time.Duration
	predicted   bool // theory: an overlap is possible in the worst case
}

func (r cellResult) line() string {
	return fmt.Sprintf("%-5s ttl=%-5v rho=%4.1f%% drift=%.2f: %3d grants, %3d overlapping (max %v), held %3.0f%%, theory %s",
		r.geom, r.ttl, 100*r.rho, r.drift, r.grants, r.overlapping, r.maxOverlap.Round(10*time.Microsecond),
		100*r.held.Seconds()/r.dur.Seconds(), map[bool]string{true: "possible", false: "excluded"}[r.predicted])
}

// predicted is the worst-case condition: the fast node drops the key
// ttl·ρ/(1+ρ) early, and the client gives up ttl·f + 2 ms (plus the time
// the acquisition took, which only helps). An overlap is possible when
// the first exceeds the second.
func predicted(ttl time.Duration, rho, drift float64) bool {
	early := time.Duration(float64(ttl) * rho / (1 + rho))
	return early > time.Duration(float64(ttl)*drift)+2*time.Millisecond
}

// slowPredicted is the worst case for a client clock running at 1−s: the
// holder believes in validity/(1−s) of real time while every node expires
// the key after ttl. With the acquisition time left out, an overlap is
// possible when (ttl − ttl·f − 2 ms)/(1−s) > ttl.
func slowPredicted(ttl time.Duration, s, drift float64) bool {
	v := float64(ttl) - float64(ttl)*drift - float64(2*time.Millisecond)
	return v/(1-s) > float64(ttl)
}

// cell runs the clients of g against one key for p.cell. Each holder
// keeps the lock for its whole validity (the most a correct client may
// do) and records the window [Lock returned, Until()]; then it unlocks.
func (e *exp) cell(ctx context.Context, g geometry, ttl time.Duration, rho, drift float64) (cellResult, error) {
	return e.cellWith(ctx, g, ttl, rho, drift, -1)
}

// cellWith is cell where, if slow >= 0, client 0's own monotonic clock
// runs at rate 1−slow (a slow client clock; the slow-client experiment).
func (e *exp) cellWith(ctx context.Context, g geometry, ttl time.Duration, rho, drift, slow float64) (cellResult, error) {
	timeout := min(50*time.Millisecond, ttl/4)
	var slowClk *scaledClock
	perClient := func(c int) []redlock.Option { return nil }
	if slow >= 0 {
		slowClk = newScaledClock(1 - slow)
		perClient = func(c int) []redlock.Option {
			if c == 0 {
				return []redlock.Option{redlock.WithClock(slowClk)}
			}
			return nil
		}
	}
	cs, closeAll, err := e.clientsWith(g, rho, perClient,
		redlock.WithTTL(ttl), redlock.WithDriftFactor(drift), redlock.WithNodeTimeout(timeout),
		// Tight, jittered retries: a waiting client pounces as soon as a
		// majority is free, which is what exposes an early expiry.
		redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 4*time.Millisecond)))
	if err != nil {
		return cellResult{}, err
	}
	defer closeAll()
	key := e.key(g.name)
	var chk checker.Checker
	start := time.Now()
	stop := start.Add(e.p.cell)
	var wg sync.WaitGroup
	for w, c := range cs {
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				lctx, cancel := context.WithDeadline(ctx, stop)
				l, err := c.Lock(lctx, key)
				cancel()
				if err != nil {
					continue
				}
				acquired := time.Now()
				until := l.Until()
				if w == 0 && slowClk != nil {
					// Until is on the client's own clock: the holder
					// believes it holds the lock until that clock
					// reads it, which is later in real time.
					until = slowClk.real(until)
				}
				time.Sleep(time.Until(until))
				chk.Record(checker.Window{Holder: w, Key: key, Token: l.Token(), Acquired: acquired, End: until})
				uctx, ucancel := context.WithTimeout(context.Background(), ttl)
				_ = l.Unlock(uctx)
				ucancel()
			}
		})
	}
	wg.Wait()
	dur := time.Since(start)
	r := cellResult{geom: g.name, ttl: ttl, rho: rho, drift: drift, dur: dur, predicted: predicted(ttl, rho, drift)}
	if slow >= 0 {
		// A client clock slow by s stretches the holder's validity by
		// 1/(1−s) in real time, against honest expiry on every node.
		r.geom, r.rho, r.predicted = "slow-client", slow, slowPredicted(ttl, slow, drift)
	}
	ws := chk.Windows()
	r.grants = len(ws)
	bad := map[string]bool{}
	for _, o := range chk.Overlaps() {
		bad[o.A.Token], bad[o.B.Token] = true, true
		r.maxOverlap = max(r.maxOverlap, o.By)
	}
	r.overlapping = len(bad)
	r.held = union(ws)
	return r, e.settle(ctx, key, ttl)
}

// settle waits until key is gone from every node (released or expired),
// so that no experiment leaves a key behind.
func (e *exp) settle(ctx context.Context, key string, ttl time.Duration) error {
	deadline := time.Now().Add(2*ttl + time.Second)
	for {
		left := 0
		for i := range nodes {
			info, err := e.cl.Direct(i).Inspect(ctx, key)
			if err != nil {
				return err
			}
			if info.Token != "" {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("key %s still on %d nodes", key, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// union is the time covered by at least one window.
func union(ws []checker.Window) time.Duration {
	sort.Slice(ws, func(i, j int) bool { return ws[i].Acquired.Before(ws[j].Acquired) })
	var total time.Duration
	var curS, curE time.Time
	for _, w := range ws {
		if !w.End.After(w.Acquired) {
			continue
		}
		if curE.IsZero() || w.Acquired.After(curE) {
			total += curE.Sub(curS)
			curS, curE = w.Acquired, w.End
			continue
		}
		if w.End.After(curE) {
			curE = w.End
		}
	}
	return total + curE.Sub(curS)
}

// jumpResult is one forward-jump size, over several repetitions.
type jumpResult struct {
	jump       time.Duration
	reps       int
	overlaps   int
	maxOverlap time.Duration
}

// jumps: Kleppmann's A,B,C / C,D,E scenario with a clock jump. Client A
// (nodes 0,1,2) takes the lock; 100 ms into its hold node 2's clock jumps
// forward by Δ; client B (nodes 2,3,4) tries until A's validity is over.
func (e *exp) jumps(ctx context.Context) ([]jumpResult, error) {
	const ttl = time.Second
	const drift = 0.01 // the default: 12 ms of allowance for a 1 s TTL
	var out []jumpResult
	for _, jump := range []time.Duration{0, 5 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		res := jumpResult{jump: jump, reps: e.p.reps}
		for range e.p.reps {
			by, err := e.jumpOnce(ctx, ttl, drift, jump)
			if err != nil {
				return nil, err
			}
			if by > 0 {
				res.overlaps++
				res.maxOverlap = max(res.maxOverlap, by)
			}
		}
		fmt.Fprintf(os.Stderr, "drift: jump %v: %d/%d overlapping (max %v)\n", jump, res.overlaps, res.reps, res.maxOverlap)
		out = append(out, res)
	}
	return out, nil
}

func (e *exp) jumpOnce(ctx context.Context, ttl time.Duration, drift float64, jump time.Duration) (time.Duration, error) {
	cs, closeAll, err := e.clients(split, 0, redlock.WithTTL(ttl), redlock.WithDriftFactor(drift),
		redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithRetry(redlock.NoRetry()))
	if err != nil {
		return 0, err
	}
	defer closeAll()
	a, b := cs[0], cs[1]
	key := e.key("jump")
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	la, err := a.Lock(lctx, key, redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond)))
	cancel()
	if err != nil {
		return 0, err
	}
	aAt := time.Now()
	time.Sleep(100 * time.Millisecond)
	if jump > 0 {
		if _, _, err := skew.Jump(ctx, e.cl.Direct(fastNode), key, jump); err != nil {
			return 0, err
		}
	}
	var chk checker.Checker
	chk.Record(checker.Window{Holder: 0, Key: key, Token: la.Token(), Acquired: aAt, End: la.Until()})
	for time.Now().Before(la.Until()) {
		lb, err := b.TryLock(ctx, key)
		if err == nil {
			chk.Record(checker.Window{Holder: 1, Key: key, Token: lb.Token(), Acquired: time.Now(), End: lb.Until()})
			_ = lb.Unlock(context.Background())
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = la.Unlock(context.Background())
	var by time.Duration
	for _, o := range chk.Overlaps() {
		by = max(by, o.By)
	}
	return by, e.settle(ctx, key, ttl)
}

// pauseResult is the client-pause experiment for one policy.
type pauseResult struct {
	policy       string
	reps         int
	unsafeWrites int // writes A made while B held the lock
	notHeld      int // A's Unlock said ErrNotHeld
}

// pauses: client A takes the lock, then stalls (a GC pause, SIGSTOP)
// for its validity plus 200 ms; B takes the expired lock and holds it.
// When A wakes it "writes" — blindly, or only if TTL() > 0.
func (e *exp) pauses(ctx context.Context) ([]pauseResult, error) {
	const ttl = 500 * time.Millisecond
	var out []pauseResult
	for _, checked := range []bool{false, true} {
		res := pauseResult{policy: map[bool]string{false: "write after waking, no check", true: "write only if TTL() > 0"}[checked], reps: e.p.reps}
		for range e.p.reps {
			unsafe, notHeld, err := e.pauseOnce(ctx, ttl, checked)
			if err != nil {
				return nil, err
			}
			if unsafe {
				res.unsafeWrites++
			}
			if notHeld {
				res.notHeld++
			}
		}
		fmt.Fprintf(os.Stderr, "drift: pause, %s: %d/%d unsafe writes\n", res.policy, res.unsafeWrites, res.reps)
		out = append(out, res)
	}
	return out, nil
}

func (e *exp) pauseOnce(ctx context.Context, ttl time.Duration, checked bool) (unsafe, notHeld bool, err error) {
	cs, closeAll, err := e.clients(open, 0, redlock.WithTTL(ttl), redlock.WithNodeTimeout(50*time.Millisecond),
		redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 5*time.Millisecond)))
	if err != nil {
		return false, false, err
	}
	defer closeAll()
	a, b := cs[0], cs[1]
	key := e.key("pause")
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	la, err := a.Lock(lctx, key)
	if err != nil {
		return false, false, err
	}
	// B waits for the lock while A is stalled and holds it for 400 ms.
	type grant struct{ from, to time.Time }
	bHeld := make(chan grant, 1)
	go func() {
		lb, err := b.Lock(lctx, key)
		if err != nil {
			close(bHeld)
			return
		}
		from := time.Now()
		time.Sleep(min(400*time.Millisecond, time.Until(lb.Until())))
		bHeld <- grant{from, time.Now()}
		_ = lb.Unlock(context.Background())
	}()
	time.Sleep(time.Until(la.Until()) + 200*time.Millisecond) // the stall
	wrote := time.Now()
	if checked && la.TTL() <= 0 {
		wrote = time.Time{} // A sees its lock is gone and does not write
	}
	notHeld = errors.Is(la.Unlock(context.Background()), redlock.ErrNotHeld)
	g, ok := <-bHeld
	if !ok {
		return false, false, fmt.Errorf("pause: B never got the lock")
	}
	unsafe = !wrote.IsZero() && wrote.After(g.from) && wrote.Before(g.to)
	return unsafe, notHeld, e.settle(ctx, key, ttl)
}

// scaledClock is a client clock running at rate times real time (rate <
// 1: slow), for the slow-client experiment. It implements clock.Clock;
// its readings carry the monotonic clock, scaled.
type scaledClock struct {
	origin time.Time
	rate   float64
}

func newScaledClock(rate float64) *scaledClock { return &scaledClock{origin: time.Now(), rate: rate} }

// Now returns origin + rate × (real time since origin).
func (c *scaledClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.origin)) * c.rate))
}

// Since returns the time since t on this clock.
func (c *scaledClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewTimer fires once d has passed on this clock.
func (c *scaledClock) NewTimer(d time.Duration) clock.Timer {
	return clock.Real{}.NewTimer(time.Duration(float64(d) / c.rate))
}

// real converts a reading of this clock to real time.
func (c *scaledClock) real(t time.Time) time.Time {
	return c.origin.Add(time.Duration(float64(t.Sub(c.origin)) / c.rate))
}
