package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
)

// scenario is one scenario: what its workers do and in which set-ups it
// runs. Each is defined in a scenario_*.go file of its own and listed in
// scenarios; what they share (the interleaved rounds, the goroutine
// passes, the distinct-key loop) is here.
type scenario struct {
	id, title string
	setups    []string // ids of the set-ups (topologies) it runs in
	workers   int
	// contended: all workers of a contender on one key (per round), not
	// a ring of distinct keys each.
	contended bool
	// clients > 1 splits the workers over that many client instances of
	// the same contender (separate pools and, for A, separate waiter
	// queues), as that many hosts would be; the first has the workers
	// 0..workers/clients-1, and so on.
	clients int
	fault   string        // "", "latency", "blackhole" (applyFault)
	hold    time.Duration // contended scenarios: how long a holder keeps the lock; 0: params.hold
	// round runs the workers of one contender until end (each does at
	// least one cycle) and returns the exclusion violations it saw. r is
	// nil in warm-ups and goroutine passes: nothing is recorded then.
	round func(b *bench, sc scenario, ws []*wstate, end time.Time, r *result, tag string) int
	// prepare, when set, completes a contender's worker states once
	// newStates has made them (holder-dies: the dying holder's client).
	prepare func(b *bench, c *contender, ws []*wstate)
	// table, when set, writes the scenario's per-contender table in the
	// report's details; nil: the distinct-key table (renderFreeTable).
	table func(b *strings.Builder, p params, s *scenarioRes)
}

// scenarios lists every scenario, in the order they run and are reported
// in each set-up. Adding one is a file defining it and a line here.
func scenarios(p params) []scenario {
	return []scenario{
		healthySerial(p),
		healthyParallel(p),
		latencyScenario(p),
		blackholeScenario(p),
		contendedScenario(p),
		contendedClientsScenario(p),
		contendedHostsScenario(p),
		holderDiesScenario(p),
	}
}

// scenarioIDs returns the ids of scenarios, for the -scenarios flag's help.
func scenarioIDs() []string {
	var ids []string
	for _, sc := range scenarios(params{}) {
		ids = append(ids, sc.id)
	}
	return ids
}

// dead reports whether the scenario blackholes a node: every contender
// then gets a fresh instance after each warm-up, round and goroutine
// pass, and the commands that reach the node are counted.
func (sc scenario) dead() bool { return sc.fault == "blackhole" }

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
	p50     time.Duration // cycle p50 of this round
	mallocs uint64
	bytes   uint64
	cpu     time.Duration // process user+sys time
	gorEnd  int           // client goroutines right after the round, minus those right before it
	steal   float64       // share of the machine's CPU time the hypervisor gave to others during the round
}

// cpuTime returns the process' user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stolenTicks returns the machine's CPU time so far that the hypervisor
// gave to other guests (steal) and its total CPU time, in clock ticks
// (/proc/stat); 0, 0 where it cannot be read.
func stolenTicks() (steal, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, x := range f[1:] {
		v, _ := strconv.ParseUint(x, 10, 64)
		total += v
		if i == 7 {
			steal = v
		}
	}
	return steal, total
}

// stolenDuring runs f and returns the share of the machine's CPU time the
// hypervisor stole meanwhile (0 where /proc/stat cannot be read).
func stolenDuring(f func() error) (float64, error) {
	s0, t0 := stolenTicks()
	err := f()
	s1, t1 := stolenTicks()
	if t1 <= t0 {
		return 0, err
	}
	return float64(s1-s0) / float64(t1-t0), err
}

// calmSteal is the share of stolen CPU time below which a round counts
// as calm: the contended tables' p99 of calm rounds (result.acqCalm) and
// the healthy targets' calm-round medians (result.calm).
const calmSteal = 0.05

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
	acqCalm    hist // acq of the calm rounds only (less than calmSteal of the CPU stolen)
	calmRounds int  // how many rounds were calm
	gap        hist // contended: release start to the next holder's grant
	gapOther   hist // the same, only when the next holder is another goroutine
	held       hist // contended: grant to release start (the hold, with time.Sleep's overshoot)
	rounds     []roundRes
	ratios     []float64 // per round: (time per cycle) / (raw floor's, same round)
	cpuRatios  []float64 // per round: (CPU per cycle) / (raw floor's, same round)
	p50Ratios  []float64 // per round: (cycle p50) / (raw floor's, same round)
	// calm are ratios, cpuRatios and p50Ratios of the rounds where
	// neither this contender nor the floor had calmSteal or more of the
	// CPU stolen.
	calm       struct{ ratios, cpuRatios, p50Ratios []float64 }
	gorEnd     []int       // per round: client goroutines left at the round's end
	calls      []callStats // A only, with hooks: per node, what its calls did during the rounds
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
	w     worker
	keys  []string
	k     int
	cycle *hist // this round's cycles; folded into the result after each round
	acq   *hist
	// holder is the holder-dies scenario's dying holder, on a client of
	// its own (first worker only).
	holder    worker
	n         int
	lockErrs  int
	unlockErs int
	cut       int
	firstErr  error
	sections  int
	maxCycle  time.Duration // longest cycle (lock errors included) since last reset
}

