// Package history runs randomized, seeded histories of several lock
// clients against real Redis masters whose commands suffer faults
// (package faultnode), and checks each history against the oracles
// (oracle.go).
//
// A history: Clients clients, each a host of its own (its own
// redlock.Client over its own connections to every node), with Workers
// goroutines each, run Lock, TryLock (fenced or not), RLock and Lock on a
// read/write key, Semaphore.Acquire and TryAcquire, Extend, Unlock and
// waits cancelled early, and an election's Campaign, TryCampaign,
// Proclaim, Resign and Leader, on a few keys of the history's own, for
// Duration. Then the faults stop, the holders unlock, the keys must come
// free, the clients close and the nodes must hold nothing of theirs.
// Validity windows are taken on this process's monotonic clock, which
// every client shares.
//
// The seed decides each worker's operations, each connection's faults
// (the n-th command on it) and the restart; the goroutines' interleaving
// is the machine's. Running a seed again replays that schedule.
package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/integration/checker"
	"github.com/quorumlock/redlock/integration/faultnode"
	"github.com/quorumlock/redlock/node"
	"github.com/quorumlock/redlock/redlock"
)

// Config is a history's shape. Default returns the one the tests use.
type Config struct {
	Clients, Workers int           // clients (hosts), goroutines per client
	Duration         time.Duration // how long the workers start operations
	TTLMin, TTLMax   time.Duration // a lock's TTL, uniform in [TTLMin, TTLMax]
	NodeTimeout      time.Duration // redlock.WithNodeTimeout
	MaxHold          time.Duration // a hold lasts up to this long
	Permits          int           // the semaphore's permits
	// Faults are the per-command fault probabilities and bounds; the
	// history sets the Seed.
	Faults faultnode.Schedule
	// Restart is the probability that RestartNodes nodes (default one)
	// restart at a random moment of the history: they lose the history's
	// keys and are down for RestartDown (default TTLMax plus NodeTimeout:
	// a delayed restart, as the Redlock description requires). A
	// majority, or a shorter down time, is unsafe by design: the tests
	// use it to show that the exclusion oracle fails.
	Restart      float64
	RestartNodes int
	RestartDown  time.Duration
	// RoundTrip is the round trip allowed, besides NodeTimeout, for the
	// keys to come free (the Release oracle).
	RoundTrip time.Duration
	// StarveBound is how many times a waiter may be overtaken (see
	// Starved).
	StarveBound int
	// Forget makes the holders drop their locks without Unlock: a broken
	// history whose keys stay until their TTL, for the tests that show
	// the Release and Leftover oracles fail.
	Forget bool
	// Ops, when not empty, are the only operations drawn (names as in
	// AllOps).
	Ops []string
	// TombMax is the longest a tombstone (node.TombKey) may still live
	// after Close: the client renews one while it watches a release,
	// each time for the longest wait between tries (2 s) and a node
	// timeout (redlock's Client.tomb), and stops at Close. A tombstone
	// holds no lock and no place in a queue; the Leftover oracle counts
	// one as left over when it has no TTL or a longer one. Default:
	// 2 s plus NodeTimeout.
	TombMax time.Duration
	// Trace keeps every command the nodes ran (faultnode.Event), the
	// breakers' changes, the calls' waits and grants and the moment the
	// faults stopped, and hands them back in Result.Trace for a history
	// that failed Release, Leftover or Starvation.
	Trace bool
}

// AllOps names every operation a worker draws from.
var AllOps = []string{"lock", "trylock", "lock-fenced", "trylock-fenced", "rlock", "wlock", "sem", "trysem", "lock-cancel",
	"campaign", "trycampaign", "leader"}

// Default returns the tests' configuration: three clients of two
// workers, 300 ms of operations, TTLs of 300 to 800 ms and a 50 ms node
// timeout, every fault kind at a few percent per command.
func Default() Config {
	return Config{
		Clients: 3, Workers: 2,
		Duration: 300 * time.Millisecond,
		TTLMin:   300 * time.Millisecond, TTLMax: 800 * time.Millisecond,
		NodeTimeout: 50 * time.Millisecond,
		MaxHold:     40 * time.Millisecond,
		Permits:     2,
		Faults: faultnode.Schedule{
			Delay: 0.10, LostReply: 0.02, LostCommand: 0.02, Late: 0.02,
			MaxDelay: 30 * time.Millisecond, MaxLate: 60 * time.Millisecond,
		},
		Restart:     0.2,
		RoundTrip:   100 * time.Millisecond,
		StarveBound: 5,
	}
}

