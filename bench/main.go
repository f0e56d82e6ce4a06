// Command bench measures this Redlock client (over its redigo nodes, and
// over goredis nodes) side by side with go-redsync (default and
// fail-fast) and a raw redigo floor, on five local
// redis-server processes, in two set-ups: every node behind an in-process
// toxiproxy, and only the faulty node behind one (the other four reached
// directly), so that the proxies do not compress the ratios.
//
// It is its own module so that the peers stay out of the library's go.mod.
// Run it from this directory:
//
//	go run . -quick                  # ~2 minute smoke run
//	go run . -out results/latest.md  # full run, ~8 minutes on 2 cores
//	go vet ./...
//
// See README.md for what is measured and how.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
)

type params struct {
	quick        bool
	profDir      string
	only         map[string]bool
	rounds       int           // interleaved rounds per scenario
	roundDur     time.Duration // per contender per round
	warmup       time.Duration // per contender, before the rounds
	tail         time.Duration // goroutine pass per contender
	tailBH       time.Duration // goroutine pass per contender, blackholed scenario
	settleDur    time.Duration // wait before counting goroutines left
	directRounds int
	directCycles int // per contender per direct round
	parallel     int
	contenders   int           // goroutines in the contended scenarios
	clients      int           // separate client instances in the contended-clients scenario
	dieTTL       time.Duration // the dying holder's TTL in the holder-dies scenario
	dieCycles    int           // holder-dies cycles per contender per round
	hold         time.Duration
	latency      time.Duration
	faultNode    int
	faultWorkers int
	setup        setup
	setups       map[string]bool // nil: all
	before       string          // report of the run before a redesign, to compare with
}

// topology is how the contenders reach the nodes.
type topology struct {
	id, title string
	urls      []string
	scenarios []string // scenario ids run in this set-up
}

type scenario struct {
	id, title string
	workers   int
	contended bool
	// clients > 1 splits the workers over that many client instances of
	// the same contender (separate pools and, for A, separate waiter
	// queues), as that many hosts would be; the first has the workers
	// 0..workers/clients-1, and so on.
	clients int
	// dies: each cycle, a holder on a client of its own takes a fresh key
	// with a short TTL (dieTTL) and never releases it; the workers then
	// wait for it on their clients.
	dies  bool
	fault string // "", "latency", "blackhole"
}

// client returns which client instance worker w uses.
func (sc scenario) client(w int) int {
	if sc.clients <= 1 {
		return 0
	}
	return w / max(1, sc.workers/sc.clients)
}

// handoff reports whether the lock went from worker from to another
// worker: across clients, to a worker of another client.
func (sc scenario) handoff(from, to int) bool {
	if sc.clients > 1 {
		return sc.client(from) != sc.client(to)
	}
	return from != to
}

type roundRes struct {
	cycles  int
	elapsed time.Duration
	mallocs uint64
	bytes   uint64
	cpu     time.Duration // process user+sys time
	gorEnd  int           // client goroutines right after the round, minus those right before it
}

// cpuTime returns the process' user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type gorRes struct {
	ran                   bool
	base, baseProxy       int
	half, halfProxy       int // during the run, at half time, minus base and the harness' own goroutines
	end, endProxy         int // right after the last cycle, minus base
	settled, settledProxy int // after settleDur, minus base
	cycles                int
	dur                   time.Duration
	drain                 time.Duration // blackholed: time until the closed instance's goroutines were gone
	drained               bool
	// samples of client (non-proxy) goroutines during the run, minus base
	// and the harness' own goroutines, at 1/10 .. 10/10 of the run.
	samples  []int
	maxCycle time.Duration
	errs     int
	leaked   int // blackholed: commands that reached the node during the pass
}

// result is one contender in one scenario.
type result struct {
	c          *contender
	cycle, acq hist
	gap        hist // contended: release start to the next holder's grant
	gapOther   hist // the same, only when the next holder is another goroutine
	rounds     []roundRes
	ratios     []float64   // per round: (time per cycle) / (raw floor's, same round)
	cpuRatios  []float64   // per round: (CPU per cycle) / (raw floor's, same round)
	gorEnd     []int       // per round: client goroutines left at the round's end
	calls      []callStats // A only: per node, what its calls did during the rounds (hooks)
	lockErrs   int
	unlockErrs int
	cut        int // contended: Lock ended by the round's end
	firstErr   string
	perWorker  []int
	violations int
	leaked     int // blackholed: commands that reached the node during the rounds (should be 0)
	gor        gorRes
}

type scenarioRes struct {
	topo    *topology
	sc      scenario
	res     []*result // by contender, as contenderIDs
	elapsed time.Duration
}

type directRes struct {
	c       *contender
	allocs  []float64 // per round
	bytes   []float64
	cpu     []float64 // process CPU µs per cycle, per round
	ratios  []float64
	cycle   hist
	cycles  int
	elapsed time.Duration
	sites   []allocSite // A only: where its allocations come from
}

type bench struct {
	p    params
	cl   *cluster.Cluster
	ctx  context.Context
	urls []string     // the current set-up's node URLs
	cur  setup        // the current scenario's contender set-up (A's counters)
	cons []*contender // the current scenario's instances
	// extra are the further instances a scenario made for its other
	// clients and dying holders; closed with the scenario.
	extra []*contender
	log   func(format string, args ...any)
}