// failed counts an error in count and keeps the first one seen.
func (st *wstate) failed(count *int, err error) {
	*count++
	if st.firstErr == nil {
		st.firstErr = err
	}
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
		if sc.contended {
			st.keys = []string{"bench:" + sc.id + ":" + c.id}
		} else {
			st.keys = make([]string, ring)
			for j := range st.keys {
				st.keys[j] = "bench:" + sc.id + ":" + c.id + ":" + strconv.Itoa(i) + ":" + strconv.Itoa(j)
			}
		}
		ws[i] = st
	}
	if sc.prepare != nil {
		sc.prepare(b, c, ws)
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

// runRound runs one round of sc's workers until end and returns the
// successful cycles, the time until the last one returned and the
// exclusion violations.
func (b *bench) runRound(sc scenario, ws []*wstate, end time.Time, r *result, tag string) (int, time.Duration, int) {
	start := time.Now()
	before := make([]int, len(ws))
	for i, st := range ws {
		before[i] = st.n
	}
	viol := sc.round(b, sc, ws, end, r, tag)
	elapsed := time.Since(start)
	n := 0
	for i, st := range ws {
		n += st.n - before[i]
	}
	return n, elapsed, viol
}

// freeRound is the round of the distinct-key scenarios (healthy, latency,
// blackholed): every worker runs freeLoop on its own key ring.
func freeRound(b *bench, sc scenario, ws []*wstate, end time.Time, r *result, _ string) int {
	var wg sync.WaitGroup
	for _, st := range ws {
		wg.Add(1)
		go b.freeLoop(st, end, r != nil, &wg)
	}
	wg.Wait()
	return 0
}

// freeLoop runs lock+unlock cycles on distinct keys until end.
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

// scenario runs sc in set-up tp: fresh instances of every contender, a
// warm-up each, then interleaved rounds (the order rotating each round)
// and a goroutine pass per contender.
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
	if tp.hooks {
		b.cur.stats = new(ourStats)
	}
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
		if sc.dead() {
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
	roundCycles := new(hist) // one contender's cycles in one round
	// Interleaved rounds, rotating the order: A B C D E, B C D E A, ...
	for r := 0; r < b.p.rounds && b.ctx.Err() == nil; r++ {
		per := make([]roundRes, n)
		for j := 0; j < n; j++ {
			i := (j + r) % n
			var m0, m1 runtime.MemStats
			n0 := -1
			if sc.dead() {
				n0 = b.nodeCommands(b.p.faultNode)
			}
			// What the previous contender left running (calls to a slow
			// node, late replies) ends first, so that the count after the
			// round is this contender's own.
			quiet(500 * time.Millisecond)
			g0 := clientGoroutines()
			runtime.ReadMemStats(&m0)
			var (
				cycles, viol int
				el           time.Duration
				c0, c1       time.Duration
			)
			steal, _ := stolenDuring(func() error {
				c0 = cpuTime()
				cycles, el, viol = b.runRound(sc, states[i], time.Now().Add(b.p.roundDur), res[i], strconv.Itoa(r))
				c1 = cpuTime()
				return nil
			})
			runtime.ReadMemStats(&m1)
			g1 := clientGoroutines()
			if n0 >= 0 {
				res[i].leaked += leaked(n0, b.nodeCommands(b.p.faultNode))
			}
			// The round's cycle latencies: its own p50 (for the per-round
			// p50 ratio), then into the scenario's histogram.
			*roundCycles = hist{}
			for _, st := range states[i] {
				roundCycles.merge(st.cycle)
				*st.cycle = hist{}
			}
			res[i].cycle.merge(roundCycles)
			p50 := roundCycles.q(0.5)
			// The round's lock waits, also apart when the round was calm.
			*roundCycles = hist{}
			for _, st := range states[i] {
				roundCycles.merge(st.acq)
				*st.acq = hist{}
			}
			res[i].acq.merge(roundCycles)
			if steal < calmSteal {
				res[i].acqCalm.merge(roundCycles)
				res[i].calmRounds++
			}
			per[i] = roundRes{cycles: cycles, elapsed: el, p50: p50, mallocs: m1.Mallocs - m0.Mallocs, bytes: m1.TotalAlloc - m0.TotalAlloc, cpu: c1 - c0, gorEnd: g1 - g0, steal: steal}
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
				calm := per[i].steal < calmSteal && floor.steal < calmSteal
				res[i].ratios = append(res[i].ratios, x/f)
				if calm {
					res[i].calm.ratios = append(res[i].calm.ratios, x/f)
				}
				if floor.cpu > 0 {
					xc := per[i].cpu.Seconds() / float64(per[i].cycles)
					fc := floor.cpu.Seconds() / float64(floor.cycles)
					res[i].cpuRatios = append(res[i].cpuRatios, xc/fc)
					if calm {
						res[i].calm.cpuRatios = append(res[i].calm.cpuRatios, xc/fc)
					}
				}
				if per[i].p50 > 0 && floor.p50 > 0 {
					res[i].p50Ratios = append(res[i].p50Ratios, per[i].p50.Seconds()/floor.p50.Seconds())
					if calm {
						res[i].calm.p50Ratios = append(res[i].calm.p50Ratios, per[i].p50.Seconds()/floor.p50.Seconds())
					}
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
	if b.cur.stats != nil {
		for k := range calls0 {
			res[0].calls = append(res[0].calls, b.cur.stats.node(k).sub(calls0[k]))
		}
		fc := res[0].calls[b.p.faultNode]
		b.log("scenario %s: A's calls to node %d during the rounds: %d ok, %d timed out, %d skipped (breaker open), %d other; breaker opened %d times, closed %d", sc.id, b.p.faultNode+1, fc.ok, fc.timeout, fc.skipped, fc.other, fc.opened, fc.closed)
	}
	for i, r := range res {
		r.perWorker = make([]int, len(states[i]))
		for w, st := range states[i] {
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
	if sc.dead() {
		tail = b.p.tailBH
	}
	for i := range b.cons {
		if b.ctx.Err() != nil {
			break
		}
		res[i].gor = b.goroutinePass(sc, i, states[i], tail)
		g := res[i].gor
		b.log("scenario %s: goroutine pass %s: base %d (proxy %d); %d cycles in %v (longest %v, %d errors); client goroutines half %+d end %+d settled %+d; samples %v; leaked %d", sc.id, b.cons[i].id, g.base, g.baseProxy,
			g.cycles, g.dur.Round(time.Millisecond), g.maxCycle.Round(time.Millisecond), g.errs, g.half-g.halfProxy, g.end-g.endProxy, g.settled-g.settledProxy, g.samples, g.leaked)
	}
	b.log("scenario %s: done in %v", sc.id, time.Since(t0).Round(100*time.Millisecond))
	return &scenarioRes{topo: tp, sc: sc, res: res, elapsed: time.Since(t0)}
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

// goroutinePass runs contender i alone for d, sampling the goroutines as
// it goes; blackholed, it then closes the instance and times how long
// what it left behind takes to end.
func (b *bench) goroutinePass(sc scenario, i int, ws []*wstate, d time.Duration) gorRes {
	var g gorRes
	settle(1500 * time.Millisecond)
	g.base, g.baseProxy = goroutines()
	n0 := -1
	if sc.dead() {
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
	if sc.dead() {
		// Close the instance (node still blackholed) and time how long
		// what it left behind takes to end; a fresh one takes its place.
		g.drain = b.renew(i, ws, g.base-g.baseProxy+2)
		t, p := goroutines()
		g.drained = t-p <= g.base-g.baseProxy+2
	}
	return g
}

// stealCell is the share of CPU time stolen over a result's rounds:
// median [max].
func stealCell(r *result) string {
	var xs []float64
	for _, x := range r.rounds {
		xs = append(xs, x.steal)
	}
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f%% [%.0f%%]", 100*median(xs), 100*slices.Max(xs))
}

// calmP99 is a result's lock wait p99 over its calm rounds, with their
// count.
func calmP99(r *result) string {
	if r.calmRounds == 0 {
		return fmt.Sprintf("– (0 of %d rounds)", len(r.rounds))
	}
	return fmt.Sprintf("%s (%d of %d rounds)", fmtDur(r.acqCalm.q(0.99)), r.calmRounds, len(r.rounds))
}