// Result is what one history did and every violation found, per oracle.
type Result struct {
	Seed       int64
	Ops        int                      // operations started
	Grants     int                      // locks returned
	Faults     map[faultnode.Kind]int64 // injected, by kind
	Violations map[Oracle][]string      // by oracle
	Errors     []string                 // the harness' own failures (not the library's)
	Abandoned  int                      // Close calls that reported ErrAbandoned
	Unreadable int                      // node reads by the oracles that failed (a node down)
	// Tombstones counts the tombstones found after Close that expire by
	// themselves within Config.TombMax (not left over).
	Tombstones int
	// SlowCalls counts the clients' node calls that timed out between
	// the end of the faults and the Release oracle's verdict, no fault
	// injected (faultnode.State.Slow): the nodes or the machine were
	// slower than the node timeout then.
	SlowCalls int64
	// Extended says that the Release oracle found the keys free only
	// after its bound, within the bound counted from a node call that
	// timed out with no fault injected (see checkFree).
	Extended bool
	// Trace is every command the nodes ran and every mark (see
	// Config.Trace), in order, when Config.Trace is set and Release,
	// Leftover or Starvation failed.
	Trace []string
	opsBy map[string]int
}

// Failed reports whether any oracle in fatal found a violation, or the
// harness failed.
func (r *Result) Failed(fatal map[Oracle]bool) bool {
	if len(r.Errors) > 0 {
		return true
	}
	for o, v := range r.Violations {
		if fatal[o] && len(v) > 0 {
			return true
		}
	}
	return false
}

// String is a multi-line account of the violations.
func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d ops, %d grants, faults %v", r.Seed, r.Ops, r.Grants, r.Faults)
	for _, o := range Oracles {
		for _, v := range r.Violations[o] {
			fmt.Fprintf(&b, "\n  %s: %s", o, v)
		}
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\n  harness: %s", e)
	}
	return b.String()
}

// history is one run's state.
type history struct {
	cfg    Config
	seed   int64
	nodes  Nodes
	prefix string
	states []*faultnode.State
	sched  faultnode.Schedule
	chk    checker.Checker
	ops    atomic.Int64

	mu     sync.Mutex // guards waits, grants, terms, reads, opsBy, trace, marks
	waits  []Wait
	grants []Grant
	terms  []Term
	reads  []Read
	opsBy  map[string]int
	trace  []faultnode.Event
	marks  []mark // with Config.Trace: what the trace shows between the commands
}

// mark is a line of a trace that is not a command: a breaker that moved,
// the faults stopping, a call that waited or was granted.
type mark struct {
	at   time.Time
	text string
}

// note adds a mark to the trace when the history keeps one.
func (h *history) note(at time.Time, format string, args ...any) {
	if !h.cfg.Trace {
		return
	}
	h.mu.Lock()
	h.marks = append(h.marks, mark{at, fmt.Sprintf(format, args...)})
	h.mu.Unlock()
}