// wstate is one harness goroutine's state for one contender in one
// scenario; it lives across rounds.
type wstate struct {
	w          worker
	keys       []string
	k          int
	cycle, acq *hist
	holder     worker // holder-dies: the dying holder, on a client of its own (first worker only)
	n          int
	lockErrs   int
	unlockErs  int
	cut        int
	firstErr   error
	sections   int
	maxCycle   time.Duration // longest cycle (lock errors included) since last reset
}

// failed counts an error in count and keeps the first one seen.
func (st *wstate) failed(count *int, err error) {
	*count++
	if st.firstErr == nil {
		st.firstErr = err
	}
}

func main() {
	var (
		quick   = flag.Bool("quick", false, "short smoke run (~2 minutes)")
		out     = flag.String("out", "", "also write the Markdown report to this file")
		rounds  = flag.Int("rounds", 0, "interleaved rounds per scenario (default 16, quick 8)")
		roundD  = flag.Duration("round", 0, "duration per contender per round (default 400ms, quick 120ms)")
		pool    = flag.Int("pool", 64, "MaxIdle = MaxActive per node, for every contender")
		sockT   = flag.Duration("socket-timeout", time.Second, "redigo dial/read/write timeout for every pool (node.Options.Timeout default)")
		chkIdle = flag.Duration("check-idle", 0, "A's node.Options.CheckIdle (0: the library's default, 1s; negative: off); for diagnosis")
		grCtx   = flag.Bool("goredis-ctx-timeout", false, "E's go-redis clients with ContextTimeoutEnabled (go-redis bounds reads and writes and drops late connections; default: the nodes bound calls from goroutines); for diagnosis")
		fault   = flag.Int("fault-node", 4, "index of the node that gets the latency or the blackhole")
		faultW  = flag.Int("fault-workers", 1, "goroutines in the latency and blackholed scenarios")
		maxTime = flag.Duration("max", 0, "watchdog: abort after this long (default 20m, quick 6m)")
		only    = flag.String("scenarios", "", "comma-separated subset of scenarios to run (healthy-serial,healthy-parallel,latency,blackhole,contended,contended-clients,holder-dies); default all")
		setups  = flag.String("setups", "", "comma-separated subset of set-ups to run (proxied: all nodes behind proxies; mixed: only the faulty node behind one); default both")
		before  = flag.String("before", "results/before-ccc0598.md", "report of an earlier run (its own harness) to compare with; skipped when missing")
		profDir = flag.String("allocprofile", "", "after the direct pass, write per-contender allocation profiles (MemProfileRate=1) to this directory")
	)
	flag.Parse()
	p := params{
		quick: *quick, rounds: 16, roundDur: 400 * time.Millisecond, warmup: 300 * time.Millisecond,
		tail: time.Second, tailBH: 6 * time.Second, settleDur: 300 * time.Millisecond,
		directRounds: 10, directCycles: 1000,
		parallel: 32, contenders: 8, clients: 4, dieTTL: 250 * time.Millisecond, dieCycles: 4,
		hold: time.Millisecond, latency: 30 * time.Millisecond,
		faultNode: *fault, faultWorkers: *faultW, profDir: *profDir, before: *before,
		setup: setup{ttl: 10 * time.Second, pool: *pool, sockTimeout: *sockT, rawTimeout: 50 * time.Millisecond, checkIdle: *chkIdle, goredisCtxTimeout: *grCtx},
	}
	watchdog := 20 * time.Minute
	if p.quick {
		p.rounds, p.roundDur, p.warmup = 8, 120*time.Millisecond, 80*time.Millisecond
		p.tail, p.tailBH, p.settleDur = 300*time.Millisecond, 1500*time.Millisecond, 200*time.Millisecond
		p.directRounds, p.directCycles = 8, 200
		p.dieCycles = 2
		watchdog = 6 * time.Minute
	}
	if *rounds > 0 {
		p.rounds = *rounds
	}
	if *roundD > 0 {
		p.roundDur = *roundD
	}
	if *maxTime > 0 {
		watchdog = *maxTime
	}
	if *only != "" {
		p.only = map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			p.only[strings.TrimSpace(id)] = true
		}
	}
	if *setups != "" {
		p.setups = map[string]bool{}
		for _, id := range strings.Split(*setups, ",") {
			p.setups[strings.TrimSpace(id)] = true
		}
	}
	if p.faultNode < 0 || p.faultNode > 4 {
		fmt.Fprintln(os.Stderr, "bench: -fault-node must be in [0, 4]")
		os.Exit(2)
	}
	os.Exit(run(p, *out, watchdog))
}

