package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quorumlock/redlock/integration/cluster"
)

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtRatio(x float64) string {
	switch {
	case x == 0:
		return "–"
	case x < 10:
		return fmt.Sprintf("%.2f×", x)
	case x < 100:
		return fmt.Sprintf("%.1f×", x)
	default:
		return fmt.Sprintf("%.0f×", x)
	}
}

func ratioCell(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	lo, hi := minMax(xs)
	return fmt.Sprintf("**%s** [%s–%s]", fmtRatio(median(xs)), fmtRatio(lo), fmtRatio(hi))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func cmdOut(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func depVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	want := map[string]bool{
		"github.com/go-redsync/redsync/v4": true,
		"github.com/gomodule/redigo":       true,
		"github.com/Shopify/toxiproxy/v2":  true,
		"github.com/redis/go-redis/v9":     true,
	}
	var parts []string
	for _, d := range bi.Deps {
		if want[d.Path] {
			parts = append(parts, d.Path+" "+d.Version)
		}
	}
	return strings.Join(parts, ", ")
}

func libraryState() string {
	head := cmdOut("git", "-C", "..", "rev-parse", "--short", "HEAD")
	if head == "" {
		return "unknown (no git)"
	}
	dirty := cmdOut("git", "-C", "..", "status", "--porcelain", "--", "clock", "node", "internal", "redlock")
	if dirty == "" {
		return "commit " + head + ", library packages clean"
	}
	var files []string
	for _, l := range strings.Split(dirty, "\n") {
		files = append(files, strings.TrimSpace(l))
	}
	return "commit " + head + " plus uncommitted changes in the working tree (" + strings.Join(files, "; ") + ") — the bench builds the working tree through `replace ../`"
}

// find returns the result of scenario id in set-up topo, nil when it
// did not run.
func find(rs []*scenarioRes, topo, id string) *scenarioRes {
	for _, r := range rs {
		if r.topo.id == topo && r.sc.id == id {
			return r
		}
	}
	return nil
}

// grows is the verdict on "goroutines do not grow with run length": the
// median of the client goroutine samples at 75-95% of the run exceeds the
// median at 25-45% by more than max(32, 50%), and more than 32 client
// goroutines are still there settleDur after the last cycle. Single samples
// are too noisy (calls in flight come and go with every cycle and with the
// cycle rate); a client whose background calls are bounded by its timeout
// is back to its baseline soon after it stops.
func grows(g gorRes) bool {
	first, second := windows(g)
	return second > first+max(32, first/2) && g.settled-g.settledProxy > 32
}

func windows(g gorRes) (int, int) {
	if len(g.samples) < 10 {
		return g.half - g.halfProxy, g.end - g.endProxy
	}
	med := func(xs []int) int {
		f := make([]float64, len(xs))
		for i, x := range xs {
			f[i] = float64(x)
		}
		return int(median(f))
	}
	return med(g.samples[2:5]), med(g.samples[7:10])
}

func samplesCell(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, " ")
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// otherRedis counts redis-server processes; call it before the cluster
// starts to learn how many belong to someone else.
func otherRedis() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err == nil && strings.TrimSpace(string(b)) == "redis-server" {
			n++
		}
	}
	return n
}

// env is what is known about the machine's state around the run.
type env struct {
	loadStart, loadEnd string
	otherRedis         int
}

// nodeTimeout is A's per-node timeout in the scenarios: the library's
// default for the TTL (WithNodeTimeout is not set), TTL/200 clamped to
// [20ms, 250ms], as redlock's defaultNodeTimeout computes it.
func nodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/200, min(20*time.Millisecond, ttl/4)), 250*time.Millisecond)
}

func medianInts(xs []int) float64 {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return median(f)
}

func gorCell(xs []int) string {
	if len(xs) == 0 {
		return "–"
	}
	lo, hi := minMax(xs)
	return fmt.Sprintf("**%s** [%d…%d]", trimFloat(medianInts(xs)), lo, hi)
}

func trimFloat(x float64) string {
	if x == float64(int64(x)) {
		return fmt.Sprintf("%+d", int64(x))
	}
	return fmt.Sprintf("%+.1f", x)
}

func cpuCell(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return "**" + fmtRatio(median(xs)) + "**"
}