// Run runs the history of seed on nodes and checks it.
func Run(ctx context.Context, nodes Nodes, cfg Config, seed int64) *Result {
	h := &history{cfg: cfg, seed: seed, nodes: nodes, prefix: fmt.Sprintf("fh:%d:", seed), opsBy: map[string]int{}}
	h.sched = cfg.Faults
	h.sched.Seed = seed
	res := &Result{Seed: seed, Violations: map[Oracle][]string{}}
	defer h.cleanup(res)

	n := nodes.Size()
	h.states = make([]*faultnode.State, n)
	for i := range h.states {
		h.states[i] = &faultnode.State{Wipe: func(ctx context.Context) error { return h.del(ctx, i) }}
		if cfg.Trace {
			h.states[i].Trace = func(e faultnode.Event) {
				h.mu.Lock()
				h.trace = append(h.trace, e)
				h.mu.Unlock()
			}
		}
	}
	clients := make([]*redlock.Client, cfg.Clients)
	var wrapped []*faultnode.Node
	for c := range clients {
		nodes := make([]node.Node, n)
		for i := range nodes {
			in, err := h.nodes.New(i)
			if err != nil {
				res.Errors = append(res.Errors, err.Error())
				return res
			}
			fn, err := faultnode.Wrap(in, &h.sched, uint64(c*n+i), h.states[i])
			if err != nil {
				res.Errors = append(res.Errors, err.Error())
				if cl, ok := in.(io.Closer); ok {
					_ = cl.Close()
				}
				return res
			}
			nodes[i] = fn
			wrapped = append(wrapped, fn)
		}
		// A breaker that opens holds a node's calls back, background
		// ones included: the trace shows when.
		hooks := redlock.Hooks{Breaker: func(b redlock.BreakerChange) {
			h.note(time.Now(), "node %d client %d: breaker %s -> %s", b.Node, c, b.From, b.To)
		}}
		rc, err := redlock.New(nodes, redlock.WithNodeTimeout(cfg.NodeTimeout), redlock.WithHooks(hooks),
			redlock.WithRetry(redlock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond)))
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
		clients[c] = rc
	}
	closeNodes := func() {
		for _, fn := range wrapped {
			_ = fn.Close()
		}
		wrapped = nil
	}
	defer closeNodes()

	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var restarts sync.WaitGroup
	if rng.Float64() < cfg.Restart {
		at := time.Duration(rng.Int64N(int64(cfg.Duration)))
		down := cfg.RestartDown
		if down == 0 {
			down = cfg.TTLMax + cfg.NodeTimeout
		}
		for _, i := range rng.Perm(n)[:min(max(cfg.RestartNodes, 1), n)] {
			restarts.Add(1)
			go func() {
				defer restarts.Done()
				t := time.NewTimer(at)
				defer t.Stop()
				select {
				case <-t.C:
					if err := h.states[i].Restart(context.Background(), down); err != nil {
						// The node cannot be wiped: it is down
						// itself (a real restart), and comes back
						// without the keys.
						h.unreadable(res)
					}
				case <-runCtx.Done():
				}
			}()
		}
	}
	var workers sync.WaitGroup
	for c, rc := range clients {
		var sem *redlock.Semaphore
		sem, err := rc.Semaphore(h.prefix+"s", cfg.Permits)
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
		el, err := rc.Election(h.prefix+"e", redlock.WithTTL(cfg.TTLMax))
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			return res
		}
		for w := range cfg.Workers {
			holder := c*cfg.Workers + w
			wr := rand.New(rand.NewPCG(uint64(seed), uint64(holder+1)))
			workers.Add(1)
			go func() {
				defer workers.Done()
				for runCtx.Err() == nil {
					h.op(runCtx, rc, sem, el, holder, wr)
				}
			}()
		}
	}
	<-runCtx.Done()
	for _, st := range h.states {
		st.Stop()
	}
	workers.Wait()
	restarts.Wait()
	for _, st := range h.states {
		st.Drain()
	}
	h.note(time.Now(), "faults stopped, holders unlocked: the release oracle's clock starts")
	h.checkFree(res)

	for _, rc := range clients {
		if err := rc.Close(); errors.Is(err, redlock.ErrAbandoned) {
			res.Abandoned++
		} else if err != nil {
			h.harness(res, "close: "+err.Error())
		}
	}
	closeNodes()
	h.checkLeftovers(res)

	ws := h.chk.Windows()
	res.Violations[Exclusion] = append(res.Violations[Exclusion], Overlaps(ws)...)
	res.Violations[Permits] = append(res.Violations[Permits], TooMany(ws, h.prefix+"s:permit:", cfg.Permits)...)
	h.mu.Lock()
	res.Violations[Starvation] = append(res.Violations[Starvation], Starved(h.waits, h.grants, cfg.StarveBound)...)
	res.Violations[Leader] = append(res.Violations[Leader], Stale(h.terms, h.reads)...)
	res.Violations[Fence] = append(res.Violations[Fence], Fences(h.grants)...)
	res.opsBy = h.opsBy
	if len(res.Violations[Release])+len(res.Violations[Leftover])+len(res.Violations[Starvation]) > 0 {
		res.Trace = h.lines(n)
	}
	h.mu.Unlock()
	res.Ops = int(h.ops.Load())
	res.Grants = len(ws)
	res.Faults = map[faultnode.Kind]int64{}
	for _, st := range h.states {
		for k, v := range st.Counts() {
			res.Faults[k] += v
		}
	}
	return res
}