func run(p params, out string, watchdog time.Duration) int {
	started := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] "+format+"\n", append([]any{time.Since(started).Seconds()}, args...)...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e := env{loadStart: loadAvg(), otherRedis: otherRedis()}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cl, err := cluster.Start(sctx, cluster.Options{Nodes: 5, Backend: "process"})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cannot start the cluster:", err)
		return 1
	}
	var closeOnce sync.Once
	closeCluster := func() { closeOnce.Do(func() { _ = cl.Close() }) }
	defer closeCluster()
	// Every loop ends by itself; the watchdog is for the unforeseen. The
	// redis-server processes also die with us (Pdeathsig).
	wd := time.AfterFunc(watchdog, func() {
		fmt.Fprintf(os.Stderr, "bench: watchdog: still running after %v, aborting\n", watchdog)
		closeCluster()
		os.Exit(3)
	})
	defer wd.Stop()
	logf("cluster up: %v (upstreams %s ...)", cl.URLs(), cl.Backend.Upstream(0))

	proxied := cl.URLs()
	direct := make([]string, cl.Size())
	mixed := make([]string, cl.Size())
	for i := range direct {
		direct[i] = "redis://" + cl.Backend.Upstream(i)
		mixed[i] = direct[i]
	}
	// Only the faulty node behind its proxy: the healthy majority is
	// reached directly, so the proxies no longer sit in every cycle's
	// quorum (nor burn CPU for it) and compress the ratios.
	mixed[p.faultNode] = proxied[p.faultNode]

	b := &bench{p: p, cl: cl, ctx: ctx, log: logf}
	// The floor's release script, loaded once on every node (directly, not
	// through the proxies); the floor falls back to EVAL on NOSCRIPT anyway.
	for i := 0; i < cl.Size(); i++ {
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.Direct(i).Command(lctx, "SCRIPT", "LOAD", releaseSrc)
		lcancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: script load:", err)
			return 1
		}
	}

	// One cycle of every contender straight to the nodes: each client's
	// own scripts (the library's release.lua, redsync's delete script) are
	// then in every node's cache, as the floor's is, whatever scenario
	// runs first. Otherwise the first release on a slow node would pay
	// NOSCRIPT and an EVAL: two round trips within one node timeout.
	if err := b.primeScripts(direct); err != nil {
		fmt.Fprintln(os.Stderr, "bench: priming scripts:", err)
		return 1
	}

	scenarios := []scenario{
		{id: "healthy-serial", title: "Healthy, serial (1 goroutine, distinct keys)", workers: 1},
		{id: "healthy-parallel", title: fmt.Sprintf("Healthy, parallel (%d goroutines, distinct keys)", p.parallel), workers: p.parallel},
		{id: "latency", title: fmt.Sprintf("One node +%v latency (node %d of 1–5, %d goroutine(s), distinct keys)", p.latency, p.faultNode+1, p.faultWorkers), workers: p.faultWorkers, fault: "latency"},
		{id: "blackhole", title: fmt.Sprintf("One node blackholed (node %d of 1–5, %d goroutine(s), distinct keys)", p.faultNode+1, p.faultWorkers), workers: p.faultWorkers, fault: "blackhole"},
		{id: "contended", title: fmt.Sprintf("Contended (%d goroutines on one key, holding %v)", p.contenders, p.hold), workers: p.contenders, contended: true},
		{id: "contended-clients", title: fmt.Sprintf("Contended across clients (%d client instances × %d goroutines on one key, holding %v)", p.clients, p.contenders/p.clients, p.hold), workers: p.contenders, clients: p.clients, contended: true},
		{id: "holder-dies", title: fmt.Sprintf("A holder dies without unlocking (TTL %v; %d waiters, each on a client of its own)", p.dieTTL, 2), workers: 2, clients: 2, dies: true},
	}
	topos := []*topology{
		{id: "proxied", title: "all five nodes behind in-process toxiproxies", urls: proxied,
			scenarios: []string{"healthy-serial", "healthy-parallel", "latency", "blackhole", "contended", "contended-clients", "holder-dies"}},
		{id: "mixed", title: fmt.Sprintf("only the faulty node (node %d) behind a toxiproxy, the other four reached directly", p.faultNode+1), urls: mixed,
			scenarios: []string{"healthy-serial", "latency", "blackhole"}},
	}
	var results []*scenarioRes
	for _, tp := range topos {
		if p.setups != nil && !p.setups[tp.id] {
			continue
		}
		b.urls = tp.urls
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				break
			}
			if p.only != nil && !p.only[sc.id] || !slices.Contains(tp.scenarios, sc.id) {
				continue
			}
			if r := b.scenario(tp, sc); len(r.res) == len(contenderIDs) {
				results = append(results, r)
			}
		}
	}
	var diag []diagRes
	if ctx.Err() == nil && (p.only == nil || p.only["latency"]) && (p.setups == nil || p.setups["mixed"]) {
		b.urls = mixed
		diag = b.latencyDiag()
	}
	var dres []*directRes
	if ctx.Err() == nil {
		var err error
		dres, err = b.directPass(direct)
		if err != nil {
			logf("direct pass failed: %v", err)
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	closeCluster()
	total := time.Since(started)

	e.loadEnd = loadAvg()
	report := render(p, topos, results, dres, diag, readBefore(p.before), total, e)
	fmt.Print(report)
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
			err = os.WriteFile(out, []byte(report), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: writing", out+":", err)
			return 1
		}
		logf("report written to %s", out)
	}
	logf("done in %v", total.Round(time.Second))
	return 0
}

// contenderIDs are the contenders, in the order of every result slice
// (res, per, ds ...): A first; the floor, D, at floorIdx.
var contenderIDs = []string{"A", "B", "C", "D", "E"}

// floorIdx is the raw floor's (D's) index in contenderIDs and in every
// result slice: the contender every ratio is relative to.
var floorIdx = slices.Index(contenderIDs, "D")

// makeContender returns a fresh instance of contender id (own pools, no
// connection yet).
func makeContender(id string, urls []string, s setup) (*contender, error) {
	switch id {
	case "A":
		return newOurs(urls, s)
	case "B":
		return newRedsync(urls, s, false), nil
	case "C":
		return newRedsync(urls, s, true), nil
	case "D":
		return newRaw(urls, s)
	case "E":
		return newOursGoredis(urls, s)
	}
	return nil, fmt.Errorf("no contender %q", id)
}