// floorFigures is the floor's (D's) absolute speed in one scenario: what
// every ratio of that scenario is relative to.
func floorFigures(s *scenarioRes) string {
	if s == nil || len(s.res) <= floorIdx {
		return "–"
	}
	d := s.res[floorIdx]
	n, el := totals(d)
	return fmt.Sprintf("%.0f cycles/s, cycle p50 %s", rate(n, el), fmtDur(d.cycle.q(0.5)))
}

// render writes the report: the headline and the targets first, then the
// machine, the method, the summaries and every set-up's details.
func render(p params, topos []*topology, rs []*scenarioRes, sites []allocSite, diag []diagRes, bf *beforeRun, total time.Duration, e env) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full"
	if p.quick {
		mode = "quick"
	}
	args := strings.Join(os.Args[1:], " ")
	redisBin, _ := cluster.RedisServer()
	fault := p.faultNode + 1
	nt := nodeTimeout(p.setup.ttl)
	var ran []*topology
	for _, tp := range topos {
		for _, s := range rs {
			if s.topo == tp {
				ran = append(ran, tp)
				break
			}
		}
	}

	w("# Redlock lock+unlock benchmark: quorumlock/redlock (redigo and go-redis nodes) vs go-redsync vs a raw floor\n\n")
	w("Generated %s, %s run, took %s (the whole `go run`, cluster start to report, build excluded).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), mode, total.Round(time.Second))
	renderHeadline(&b, p, rs)
	renderTargets(&b, p, rs)
	w("## Machine\n\n")
	w("- CPU: %s, %d logical cores (GOMAXPROCS %d)\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	w("- Go: %s %s/%s; kernel %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, cmdOut("uname", "-r"))
	w("- Redis: %s (%s)\n", cmdOut(redisBin, "--version"), redisBin)
	w("- Peers: %s\n", depVersions())
	w("- Library under test: %s\n", libraryState())
	w("- Load average (1/5/15 min) before the run: %s; after: %s. Other redis-server processes running when the run started (not ours): %d. The machine was shared and not reserved: anything else running shows up as round-to-round noise, which is why ratios are medians of interleaved rounds.\n\n", e.loadStart, e.loadEnd, e.otherRedis)
	w("## Command\n\n")
	w("```\nmake bench    # make deps, then: cd bench && go run . -out ../docs/BENCHMARKS.md\n```\n\n")
	w("This report: `cd bench && go run . %s`. ", args)
	w("%d interleaved rounds per scenario, %v per contender per round (order rotates: %s, %s, …), after a %v warm-up per contender. ", p.rounds, p.roundDur, strings.Join(contenderIDs, " "), strings.Join(append(contenderIDs[1:len(contenderIDs):len(contenderIDs)], contenderIDs[0]), " "), p.warmup)
	w("Goroutine passes: each contender alone for %v (%v when blackholed). ", p.tail, p.tailBH)
	w("Allocation sites: one more batch of %d serial cycles of A, no proxies, after the scenarios.\n\n", p.allocCycles)

	w("## Set-ups\n\n")
	w("Five `redis-server` processes on loopback (`cluster.Start`, process backend); faults are injected by an **in-process toxiproxy** in front of a node. The same run measures, one after the other:\n\n")
	w("1. **direct** — every node reached directly, no proxy at all: the hot path as a user gets it, and the headline. Allocations and CPU per cycle there are the clients' own (the Redis servers are other processes). Scenarios: %s.\n", setupScenarios(p, "direct"))
	w("2. **proxied** — every node behind its toxiproxy (the set-up of earlier reports). The proxies run in this process: they cost CPU, allocations and goroutines in the same process as the clients, equally for all contenders, and on 2 cores they compete with the clients and the five Redis servers. That compresses every ratio towards 1. Scenarios: %s.\n", setupScenarios(p, "proxied"))
	w("3. **mixed** — only the faulty node, node %d, behind its toxiproxy; nodes 1–%d reached directly. The quorum comes from the direct nodes, so the proxies no longer sit in every cycle, and differences between clients are no longer diluted by proxy work: the nearest to the direct set-up a fault can be. Scenarios: %s.\n\n", fault, p.faultNode, setupScenarios(p, "mixed"))
	w("Contenders, all with TTL %v, pool MaxIdle = MaxActive = %d per node, `Wait: true`, redigo dial/read/write timeout %v (the library's `node.Options.Timeout` default) for every pool:\n\n", p.setup.ttl, p.setup.pool, p.setup.sockTimeout)
	w("- **A** quorumlock/redlock: `redlock.Dial(urls, WithTTL(10s), WithNodeOptions(node.Options{MaxIdle, MaxActive, Timeout}))`, `Client.Lock` (default retry) + `Lock.Unlock`. Everything else at its default: **node timeout %v** (TTL/200; above the %v latency of the latency scenario, but see the findings), **circuit breaker on** (3 failures twice the node timeout apart, at least half of the node's calls, open it; cooldown 1 s doubling to 30 s), %s. In the proxied and mixed set-ups A also has two counting hooks (`WithHooks`: an atomic add per node call and per breaker change) that report what its calls to node %d did; in the direct set-up it runs without hooks, as configured by default.\n", nt, p.latency, connMode(p.setup), fault)
	w("- **B** go-redsync v4, redigo driver, default options except `WithExpiry(10s)`: `NewMutex(key).LockContext` + `UnlockContext`. It waits for every node; its per-attempt context (expiry × 0.05 = 500 ms) bounds only getting a pooled connection, the command is bounded by the socket read timeout (%v).\n", p.setup.sockTimeout)
	w("- **C** as B plus `WithFailFast(true)` (returns at quorum).\n")
	w("- **D** raw floor: plain redigo, `SET NX PX` to all 5 in parallel returning at majority, compare-and-delete by `EVALSHA` in parallel returning at majority, one %v deadline per fan-out, `DoWithTimeout` per call; validity check, roll-back and the same retry schedule as A; no late clean-up, no breaker.\n", p.setup.rawTimeout)
	w("- **E** quorumlock/redlock over go-redis: the same client as A (`redlock.New(nodes, WithTTL(10s))`, same node timeout, breaker, retry; counting hooks of its own where A has them, so that it pays what A pays, none in the direct set-up), its nodes `goredis.NewWithOptions(client, Options{Timeout: %v})` over one go-redis v9 `*redis.Client` per node: `PoolSize` = `MaxIdleConns` = %d, dial/read/write timeout %v, `MaxRetries -1` and `DialerRetries 1` (each command sent once and each dial tried once, as redigo does), `DisableIdentity` and maintenance notifications off (HELLO is a new connection's only round trip), RESP3 (go-redis' default), %s. go-redis has no `CheckIdle` (it checks an idle connection by a non-blocking read of its socket, not a PING).\n\n", p.setup.sockTimeout, p.setup.pool, p.setup.sockTimeout, goredisMode(p.setup))
	w("Scenarios: distinct key per cycle (pre-built key rings, so the harness allocates nothing per cycle), each contender's normal retrying Lock. Faults on node %d: +%v = toxiproxy `latency` downstream (every reply, PING included, comes %v late); blackholed = toxiproxy `timeout` 0 upstream (accepts, never answers). %d goroutine(s) in the fault scenarios. Every scenario makes fresh client instances after its fault is in place; blackholed, each contender also gets a fresh instance after every warm-up, round and goroutine pass (node still blackholed), so no contender's backlog burdens the next one's round — which also means A's breakers start closed in every blackholed round and must open again (3 timed-out calls over twice the node timeout).\n\n", fault, p.latency, p.latency, p.faultWorkers)
	w("Per round and contender: **ratio** = (time per cycle) ÷ (the floor's time per cycle in the same round); **p50 ratio** = (the round's cycle p50) ÷ (the floor's, same round); **CPU ratio** = (process CPU per cycle, getrusage user+sys) ÷ (the floor's, same round) — process-wide, so it includes the in-process proxies (all five in *proxied*, node %d's in *mixed*, none in *direct*); **goroutines at round end** = client (non-proxy) goroutines right after the round's last cycle returned minus right before the round began (after waiting up to 500 ms for the count to settle), idle workers of package quorum (no call; they end 100 ms after their last) not counted. Tables give the median over rounds and [min–max].\n\n", fault)

	// Summary per set-up: the fault set-ups (the direct one is the
	// headline), one column per summarised scenario that ran there.
	w("## Summary per set-up (median of per-round values)\n\n")
	sum := []struct{ id, name string }{{"healthy-serial", "healthy serial"}, {"latency", fmt.Sprintf("+%v", p.latency)}, {"blackhole", "blackholed"}}
	for _, tp := range ran {
		var cols []*scenarioRes
		var names []string
		for _, sc := range sum {
			if s := find(rs, tp.id, sc.id); s != nil {
				cols, names = append(cols, s), append(names, sc.name)
			}
		}
		if tp.id == "direct" || len(cols) == 0 {
			continue
		}
		w("### %s: %s\n\n", tp.id, tp.title)
		w("| contender |")
		for _, what := range []string{"time ratio", "CPU ratio", "goroutines at round end"} {
			for _, name := range names {
				w(" %s: %s |", what, name)
			}
		}
		w("\n|---|")
		for range 3 * len(cols) {
			w("---|")
		}
		w("\n")
		for i, id := range contenderIDs {
			w("| %s %s |", id, cols[0].res[i].c.name)
			for k := range 3 {
				for _, s := range cols {
					r := s.res[i]
					switch k {
					case 0:
						w(" %s |", ratioCell(r.ratios))
					case 1:
						w(" %s |", cpuCell(r.cpuRatios))
					default:
						w(" %s |", gorCell(r.gorEnd))
					}
				}
			}
			w("\n")
		}
		var fl []string
		for k, s := range cols {
			fl = append(fl, names[k]+": "+floorFigures(s))
		}
		w("\nThe floor (D) in this set-up: %s.\n\n", strings.Join(fl, "; "))
	}

	// A's calls to the faulty node.
	w("## What A's calls to node %d did during the rounds (hooks)\n\n", fault)
	w("| set-up | scenario | answered | timed out | skipped (breaker open) | other errors | breaker opened / closed | A's cycles |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range rs {
		if len(s.res) == 0 || len(s.res[0].calls) <= p.faultNode {
			continue
		}
		c := s.res[0].calls[p.faultNode]
		n, _ := totals(s.res[0])
		w("| %s | %s | %d | %d | %d | %d | %d / %d | %d |\n", s.topo.id, s.sc.id, c.ok, c.timeout, c.skipped, c.other, c.opened, c.closed, n)
	}
	w("\nCalls counted by the NodeCall hook: acquire, release and roll-back commands; a skipped call is one the open breaker failed at once, without a goroutine or a connection. Blackholed, every round starts on a fresh instance (breakers closed), so the breaker opens once per round there.\n\n")

	if len(diag) > 0 {
		w("### Why the breaker opens on the +%v node: A alone, three node configurations (mixed set-up)\n\n", p.latency)
		w("A fresh client per line, alone, serial; a %v warm-up, then 4 runs of %v each after %v idle (longer than the pool's `CheckIdle`, as between interleaved rounds). Counts cover the whole line, warm-up included.\n\n", p.warmup, p.roundDur, max(1200*time.Millisecond, 3*(p.roundDur+50*time.Millisecond)))
		w("| A's node options | cycles | node %d: answered | timed out | skipped | breaker opened / closed |\n|---|---|---|---|---|---|\n", fault)
		for _, d := range diag {
			w("| %s | %d | %d | %d | %d | %d / %d |\n", d.name, d.cycles, d.calls.ok, d.calls.timeout, d.calls.skipped, d.calls.opened, d.calls.closed)
		}
		w("\nThe node timeout is %v and the node answers in %v plus the proxy's and the scheduler's delays, so one round trip fits but two do not. Two things put a second round trip, or a wait, into one node timeout:\n\n", nt, p.latency)
		w("- **`CheckIdle`** (default 100 ms, 1 s before 2026-11-26): before commit 0f21b18 a connection idle for a second was PINGed before the command, within the same deadline (%v + %v > %v), so after a lull every first call to the slow node timed out. It is now a look at the socket with no round trip, and the shared connection (the first line) needs none: its reader sees a connection the node closed while idle.\n", p.latency, p.latency, nt)
		w("- **The pool** (MaxActive %d): a call to the slow node holds a connection for a round trip, a release queued behind its acquire holds one for another, so at a couple of thousand cycles per second more than %d calls want a connection at once; the rest wait for one within the node timeout, and time out. Compare the last two lines; the shared connection has no pool to wait for.\n", p.setup.pool, p.setup.pool)
		w("- What remains (the last line) is timeouts from scheduling stalls on this shared 2-core machine: with only %v of slack, one stall fails every call in flight at once; the breaker's Span (the run of failures must last twice the node timeout) keeps one such burst from opening it.\n\n", nt-p.latency)
	}

	// The same client over go-redis nodes.
	renderGoredis(&b, ran, rs)

	// Before and after.
	renderBefore(&b, p, rs, bf)

	// Allocations.
	w("## Allocations and CPU per lock+unlock cycle (direct set-up, healthy serial)\n\n")
	if ds := find(rs, "direct", "healthy-serial"); ds != nil {
		hs := find(rs, "proxied", "healthy-serial")
		w("| contender | allocs | bytes | CPU per cycle | cycle p50 | ratio to floor | via proxies, healthy serial: allocs | bytes |\n|---|---|---|---|---|---|---|---|\n")
		for i, r := range ds.res {
			pa, pb := "–", "–"
			if hs != nil {
				a, by := allocsPer(hs.res[i])
				pa, pb = fmt.Sprintf("%.1f", a), fmt.Sprintf("%.0f", by)
			}
			m := roundMedians(r)
			w("| %s %s | %.1f | %.0f | %s | %s | %s | %s | %s |\n", r.c.id, r.c.name, m.allocs, m.bytes, fmtDur(m.cpu), fmtDur(r.cycle.q(0.5)), ratioCell(r.ratios), pa, pb)
		}
		if hs != nil {
			pa, _ := allocsPer(hs.res[floorIdx])
			fa := roundMedians(ds.res[floorIdx]).allocs
			w("\nThe proxies' share, estimated from the raw floor: %.1f allocations per cycle through the proxies − %.1f direct = **%.1f per cycle** charged to the proxies (and the process' background) in every \"via proxies\" figure.\n", pa, fa, pa-fa)
		}
		w("\nAllocations, bytes and CPU per cycle: this process' `runtime.ReadMemStats` and user+system time (getrusage) deltas over each of the contender's rounds in the direct set-up, median of rounds; without proxies they are the client's own cost (the Redis servers are other processes). A and E run without hooks here.\n\n")
	} else {
		w("Not run (the direct set-up's healthy-serial scenario was left out).\n\n")
	}
	if len(sites) > 0 {
		var tot float64
		for _, st := range sites {
			tot += st.perCycle
		}
		w("Where A's allocations come from: one more batch of %d serial cycles, no proxies, with every allocation recorded (`MemProfileRate` 1), %.1f objects per cycle in all, by allocating function (innermost frame outside the runtime) and the innermost library function that led to it:\n\n", p.allocCycles, tot)
		w("| allocating function | via (library) | objects per cycle |\n|---|---|---|\n")
		var rest float64
		for k, st := range sites {
			if k >= 15 || st.perCycle < 0.5 {
				rest += st.perCycle
				continue
			}
			via := st.via
			if via == "" || via == st.fn {
				via = "–"
			}
			w("| `%s` | `%s` | %.1f |\n", st.fn, via, st.perCycle)
		}
		w("| everything else | | %.1f |\n\n", rest)
	}

	for _, tp := range ran {
		renderDetails(&b, p, tp, rs)
	}
	w("\\* process-wide (see Set-ups): allocations and CPU time of the in-process proxies, and of background calls still finishing, are included.\n")
	return b.String()
}