// lines is the trace in time order: the commands the nodes ran and the
// marks, each command on the line of the node and client it ran for.
// Under h.mu.
func (h *history) lines(n int) []string {
	ms := slices.Clone(h.marks)
	for _, w := range h.waits {
		ms = append(ms, mark{w.Start, fmt.Sprintf("holder %d: %s on %q begins (waits)", w.Holder, w.Op, w.Group)})
	}
	for _, g := range h.grants {
		ms = append(ms, mark{g.Got, fmt.Sprintf("holder %d: granted %q (shared %v), asked at %s", g.Holder, g.Key, g.Shared, g.Start.Format("15:04:05.000000"))})
	}
	for _, e := range h.trace {
		ms = append(ms, mark{e.Start, fmt.Sprintf("node %d client %d: %s", e.Stream%uint64(n), e.Stream/uint64(n), e)})
	}
	slices.SortStableFunc(ms, func(a, b mark) int { return a.at.Compare(b.at) })
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.text
		if !strings.HasPrefix(m.text, "node ") || strings.Contains(m.text, ": breaker ") {
			out[i] = m.at.Format("15:04:05.000000") + " " + m.text
		}
	}
	return out
}

var harnessMu sync.Mutex

func (h *history) harness(res *Result, msg string) {
	harnessMu.Lock()
	res.Errors = append(res.Errors, msg)
	harnessMu.Unlock()
}

// op draws one operation and runs it: take, hold (maybe extending),
// unlock.
func (h *history) op(ctx context.Context, rc *redlock.Client, sem *redlock.Semaphore, el *redlock.Election, holder int, r *rand.Rand) {
	ops := h.cfg.Ops
	if len(ops) == 0 {
		ops = AllOps
	}
	name := ops[r.IntN(len(ops))]
	ttl := h.cfg.TTLMin + time.Duration(r.Int64N(int64(h.cfg.TTLMax-h.cfg.TTLMin)+1))
	ttl = ttl.Round(time.Millisecond)
	hold := time.Duration(r.Int64N(int64(h.cfg.MaxHold) + 1))
	extend := r.IntN(4) == 0
	cancelAfter := time.Duration(5+r.IntN(60)) * time.Millisecond
	h.ops.Add(1)
	h.mu.Lock()
	h.opsBy[name]++
	h.mu.Unlock()

	switch name {
	case "campaign", "trycampaign", "leader":
		h.elect(ctx, el, name, holder, hold, extend)
		return
	}
	x, rw := h.prefix+"x", h.prefix+"rw"
	opt := redlock.WithTTL(ttl)
	start := time.Now()
	var l *redlock.Lock
	var err error
	group, waits, cancelled := x, true, false
	switch name {
	case "lock":
		l, err = rc.Lock(ctx, x, opt)
	case "lock-fenced":
		l, err = rc.Lock(ctx, x, opt, redlock.WithFencing())
	case "trylock":
		l, err = rc.TryLock(ctx, x, opt)
		waits = false
	case "trylock-fenced":
		l, err = rc.TryLock(ctx, x, opt, redlock.WithFencing())
		waits = false
	case "rlock":
		group = rw
		l, err = rc.RLock(ctx, rw, opt)
	case "wlock":
		group = rw
		l, err = rc.Lock(ctx, rw, opt)
	case "sem":
		group = h.prefix + "s:permit:"
		l, err = sem.Acquire(ctx, opt)
	case "trysem":
		group, waits = h.prefix+"s:permit:", false
		l, err = sem.TryAcquire(ctx, opt)
	case "lock-cancel":
		cctx, cancel := context.WithTimeout(ctx, cancelAfter)
		l, err = rc.Lock(cctx, x, opt)
		cancel()
		cancelled = err != nil && ctx.Err() == nil
	}
	got := time.Now()
	if waits {
		h.mu.Lock()
		h.waits = append(h.waits, Wait{Holder: holder, Client: holder / h.cfg.Workers, Op: name, Group: group, Start: start, End: got, Served: err == nil, Cancelled: cancelled, Shared: name == "rlock"})
		h.mu.Unlock()
	}
	if err != nil {
		if !errors.Is(err, redlock.ErrNotAcquired) && !errors.Is(err, context.Canceled) &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, redlock.ErrClosed) {
			// The library's errors under faults are outcomes, not the
			// harness' failures; they are kept to read, not counted.
			_ = err
		}
		return
	}
	h.mu.Lock()
	h.grants = append(h.grants, Grant{Holder: holder, Key: l.Key(), Start: start, Got: got, Shared: l.Shared(), Fence: l.Fence()})
	h.mu.Unlock()
	var w *checker.Hold
	if l.Shared() {
		w = h.chk.BeginShared(holder, l.Key(), l.Token(), got, l.Until())
	} else {
		w = h.chk.Begin(holder, l.Key(), l.Token(), got, l.Until())
	}
	time.Sleep(hold / 2)
	if extend {
		ectx, cancel := context.WithTimeout(context.Background(), ttl)
		if l.Extend(ectx, ttl) == nil {
			w.Extend(l.Until())
		}
		cancel()
	}
	time.Sleep(hold / 2)
	w.End(time.Now())
	if h.cfg.Forget {
		return
	}
	uctx, cancel := context.WithTimeout(context.Background(), h.cfg.TTLMax)
	_ = l.Unlock(uctx)
	cancel()
}