func makeContenders(urls []string, s setup) ([]*contender, error) {
	var out []*contender
	for _, id := range contenderIDs {
		c, err := makeContender(id, urls, s)
		if err != nil {
			for _, o := range out {
				_ = o.close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// primeScripts runs one lock+unlock cycle of every contender on urls.
func (b *bench) primeScripts(urls []string) error {
	cons, err := makeContenders(urls, b.p.setup)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cons {
			_ = c.close()
		}
	}()
	for _, c := range cons {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		w := c.newWorker()
		err := w.Lock(ctx, "bench:prime:"+c.id)
		if err == nil {
			err = w.Unlock(ctx)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", c.id, err)
		}
	}
	return nil
}

// renew closes contender i and puts a fresh instance in its place, its
// workers keeping their keys. It returns how long the client goroutines
// took to get back to want after the close (max 10 s).
func (b *bench) renew(i int, states []*wstate, want int) time.Duration {
	start := time.Now()
	_ = b.cons[i].close()
	d, _ := b.drain(want, 10*time.Second)
	c, err := makeContender(b.cons[i].id, b.urls, b.cur)
	if err != nil {
		b.log("renew %s: %v", b.cons[i].id, err)
		return time.Since(start)
	}
	b.cons[i] = c
	for _, st := range states {
		st.w = c.newWorker()
	}
	return d
}

func (b *bench) applyFault(kind string) {
	var err error
	switch kind {
	case "latency":
		err = b.cl.Latency(b.p.faultNode, b.p.latency)
	case "blackhole":
		err = b.cl.Blackhole(b.p.faultNode)
	}
	if err != nil {
		b.log("fault %s: %v", kind, err)
	}
}

func (b *bench) heal() { b.cl.Heal(b.p.faultNode) }

func (b *bench) newStates(sc scenario, c *contender) []*wstate {
	// A key must not come round again within the TTL (10 s): an unlock
	// that failed leaves it held until it expires, and reusing it would
	// turn into "taken" and retries. Serial runs make up to ~3000 cycles/s,
	// each of 32 parallel goroutines ~100/s.
	ring := max(2048, 32768/sc.workers)
	ws := make([]*wstate, sc.workers)
	clients := []*contender{c}
	for i := range ws {
		for sc.client(i) >= len(clients) {
			clients = append(clients, b.another(c.id, b.cur))
		}
		st := &wstate{w: clients[sc.client(i)].newWorker(), cycle: new(hist), acq: new(hist)}
		if sc.contended || sc.dies {
			st.keys = []string{"bench:" + sc.id + ":" + c.id}
		} else {
			st.keys = make([]string, ring)
			for j := range st.keys {
				st.keys[j] = "bench:" + sc.id + ":" + c.id + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
			}
		}
		ws[i] = st
	}
	if sc.dies {
		// The holder's client: the short TTL, and the node timeout the
		// default TTL would derive (the short TTL's own is 5 ms, too
		// tight for the proxies on two cores).
		s := b.cur
		s.ttl, s.nodeTimeout, s.stats = b.p.dieTTL, s.rawTimeout, nil
		ws[0].holder = b.another(c.id, s).newWorker()
	}
	return ws
}

// another makes one more instance of contender id on the current set-up's
// nodes, to be closed with the scenario. It does not connect, so it
// cannot fail but for a bad set-up, which is fatal.
func (b *bench) another(id string, s setup) *contender {
	c, err := makeContender(id, b.urls, s)
	if err != nil {
		panic(fmt.Sprintf("bench: another %s: %v", id, err))
	}
	b.extra = append(b.extra, c)
	return c
}

// contShared is what the goroutines of one contended round share.
type contShared struct {
	round      string // suffix making the key distinct per round
	mu         sync.Mutex
	last       time.Time // when the last holder began to release
	lastHolder int
	gap        *hist // to the next holder, whoever it is
	gapOther   *hist // to the next holder when it is another goroutine
	inCS       atomic.Int32
	violations atomic.Int32
}

// runRound runs every worker until end (each does at least one cycle) and
// returns the successful cycles and the time until the last one returned.
func (b *bench) runRound(sc scenario, ws []*wstate, end time.Time, r *result, round string) (int, time.Duration, int) {
	var wg sync.WaitGroup
	record := r != nil
	sh := &contShared{round: round, lastHolder: -1}
	if record {
		sh.gap, sh.gapOther = &r.gap, &r.gapOther
	}
	start := time.Now()
	before := make([]int, len(ws))
	if sc.dies {
		before := ws[0].n
		viol := b.diesRound(ws, end, r, round)
		return ws[0].n - before, time.Since(start), viol
	}
	for i, st := range ws {
		before[i] = st.n
		wg.Add(1)
		if sc.contended {
			go b.contendedLoop(sc, i, st, sh, end, record, &wg)
		} else {
			go b.freeLoop(st, end, record, &wg)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := 0
	for i, st := range ws {
		n += st.n - before[i]
	}
	return n, elapsed, int(sh.violations.Load())
}

func (b *bench) freeLoop(st *wstate, end time.Time, record bool, wg *sync.WaitGroup) {
	defer wg.Done()
	bg := context.Background()
	// Lock retries (they should never be needed here) stop a little after
	// the round's end; every cycle that starts before it has its normal,
	// unhurried context. Unlock always gets a context without deadline.
	ctx, cancel := context.WithDeadline(bg, end.Add(time.Second))
	defer cancel()
	for {
		key := st.keys[st.k%len(st.keys)]
		st.k++
		t0 := time.Now()
		if err := st.w.Lock(ctx, key); err != nil {
			st.failed(&st.lockErrs, err)
			st.maxCycle = max(st.maxCycle, time.Since(t0))
		} else {
			t1 := time.Now()
			err := st.w.Unlock(bg)
			t2 := time.Now()
			if err != nil {
				st.failed(&st.unlockErs, err)
			}
			if record {
				st.acq.add(t1.Sub(t0))
				st.cycle.add(t2.Sub(t0))
			}
			st.maxCycle = max(st.maxCycle, t2.Sub(t0))
			st.n++
		}
		if !time.Now().Before(end) {
			return
		}
	}
}

func (b *bench) contendedLoop(sc scenario, id int, st *wstate, sh *contShared, end time.Time, record bool, wg *sync.WaitGroup) {
	defer wg.Done()
	bg := context.Background()
	ctx, cancel := context.WithDeadline(bg, end)
	defer cancel()
	// A fresh key per round: a round cut while a Lock was half way (or an
	// unlock that failed) must not leave the next round a stale key.
	key := st.keys[0] + ":" + sh.round
	for time.Now().Before(end) {
		t0 := time.Now()
		if err := st.w.Lock(ctx, key); err != nil {
			if ctx.Err() != nil {
				st.cut++
				return
			}
			st.failed(&st.lockErrs, err)
			continue
		}
		t1 := time.Now()
		sh.mu.Lock()
		if !sh.last.IsZero() && record {
			sh.gap.add(t1.Sub(sh.last))
			if sc.handoff(sh.lastHolder, id) {
				sh.gapOther.add(t1.Sub(sh.last))
			}
		}
		sh.last = time.Time{}
		sh.lastHolder = id
		sh.mu.Unlock()
		if sh.inCS.Add(1) != 1 {
			sh.violations.Add(1)
		}
		time.Sleep(b.p.hold)
		sh.inCS.Add(-1)
		sh.mu.Lock()
		sh.last = time.Now()
		sh.mu.Unlock()
		err := st.w.Unlock(bg)
		t2 := time.Now()
		if err != nil {
			st.failed(&st.unlockErs, err)
		}
		if record {
			st.acq.add(t1.Sub(t0))
			st.cycle.add(t2.Sub(t0))
			st.sections++
		}
		st.maxCycle = max(st.maxCycle, t2.Sub(t0))
		st.n++
	}
}

// diesRound runs dieCycles cycles of the holder-dies scenario. In each,
// the holder takes a fresh key and "dies": it never releases it. Every
// worker then calls Lock on the key at once, on its own client. It records
// how long after the holder's keys expired the first waiter held the lock
// (r.gap), and returns the cycles in which a waiter held the lock while
// the holder could still believe it held it, or two waiters at once.
func (b *bench) diesRound(ws []*wstate, end time.Time, r *result, round string) int {
	h, bg, viol := ws[0], context.Background(), 0
	for range b.p.dieCycles {
		if b.ctx.Err() != nil {
			break
		}
		key := h.keys[0] + ":" + round + ":" + strconv.Itoa(h.k)
		h.k++
		hctx, cancel := context.WithTimeout(bg, 5*time.Second)
		t0 := time.Now()
		err := h.holder.Lock(hctx, key)
		cancel()
		if err != nil {
			h.failed(&h.lockErrs, err)
			continue
		}
		// The keys were set after t0, so they expire after t0 + TTL: the
		// delay measured from there is an upper bound of the true one.
		// The holder counts its validity from t0 too: it may believe it
		// holds the lock until t0 + TTL − drift.
		expiry := t0.Add(b.p.dieTTL)
		holderEnd := expiry.Add(-(b.p.dieTTL/100 + 2*time.Millisecond))
		var (
			mu    sync.Mutex
			first time.Time
			inCS  atomic.Int32
			bad   atomic.Bool
			wg    sync.WaitGroup
		)
		for _, st := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithDeadline(bg, expiry.Add(10*time.Second))
				defer cancel()
				t := time.Now()
				if err := st.w.Lock(ctx, key); err != nil {
					st.failed(&st.lockErrs, err)
					return
				}
				got := time.Now()
				if inCS.Add(1) != 1 || got.Before(holderEnd) {
					bad.Store(true)
				}
				mu.Lock()
				if first.IsZero() {
					first = got
				}
				mu.Unlock()
				inCS.Add(-1)
				if err := st.w.Unlock(bg); err != nil {
					st.failed(&st.unlockErs, err)
				}
				if r != nil {
					st.acq.add(got.Sub(t))
					st.sections++
				}
			}()
		}
		wg.Wait()
		if bad.Load() {
			viol++
		}
		if first.IsZero() {
			continue
		}
		if r != nil {
			r.gap.add(first.Sub(expiry))
			h.cycle.add(first.Sub(t0))
		}
		h.maxCycle = max(h.maxCycle, time.Since(t0))
		h.n++
	}
	return viol
}

func (b *bench) scenario(tp *topology, sc scenario) *scenarioRes {
	t0 := time.Now()
	logf := b.log
	b.log = func(format string, args ...any) { logf(tp.id+" "+format, args...) }
	defer func() { b.log = logf }()
	b.log("scenario %s: start", sc.id)
	runtime.GC()
	settle(1500 * time.Millisecond)
	t, pr := goroutines()
	clientBase := t - pr // client goroutines before the scenario
	// The fault goes in first, the clients are made after it: every
	// connection then carries the toxic from its first byte. (toxiproxy
	// adds a toxic to the connections it knows about, keyed by client
	// address; with heavy connection churn and port reuse, an existing
	// connection can drop out of that map and miss a toxic added later.)
	b.applyFault(sc.fault)
	b.cur = b.p.setup
	b.cur.stats = new(ourStats)
	cons, err := makeContenders(b.urls, b.cur)
	if err != nil {
		b.log("scenario %s: %v", sc.id, err)
		b.heal()
		return &scenarioRes{topo: tp, sc: sc}
	}
	b.cons = cons
	defer func() {
		for _, c := range append(b.cons, b.extra...) {
			_ = c.close()
		}
		b.extra = nil
		b.heal()
		b.drain(clientBase+8, 15*time.Second)
	}()
	// With a blackholed node, what one contender leaves running (redsync
	// fail-fast piles up unlocks behind the dead node's pool) would burden
	// the next one's round (scheduler, GC scanning thousands of stacks).
	// So there every contender gets a fresh instance after each warm-up
	// and round: closing the old one ends what it left behind. The node
	// stays blackholed throughout; the goroutine passes show what piles up
	// within a run.
	isolate := func(i int, states []*wstate) {
		if sc.fault == "blackhole" {
			b.renew(i, states, clientBase+8)
		}
	}

	n := len(b.cons)
	res := make([]*result, n)
	states := make([][]*wstate, n)
	for i, c := range b.cons {
		res[i] = &result{c: c}
		states[i] = b.newStates(sc, c)
	}
	// Warm-up: fill the pools, load the scripts; not recorded.
	for i := range b.cons {
		b.runRound(sc, states[i], time.Now().Add(b.p.warmup), nil, "warmup")
		isolate(i, states[i])
	}
	runtime.GC()

	// A's hook counters over the rounds only.
	calls0 := make([]callStats, len(b.urls))
	for k := range calls0 {
		calls0[k] = b.cur.stats.node(k)
	}
	// Interleaved rounds, rotating the order: A B C D E, B C D E A, ...
	for r := 0; r < b.p.rounds && b.ctx.Err() == nil; r++ {
		per := make([]roundRes, n)
		for j := 0; j < n; j++ {
			i := (j + r) % n
			var m0, m1 runtime.MemStats
			n0 := -1
			if sc.fault == "blackhole" {
				n0 = b.nodeCommands(b.p.faultNode)
			}
			// What the previous contender left running (calls to a slow
			// node, late replies) ends first, so that the count after the
			// round is this contender's own.
			quiet(500 * time.Millisecond)
			g0 := clientGoroutines()
			runtime.ReadMemStats(&m0)
			c0 := cpuTime()
			cycles, el, viol := b.runRound(sc, states[i], time.Now().Add(b.p.roundDur), res[i], strconv.Itoa(r))
			c1 := cpuTime()
			runtime.ReadMemStats(&m1)
			g1 := clientGoroutines()
			if n0 >= 0 {
				res[i].leaked += leaked(n0, b.nodeCommands(b.p.faultNode))
			}
			per[i] = roundRes{cycles: cycles, elapsed: el, mallocs: m1.Mallocs - m0.Mallocs, bytes: m1.TotalAlloc - m0.TotalAlloc, cpu: c1 - c0, gorEnd: g1 - g0}
			res[i].violations += viol
			isolate(i, states[i])
		}
		floor := per[floorIdx]
		for i := range res {
			res[i].rounds = append(res[i].rounds, per[i])
			res[i].gorEnd = append(res[i].gorEnd, per[i].gorEnd)
			if per[i].cycles > 0 && floor.cycles > 0 {
				x := per[i].elapsed.Seconds() / float64(per[i].cycles)
				f := floor.elapsed.Seconds() / float64(floor.cycles)
				res[i].ratios = append(res[i].ratios, x/f)
				if floor.cpu > 0 {
					xc := per[i].cpu.Seconds() / float64(per[i].cycles)
					fc := floor.cpu.Seconds() / float64(floor.cycles)
					res[i].cpuRatios = append(res[i].cpuRatios, xc/fc)
				}
			}
		}
		var cyc, gor, leak []string
		for i, id := range contenderIDs {
			cyc = append(cyc, fmt.Sprintf("%s=%d", id, per[i].cycles))
			gor = append(gor, fmt.Sprintf("%+d", per[i].gorEnd))
			leak = append(leak, strconv.Itoa(res[i].leaked))
		}
		b.log("scenario %s: round %d/%d: cycles %s; goroutines at end %s; leaked so far %s", sc.id, r+1, b.p.rounds,
			strings.Join(cyc, " "), strings.Join(gor, " "), strings.Join(leak, " "))
	}
	for k := range calls0 {
		res[0].calls = append(res[0].calls, b.cur.stats.node(k).sub(calls0[k]))
	}
	fc := res[0].calls[b.p.faultNode]
	b.log("scenario %s: A's calls to node %d during the rounds: %d ok, %d timed out, %d skipped (breaker open), %d other; breaker opened %d times, closed %d", sc.id, b.p.faultNode+1, fc.ok, fc.timeout, fc.skipped, fc.other, fc.opened, fc.closed)
	for i, r := range res {
		r.perWorker = make([]int, len(states[i]))
		for w, st := range states[i] {
			r.cycle.merge(st.cycle)
			r.acq.merge(st.acq)
			r.lockErrs += st.lockErrs
			r.unlockErrs += st.unlockErs
			r.cut += st.cut
			r.perWorker[w] = st.sections
			if st.firstErr != nil && r.firstErr == "" {
				r.firstErr = st.firstErr.Error()
			}
		}
	}

	// Goroutine passes: each contender alone, in turn (blackholed: each on
	// a fresh instance, closed after it).
	tail := b.p.tail
	if sc.fault == "blackhole" {
		tail = b.p.tailBH
	}
	for i := range b.cons {
		if b.ctx.Err() != nil {
			break
		}
		res[i].gor = b.goroutinePass(sc, i, states[i], tail, clientBase)
		g := res[i].gor
		b.log("scenario %s: goroutine pass %s: base %d (proxy %d); %d cycles in %v (longest %v, %d errors); client goroutines half %+d end %+d settled %+d; samples %v; leaked %d", sc.id, b.cons[i].id, g.base, g.baseProxy,
			g.cycles, g.dur.Round(time.Millisecond), g.maxCycle.Round(time.Millisecond), g.errs, g.half-g.halfProxy, g.end-g.endProxy, g.settled-g.settledProxy, g.samples, g.leaked)
	}
	b.log("scenario %s: done in %v", sc.id, time.Since(t0).Round(100*time.Millisecond))
	return &scenarioRes{topo: tp, sc: sc, res: res, elapsed: time.Since(t0)}
}

// diagRes is one variant of A's node options in the latency diagnosis.
type diagRes struct {
	name      string
	checkIdle time.Duration
	pool      int
	cycles    int
	calls     callStats // to the slow node
}

// latencyDiag runs A alone against the slow node (the current set-up,
// +latency on the fault node) with its default node options and with the
// two suspects of timeouts on a node slower than half the node timeout
// turned off: CheckIdle (a PING before a command on a connection idle for
// a second: two round trips within one node timeout) and the pool's size
// (calls to the slow node hold a connection for a round trip each, and
// wait for one when MaxActive are busy). Each variant: a fresh client, a
// warm-up, then rounds of the usual length separated by the idle time a
// contender sees between its interleaved rounds (at least 1.2 s, more
// than CheckIdle); the hooks count what the
// calls to the slow node did and how the breaker moved.
func (b *bench) latencyDiag() []diagRes {
	b.log("latency diagnosis: start")
	b.applyFault("latency")
	defer b.heal()
	idle := max(1200*time.Millisecond, 3*(b.p.roundDur+50*time.Millisecond))
	variants := []diagRes{
		{name: "A as benchmarked (CheckIdle 1s, pool 64)", pool: b.p.setup.pool},
		{name: "CheckIdle off", checkIdle: -1, pool: b.p.setup.pool},
		{name: "CheckIdle off, pool 256", checkIdle: -1, pool: 256},
	}
	sc := scenario{id: "latency-diag", workers: b.p.faultWorkers, fault: "latency"}
	for k := range variants {
		v := &variants[k]
		s := b.p.setup
		s.stats, s.checkIdle, s.pool = new(ourStats), v.checkIdle, v.pool
		c, err := makeContender("A", b.urls, s)
		if err != nil {
			b.log("latency diagnosis: %v", err)
			return nil
		}
		ws := b.newStates(sc, c)
		b.runRound(sc, ws, time.Now().Add(b.p.warmup), nil, "warmup")
		for r := 0; r < 4 && b.ctx.Err() == nil; r++ {
			time.Sleep(idle)
			n, _, _ := b.runRound(sc, ws, time.Now().Add(b.p.roundDur), nil, "diag")
			v.cycles += n
		}
		_ = c.close()
		v.calls = s.stats.node(b.p.faultNode)
		b.log("latency diagnosis: %s: %d cycles; calls to node %d: %d ok, %d timed out, %d skipped; breaker opened %d, closed %d",
			v.name, v.cycles, b.p.faultNode+1, v.calls.ok, v.calls.timeout, v.calls.skipped, v.calls.opened, v.calls.closed)
	}
	return variants
}

// nodeCommands returns node i's total_commands_processed, read directly
// (not through its proxy); -1 when it cannot be read.
func (b *bench) nodeCommands(i int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := b.cl.Direct(i).Command(ctx, "INFO", "stats")
	if err != nil {
		return -1
	}
	bs, ok := v.([]byte)
	if !ok {
		return -1
	}
	_, rest, ok := strings.Cut(string(bs), "total_commands_processed:")
	if !ok {
		return -1
	}
	num, _, _ := strings.Cut(rest, "\r")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil {
		return -1
	}
	return n
}

// leaked is how many commands reached node i between two nodeCommands
// readings, less the reading's own INFO and the PING with which the direct
// connection may be checked before it.
func leaked(before, after int) int {
	if before < 0 || after < 0 {
		return -1
	}
	return max(0, after-before-2)
}

// drain waits until the non-proxy goroutines are back to at most want or
// max has passed, and reports whether they were.
func (b *bench) drain(want int, max time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < max {
		t, p := goroutines()
		if t-p <= want {
			return time.Since(start), true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start), false
}

func (b *bench) goroutinePass(sc scenario, i int, ws []*wstate, d time.Duration, clientBase int) gorRes {
	var g gorRes
	settle(1500 * time.Millisecond)
	g.base, g.baseProxy = goroutines()
	n0 := -1
	if sc.fault == "blackhole" {
		n0 = b.nodeCommands(b.p.faultNode)
	}
	harness := len(ws) + 1 // the workers and the sampler, alive while sampling
	errs0 := 0
	for _, st := range ws {
		st.maxCycle = 0
		errs0 += st.lockErrs + st.unlockErs
	}
	start := time.Now()
	end := start.Add(d)
	// Sampler: a full count (client vs proxy) at 5%, 15%, ... 95% of the
	// run; the fifth (45%) stands for "half", the end count is taken after
	// the last cycle.
	var samples []int
	var halfT, halfP int
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() { // samples
		defer close(done)
		for k := 1; k <= 10; k++ {
			at := start.Add(d * time.Duration(2*k-1) / 20)
			select {
			case <-time.After(time.Until(at)):
			case <-stop:
				return
			}
			if !time.Now().Before(end) {
				return // the workers may be gone: not comparable
			}
			t, p := goroutines()
			samples = append(samples, t-p-(g.base-g.baseProxy)-harness)
			if k == 5 {
				halfT, halfP = t, p
			}
		}
	}()
	cycles, el, _ := b.runRound(sc, ws, end, nil, "tail")
	close(stop)
	<-done
	endT, endP := goroutines()
	time.Sleep(b.p.settleDur)
	setT, setP := goroutines()
	if n0 >= 0 {
		g.leaked = leaked(n0, b.nodeCommands(b.p.faultNode))
	}
	g.ran = true
	g.samples = samples
	g.half, g.halfProxy = halfT-g.base-harness, halfP-g.baseProxy
	g.end, g.endProxy = endT-g.base, endP-g.baseProxy
	g.settled, g.settledProxy = setT-g.base, setP-g.baseProxy
	g.cycles, g.dur = cycles, el
	for _, st := range ws {
		g.maxCycle = max(g.maxCycle, st.maxCycle)
		g.errs += st.lockErrs + st.unlockErs
	}
	g.errs -= errs0
	if sc.fault == "blackhole" {
		// Close the instance (node still blackholed) and time how long
		// what it left behind takes to end; a fresh one takes its place.
		g.drain = b.renew(i, ws, g.base-g.baseProxy+2)
		t, p := goroutines()
		g.drained = t-p <= g.base-g.baseProxy+2
	}
	return g
}

// directPass measures allocations per cycle (and, for information, the
// ratio to the floor) with clients connected straight to the redis-server
// processes, bypassing the proxies: healthy, serial, rotating rounds of a
// fixed number of cycles.
func (b *bench) directPass(urls []string) ([]*directRes, error) {
	b.log("direct pass (no proxies): start")
	cons, err := makeContenders(urls, b.p.setup) // no hooks
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range cons {
			_ = c.close()
		}
	}()
	sc := scenario{id: "direct", workers: 1}
	n := len(cons)
	out := make([]*directRes, n)
	states := make([]*wstate, n)
	for i, c := range cons {
		out[i] = &directRes{c: c}
		states[i] = b.newStates(sc, c)[0]
	}
	// Warm-up.
	for i := range cons {
		b.cycles(states[i], b.p.directCycles/2, nil)
	}
	runtime.GC()
	for r := 0; r < b.p.directRounds && b.ctx.Err() == nil; r++ {
		el := make([]time.Duration, n)
		for j := 0; j < n; j++ {
			i := (j + r) % n
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			c0 := cpuTime()
			start := time.Now()
			b.cycles(states[i], b.p.directCycles, &out[i].cycle)
			el[i] = time.Since(start)
			c1 := cpuTime()
			runtime.ReadMemStats(&m1)
			c := float64(b.p.directCycles)
			out[i].cpu = append(out[i].cpu, float64(c1-c0)/1e3/c)
			out[i].allocs = append(out[i].allocs, float64(m1.Mallocs-m0.Mallocs)/c)
			out[i].bytes = append(out[i].bytes, float64(m1.TotalAlloc-m0.TotalAlloc)/c)
			out[i].cycles += b.p.directCycles
			out[i].elapsed += el[i]
		}
		for i := range out {
			out[i].ratios = append(out[i].ratios, el[i].Seconds()/el[floorIdx].Seconds())
		}
	}
	// Where A's allocations come from: every allocation of a batch of
	// cycles, by allocating function.
	out[0].sites = allocSites(b.p.directCycles, func() { b.cycles(states[0], b.p.directCycles, nil) })
	if b.p.profDir != "" {
		b.allocProfiles(states)
	}
	b.log("direct pass: done")
	return out, nil
}

// allocProfiles writes, per contender, the allocations of directCycles
// cycles as a pprof pair: view with
//
//	go tool pprof -sample_index=alloc_objects -base DIR/allocs-X-base.pprof DIR/allocs-X.pprof
func (b *bench) allocProfiles(states []*wstate) {
	if err := os.MkdirAll(b.p.profDir, 0o755); err != nil {
		b.log("allocprofile: %v", err)
		return
	}
	write := func(name string) {
		runtime.GC()
		f, err := os.Create(filepath.Join(b.p.profDir, name))
		if err != nil {
			b.log("allocprofile: %v", err)
			return
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			b.log("allocprofile: %v", err)
		}
	}
	old := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = old }()
	for i, st := range states {
		id := contenderIDs[i]
		runtime.MemProfileRate = 1
		write("allocs-" + id + "-base.pprof")
		b.cycles(st, b.p.directCycles, nil)
		time.Sleep(200 * time.Millisecond) // late background calls finish
		write("allocs-" + id + ".pprof")
		runtime.MemProfileRate = old
	}
	b.log("allocation profiles written to %s", b.p.profDir)
}

// cycles runs exactly k lock+unlock cycles on one goroutine (this one).
func (b *bench) cycles(st *wstate, k int, h *hist) {
	bg := context.Background()
	for range k {
		key := st.keys[st.k%len(st.keys)]
		st.k++
		t0 := time.Now()
		if err := st.w.Lock(bg, key); err != nil {
			st.lockErrs++
			continue
		}
		if err := st.w.Unlock(bg); err != nil {
			st.unlockErs++
		}
		if h != nil {
			h.add(time.Since(t0))
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// minMax returns the smallest and largest of xs, zeros when it is empty.
func minMax[T cmp.Ordered](xs []T) (lo, hi T) {
	if len(xs) == 0 {
		return lo, hi
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}