// iqr formats the interquartile range of xs.
func iqr(xs []float64) string {
	if len(xs) < 4 {
		return "–"
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	q := func(f float64) float64 { return s[int(f*float64(len(s)-1)+0.5)] }
	return fmt.Sprintf("%s–%s", fmtRatio(q(0.25)), fmtRatio(q(0.75)))
}

// renderDetails writes one set-up's full tables: every scenario's ratios,
// the goroutine passes and the per-scenario figures.
func renderDetails(b *strings.Builder, p params, tp *topology, rs []*scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var mine []*scenarioRes
	for _, s := range rs {
		if s.topo == tp {
			mine = append(mine, s)
		}
	}
	w("## Details: %s (%s)\n\n", tp.id, tp.title)
	w("### Ratio to the raw floor (median of per-round ratios [min–max])\n\n")
	w("| scenario |")
	for _, id := range contenderIDs {
		w(" %s %s |", id, shortNames[id])
	}
	w("\n|---|")
	for range contenderIDs {
		w("---|")
	}
	w("\n")
	for _, s := range mine {
		w("| %s |", s.sc.id)
		for _, r := range s.res {
			w(" %s |", ratioCell(r.ratios))
		}
		w("\n")
	}
	w("\n")
	if slices.ContainsFunc(mine, func(s *scenarioRes) bool { return s.sc.contended }) {
		w("Contended: ratio of time per critical section (inverse throughput).\n\n")
	}

	w("### Goroutine passes\n\n")
	w("Each contender alone, after the interleaved rounds; counts are relative to the baseline taken just before its pass. \"client\" excludes goroutines with a toxiproxy frame; \"proxy\" are the in-process proxies' per-connection goroutines.\n\n")
	w("| scenario | contender | at half time: client / proxy | at end: client / proxy | after %v: client / proxy |\n|---|---|---|---|---|\n", p.settleDur)
	for _, s := range mine {
		for _, r := range s.res {
			g := r.gor
			if !g.ran {
				continue
			}
			w("| %s | %s | %+d / %+d | %+d / %+d | %+d / %+d |\n", s.sc.id, r.c.id,
				g.half-g.halfProxy, g.halfProxy, g.end-g.endProxy, g.endProxy, g.settled-g.settledProxy, g.settledProxy)
		}
	}
	if s := find(rs, tp.id, "blackhole"); s != nil {
		w("\nBlackholed, does the count grow with run length? (pass of %v per contender on a fresh instance; after it the instance is closed, node still blackholed, and the time until its goroutines are gone is measured). \"Grows\" means both: the median of the client goroutine counts sampled at 75, 85 and 95%% of the pass exceeds the median at 25, 35 and 45%% by more than max(32, 50%%), and more than 32 client goroutines are still alive %v after the last cycle.\n\n", p.tailBH, p.settleDur)
		w("| contender | cycles in pass | client at half | client at end | samples at 5%%, 15%% … 95%% | grows? | gone after Close() in | commands that reached the node (rounds / pass) |\n|---|---|---|---|---|---|---|---|\n")
		for _, r := range s.res {
			g := r.gor
			if !g.ran {
				continue
			}
			dr := fmtDur(g.drain)
			if !g.drained {
				dr = "not within 10s"
			}
			verdict := "no"
			if grows(g) {
				verdict = "**yes**"
			}
			w("| %s %s | %d | %+d | %+d | %s | %s | %s | %d / %d |\n", r.c.id, r.c.name, g.cycles, g.half-g.halfProxy, g.end-g.endProxy, samplesCell(g.samples), verdict, dr, r.leaked, g.leaked)
		}
	}
	w("\n")

	w("### Per scenario\n\n")
	for _, s := range mine {
		w("#### %s — %s\n\n", tp.id, s.sc.title)
		w("Scenario took %s.\n\n", s.elapsed.Round(100*time.Millisecond))
		if s.sc.table != nil {
			s.sc.table(b, p, s)
		} else {
			renderFreeTable(b, s)
		}
		for _, r := range s.res {
			if r.firstErr != "" {
				w("- %s first error: `%s`\n", r.c.id, truncate(r.firstErr, 300))
			}
		}
		w("\n")
	}
}

// renderFreeTable is the distinct-key scenarios' table (healthy, latency,
// blackholed): cycles, latencies, allocations and ratios per contender.
func renderFreeTable(b *strings.Builder, s *scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("| contender | cycles | ops/s | cycle p50 | cycle p99 | acquire p50 | acquire p99 | allocs/cycle* | bytes/cycle* | CPU/cycle* | ratio median [min–max] | CPU ratio | goroutines at round end | errors (lock/unlock) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.res {
		n, el := totals(r)
		a, by := allocsPer(r)
		w("| %s %s | %d | %.0f | %s | %s | %s | %s | %.1f | %.0f | %s | %s | %s | %s | %d / %d |\n", r.c.id, r.c.name, n, rate(n, el),
			fmtDur(r.cycle.q(0.5)), fmtDur(r.cycle.q(0.99)), fmtDur(r.acq.q(0.5)), fmtDur(r.acq.q(0.99)), a, by, fmtDur(cpuPer(r)), ratioCell(r.ratios), cpuCell(r.cpuRatios), gorCell(r.gorEnd), r.lockErrs, r.unlockErrs)
	}
	w("\n")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func totals(r *result) (int, time.Duration) {
	n, el := 0, time.Duration(0)
	for _, x := range r.rounds {
		n += x.cycles
		el += x.elapsed
	}
	return n, el
}

func rate(n int, el time.Duration) float64 {
	if el <= 0 {
		return 0
	}
	return float64(n) / el.Seconds()
}

func allocsPer(r *result) (float64, float64) {
	var n int
	var m, by uint64
	for _, x := range r.rounds {
		n += x.cycles
		m += x.mallocs
		by += x.bytes
	}
	if n == 0 {
		return 0, 0
	}
	return float64(m) / float64(n), float64(by) / float64(n)
}

func cpuPer(r *result) time.Duration {
	var n int
	var c time.Duration
	for _, x := range r.rounds {
		n += x.cycles
		c += x.cpu
	}
	if n == 0 {
		return 0
	}
	return c / time.Duration(n)
}

// shortNames are the contenders' names in table headers.
var shortNames = map[string]string{"A": "redlock", "B": "redsync", "C": "redsync fail-fast", "D": "floor", "E": "redlock over go-redis"}

// perRound returns, for each round in which both ran, x's time per cycle
// divided by y's: two contenders compared within the same rounds.
func perRound(x, y *result) []float64 {
	var out []float64
	for r := range min(len(x.rounds), len(y.rounds)) {
		a, b := x.rounds[r], y.rounds[r]
		if a.cycles > 0 && b.cycles > 0 && b.elapsed > 0 {
			out = append(out, (a.elapsed.Seconds()/float64(a.cycles))/(b.elapsed.Seconds()/float64(b.cycles)))
		}
	}
	return out
}

// renderGoredis compares E (this client over goredis nodes) with A (over
// its own redigo nodes), scenario by scenario, in every set-up.
func renderGoredis(b *strings.Builder, ran []*topology, rs []*scenarioRes) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	ai, ei := slices.Index(contenderIDs, "A"), slices.Index(contenderIDs, "E")
	w("## E vs A: the same client over go-redis nodes\n\n")
	w("E is A's client with goredis nodes over go-redis clients instead of the library's redigo nodes (see Contenders). **E ÷ A** is E's time per cycle over A's in the same round, median [min–max] of rounds; the other columns are E's figures next to A's.\n\n")
	w("| set-up | scenario | E ÷ A | E ÷ floor | A ÷ floor | CPU ratio E / A | cycle p50 E / A | cycle p99 E / A | allocs/cycle* E / A | goroutines at round end E / A | errors E (lock/unlock) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, tp := range ran {
		for _, s := range rs {
			if s.topo != tp || len(s.res) <= max(ai, ei) {
				continue
			}
			a, e := s.res[ai], s.res[ei]
			aa, _ := allocsPer(a)
			ea, _ := allocsPer(e)
			w("| %s | %s | %s | %s | %s | %s / %s | %s / %s | %s / %s | %.1f / %.1f | %s / %s | %d / %d |\n", tp.id, s.sc.id,
				ratioCell(perRound(e, a)), ratioCell(e.ratios), ratioCell(a.ratios), cpuCell(e.cpuRatios), cpuCell(a.cpuRatios),
				fmtDur(e.cycle.q(0.5)), fmtDur(a.cycle.q(0.5)), fmtDur(e.cycle.q(0.99)), fmtDur(a.cycle.q(0.99)),
				ea, aa, gorCell(e.gorEnd), gorCell(a.gorEnd), e.lockErrs, e.unlockErrs)
		}
	}
	w("\nContended: per critical section. In the direct set-up neither has hooks.\n\n")
}

// goredisMode describes how E's calls are bounded.
func goredisMode(s setup) string {
	if s.goredisCtxTimeout {
		return "**`ContextTimeoutEnabled`** (`-goredis-ctx-timeout`: go-redis bounds reads and writes by each call's deadline and closes the connection of a reply or handshake that missed it, where A's nodes keep it)"
	}
	return "`ContextTimeoutEnabled` off (go-redis' default: the node runs each call in a goroutine and returns at the deadline; go-redis reads a late reply or finishes a late handshake in the background and keeps the connection, as A's nodes do, and the node lets no command out after its call returned)"
}

// connMode says how A's nodes reach their Redis (-pooled).
func connMode(s setup) string {
	if s.pooled {
		return "**pooled connections** (`-pooled`: a connection per call from a pool of `MaxActive`; `CheckIdle` 100 ms, a connection idle for that long is looked at, without a round trip, before the next call uses it; each contender idles ~1.2 s between its rounds)"
	}
	return "one shared connection per node (the default: every call's command written with those issued at the same moment, replies read in order by one reader goroutine, which also sees a connection the node closed while idle)"
}