// elect runs an election's operation: a Leader read, or a campaign that
// leads for hold (proclaiming another value halfway when proclaim),
// then resigns. A term is a window on the election's key, from
// Campaign's return to Resign's call or the end of its Context.
func (h *history) elect(ctx context.Context, el *redlock.Election, name string, holder int, hold time.Duration, proclaim bool) {
	key := h.prefix + "e"
	start := time.Now()
	if name == "leader" {
		l, err := el.Leader(ctx)
		if err == nil {
			h.mu.Lock()
			h.reads = append(h.reads, Read{Holder: holder, Start: start, End: time.Now(), Leader: l})
			h.mu.Unlock()
		}
		return
	}
	value := fmt.Sprintf("h%d:%d", holder, start.UnixNano())
	var ld *redlock.Leadership
	var err error
	if name == "campaign" {
		ld, err = el.Campaign(ctx, value)
	} else {
		ld, err = el.TryCampaign(ctx, value)
	}
	got := time.Now()
	if name == "campaign" {
		h.mu.Lock()
		h.waits = append(h.waits, Wait{Holder: holder, Client: holder / h.cfg.Workers, Op: name, Group: key, Start: start, End: got, Served: err == nil})
		h.mu.Unlock()
	}
	if err != nil {
		return
	}
	ended := make(chan time.Time, 1)
	stop := context.AfterFunc(ld.Context(), func() { ended <- time.Now() })
	defer stop()
	w := h.chk.Begin(holder, key, fmt.Sprint("term ", ld.Term()), got, got.Add(time.Hour))
	t := Term{Holder: holder, Term: ld.Term(), Values: []string{value}, Start: start, Got: got}
	time.Sleep(hold / 2)
	if proclaim {
		v := value + "'"
		t.Values = append(t.Values, v)
		pctx, cancel := context.WithTimeout(context.Background(), h.cfg.TTLMax)
		_ = ld.Proclaim(pctx, v)
		cancel()
	}
	time.Sleep(hold / 2)
	end := time.Now()
	select {
	case at := <-ended: // lost before its Resign
		end = at
	default:
	}
	w.End(end)
	h.mu.Lock()
	h.grants = append(h.grants, Grant{Holder: holder, Key: key, Start: start, Got: got})
	h.mu.Unlock()
	if h.cfg.Forget {
		h.record(t)
		return
	}
	rctx, cancel := context.WithTimeout(context.Background(), h.cfg.TTLMax)
	if ld.Resign(rctx) == nil {
		t.Resigned = time.Now()
	}
	cancel()
	h.record(t)
}

// record keeps a term for the Leader oracle.
func (h *history) record(t Term) {
	h.mu.Lock()
	h.terms = append(h.terms, t)
	h.mu.Unlock()
}
