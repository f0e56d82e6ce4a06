package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
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
	dirty := cmdOut("git", "-C", "..", "status", "--porcelain", "--", "clock", "node", "quorum", "redlock")
	if dirty == "" {
		return "commit " + head + ", library packages clean"
	}
	var files []string
	for _, l := range strings.Split(dirty, "\n") {
		files = append(files, strings.TrimSpace(l))
	}
	return "commit " + head + " plus uncommitted changes in the working tree (" + strings.Join(files, "; ") + ") — the bench builds the working tree through `replace ../`"
}

func find(rs []*scenarioRes, id string) *scenarioRes {
	for _, r := range rs {
		if r.sc.id == id {
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

func passMiss(ok bool) string {
	if ok {
		return "**PASS**"
	}
	return "**MISS**"
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

func render(p params, rs []*scenarioRes, ds []*directRes, total time.Duration, e env) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	mode := "full"
	if p.quick {
		mode = "quick"
	}
	args := strings.Join(os.Args[1:], " ")
	redisBin, _ := cluster.RedisServer()

	w("# Redlock lock+unlock benchmark: quorumlock/redlock vs go-redsync vs a raw floor\n\n")
	w("Generated %s, %s run, took %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), mode, total.Round(time.Second))
	w("## Machine\n\n")
	w("- CPU: %s, %d logical cores (GOMAXPROCS %d)\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	w("- Go: %s %s/%s; kernel %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, cmdOut("uname", "-r"))
	w("- Redis: %s (%s)\n", cmdOut(redisBin, "--version"), redisBin)
	w("- Peers: %s\n", depVersions())
	w("- Library under test: %s\n", libraryState())
	w("- Load average (1/5/15 min) before the run: %s; after: %s. Other redis-server processes running when the run started (not ours): %d. The machine was not otherwise reserved: anything else running shows up as round-to-round noise, which is why ratios are medians of interleaved rounds.\n\n", e.loadStart, e.loadEnd, e.otherRedis)
	w("## Command\n\n")
	w("```\ncd bench && go run . %s\n```\n\n", args)
	w("%d interleaved rounds per scenario, %v per contender per round (order rotates: A B C D, B C D A, …), after a %v warm-up per contender. ", p.rounds, p.roundDur, p.warmup)
	w("Goroutine passes: each contender alone for %v (%v when blackholed), counted at half time, at the end, and %v later. ", p.tail, p.tailBH, p.settleDur)
	w("Direct (no proxy) pass: %d rotating rounds × %d serial cycles per contender.\n\n", p.directRounds, p.directCycles)

	w("## Setup\n\n")
	w("- Five `redis-server` processes on loopback (`cluster.Start`, process backend), each behind an **in-process toxiproxy**. Every contender talks to the nodes through the proxies, so faults apply equally. ")
	w("The proxies run in this process: they cost CPU (and allocations, and goroutines) in the same process as the clients, equally for all contenders, and on 2 cores they compete with the clients and the five Redis servers. Ratios are therefore compressed towards 1 compared with a real network; the direct pass below removes the proxies.\n")
	w("- Contenders, all with TTL %v, pool MaxIdle = MaxActive = %d per node, `Wait: true`, redigo dial/read/write timeout %v (the library's `node.Options.Timeout` default) for every pool:\n", p.setup.ttl, p.setup.pool, p.setup.sockTimeout)
	w("  - **A** quorumlock/redlock: `redlock.Dial(urls, WithTTL(10s), WithNodeOptions(node.Options{MaxIdle, MaxActive}))`, default node timeout (50 ms), `Client.Lock` (default retry) + `Lock.Unlock`; other node options at their defaults — with `CheckIdle` (1 s) a pooled connection idle for a second is PINGed before use, which the interleaving triggers once per connection per round (each contender sits idle ~1.2 s between its rounds).\n")
	w("  - **B** go-redsync v4, redigo driver, default options except `WithExpiry(10s)`: `NewMutex(key).LockContext` + `UnlockContext`. It waits for every node; its per-attempt context (expiry × 0.05 = 500 ms) bounds only getting a pooled connection, the command is bounded by the socket read timeout (%v).\n", p.setup.sockTimeout)
	w("  - **C** as B plus `WithFailFast(true)` (returns at quorum).\n")
	w("  - **D** raw floor: plain redigo, `SET NX PX` to all 5 in parallel returning at majority, compare-and-delete by `EVALSHA` in parallel returning at majority, one %v deadline per fan-out, `DoWithTimeout` per call; validity check, roll-back and the same retry schedule as A; no late clean-up.\n", p.setup.rawTimeout)
	w("- Non-contended scenarios: distinct key per cycle (a per-goroutine ring of pre-built keys, so the harness allocates nothing per cycle); each contender uses its normal retrying Lock (it never needs to retry there).\n")
	w("- Contended: %d goroutines, one key per contender, hold %v, each contender's **own normal Lock with retries**: A default retry (≤32 attempts, full-jitter exponential 10 ms…500 ms), B/C redsync default (32 tries, uniform 50…250 ms), D the same schedule as A. The Lock context ends with the round; a Lock cut by the round's end is counted as \"cut\", not as an error. Retry policy dominates this scenario's throughput.\n", p.contenders, p.hold)
	w("- Faults on node %d: latency = toxiproxy `latency` %v downstream; blackhole = toxiproxy `timeout` 0 upstream (accepts, swallows, never answers). Latency and blackhole scenarios use %d goroutine(s). Every scenario makes fresh client instances after its fault is in place, so every connection carries the toxic from its first byte (toxiproxy adds a later toxic only to the connections in its map, keyed by client address, which heavy churn with port reuse can corrupt). Blackholed, each contender also gets a fresh instance after every warm-up, round and goroutine pass (the node stays blackholed): closing the old one ends what it left behind, so no contender's backlog burdens the next one's round; the goroutine passes show what piles up within a run. As a check, the commands that reached the blackholed node (read on the node itself, not through the proxy) are counted per contender; they should be 0.\n", p.faultNode, p.latency, p.faultWorkers)
	w("- ratio = (time per cycle of X) / (time per cycle of D) within the same round; the table shows the median over rounds and [min–max]. > 1 means slower than the floor.\n")
	w("- allocs and bytes per cycle through the proxies are process-wide `runtime.ReadMemStats` deltas over the contender's rounds divided by its cycles: they include the proxies' allocations and background work still finishing from the previous contender. The direct pass has no proxies.\n\n")

	// Targets.
	w("## Targets from the issue (our client, A)\n\n")
	w("| target | measured | result |\n|---|---|---|\n")
	if s := find(rs, "healthy-serial"); s != nil {
		m := median(s.res[0].ratios)
		w("| healthy serial ≤ 1.05× raw floor | %s | %s |\n", fmtRatio(m), passMiss(m > 0 && m <= 1.05))
	}
	if s := find(rs, "latency"); s != nil {
		m := median(s.res[0].ratios)
		w("| one node +%v ≤ 1.1× | %s | %s |\n", p.latency, fmtRatio(m), passMiss(m > 0 && m <= 1.1))
	}
	if s := find(rs, "blackhole"); s != nil {
		m := median(s.res[0].ratios)
		g := s.res[0].gor
		w("| one node blackholed ≤ 1.1× | %s | %s |\n", fmtRatio(m), passMiss(m > 0 && m <= 1.1))
		if g.ran {
			f, sec := windows(g)
			w("| blackholed: goroutines do not grow with run length | client goroutines %+d at half time, %+d at the end (medians %d over 25–45%% vs %d over 75–95%% of the run), %+d after %v | %s |\n",
				g.half-g.halfProxy, g.end-g.endProxy, f, sec, g.settled-g.settledProxy, p.settleDur, passMiss(!grows(g)))
		}
	}
	if len(ds) > 0 {
		a := median(ds[0].allocs)
		w("| ≤ 40 allocations per lock+unlock cycle | %.1f (direct, healthy serial) | %s |\n", a, passMiss(a <= 40))
	}
	w("\n\"Grow\" means both: the median of the client (non-proxy) goroutine counts sampled at 75, 85 and 95%% of the pass exceeds the median at 25, 35 and 45%% by more than max(32, 50%%), and more than 32 client goroutines are still alive %v after the last cycle (node still blackholed). Single samples swing with the calls in flight and the cycle rate.\n\n", p.settleDur)

	// Ratio summary.
	w("## Ratio to the raw floor (median of per-round ratios [min–max])\n\n")
	w("| scenario | A redlock | B redsync | C redsync fail-fast | D floor |\n|---|---|---|---|---|\n")
	for _, s := range rs {
		w("| %s |", s.sc.id)
		for _, r := range s.res {
			w(" %s |", ratioCell(r.ratios))
		}
		w("\n")
	}
	if len(ds) > 0 {
		w("| healthy-serial, direct (no proxies) |")
		for _, d := range ds {
			w(" %s |", ratioCell(d.ratios))
		}
		w("\n")
	}
	w("\nContended: ratio of time per critical section (inverse throughput).\n\n")

	// Allocations.
	w("## Allocations per lock+unlock cycle\n\n")
	w("| contender | direct: allocs | direct: bytes | direct: CPU per cycle | direct: cycle p50 | via proxies, healthy serial: allocs | bytes |\n|---|---|---|---|---|---|---|\n")
	hs := find(rs, "healthy-serial")
	for i, d := range ds {
		pa, pb := "–", "–"
		if hs != nil {
			a, by := allocsPer(hs.res[i])
			pa, pb = fmt.Sprintf("%.1f", a), fmt.Sprintf("%.0f", by)
		}
		w("| %s %s | %.1f | %.0f | %.0fµs | %s | %s | %s |\n", d.c.id, d.c.name, median(d.allocs), median(d.bytes), median(d.cpu), fmtDur(d.cycle.q(0.5)), pa, pb)
	}
	if hs != nil && len(ds) == 4 {
		pa, _ := allocsPer(hs.res[3])
		w("\nThe proxies' share, estimated from the raw floor: %.1f allocations per cycle through the proxies − %.1f direct = **%.1f per cycle** charged to the proxies (and the process' background) in every \"via proxies\" figure.\n", pa, median(ds[3].allocs), pa-median(ds[3].allocs))
	}
	w("\nCPU per cycle: this process' user+system time (getrusage) over the contender's direct rounds, median of rounds; without proxies it is the client's own cost (the Redis servers are other processes).\n\n")

	// Goroutines.
	w("## Goroutines\n\n")
	w("Each contender alone, after the interleaved rounds; counts are relative to the baseline taken just before its pass. \"client\" excludes goroutines with a toxiproxy frame; \"proxy\" are the in-process proxies' per-connection goroutines.\n\n")
	w("| scenario | contender | at half time: client / proxy | at end: client / proxy | after %v: client / proxy |\n|---|---|---|---|---|\n", p.settleDur)
	for _, s := range rs {
		for _, r := range s.res {
			g := r.gor
			if !g.ran {
				continue
			}
			w("| %s | %s | %+d / %+d | %+d / %+d | %+d / %+d |\n", s.sc.id, r.c.id,
				g.half-g.halfProxy, g.halfProxy, g.end-g.endProxy, g.endProxy, g.settled-g.settledProxy, g.settledProxy)
		}
	}
	if s := find(rs, "blackhole"); s != nil {
		w("\nBlackholed, does the count grow with run length? (pass of %v per contender on a fresh instance; after it the instance is closed, node still blackholed, and the time until its goroutines are gone is measured)\n\n", p.tailBH)
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

	// Per scenario.
	w("## Per scenario\n\n")
	for _, s := range rs {
		w("### %s\n\n", s.sc.title)
		w("Scenario took %s.\n\n", s.elapsed.Round(100*time.Millisecond))
		if s.sc.contended {
			w("| contender | sections | sections/s | handoff gap p50 / p99 | to another goroutine: p50 / p99 (n) | lock wait p50 / p99 | fairness min / max per goroutine | lock / unlock errors | cut at round end | exclusion violations | allocs/section* | ratio median [min–max] |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, r := range s.res {
				n, el := totals(r)
				lo, hi := minMax(r.perWorker)
				a, _ := allocsPer(r)
				w("| %s %s | %d | %.0f | %s / %s | %s / %s (%d) | %s / %s | %d / %d | %d / %d | %d | %d | %.1f | %s |\n", r.c.id, r.c.name, n, rate(n, el),
					fmtDur(r.gap.q(0.5)), fmtDur(r.gap.q(0.99)), fmtDur(r.gapOther.q(0.5)), fmtDur(r.gapOther.q(0.99)), r.gapOther.n,
					fmtDur(r.acq.q(0.5)), fmtDur(r.acq.q(0.99)),
					lo, hi, r.lockErrs, r.unlockErrs, r.cut, r.violations, a, ratioCell(r.ratios))
			}
			w("\nHandoff gap: from the holder starting to release (end of its critical section, before Unlock) to the next holder's Lock returning; the goroutine that just released may take the lock straight back (it calls Lock again at once while the others sleep in their retry delay), so the gap to *another* goroutine is shown apart. Lock wait: Lock call to grant, retries included. Fairness: sections per goroutine over all rounds. Each round uses a fresh key.\n\n")
		} else {
			w("| contender | cycles | ops/s | cycle p50 | cycle p99 | acquire p50 | acquire p99 | allocs/cycle* | bytes/cycle* | CPU/cycle* | ratio median [min–max] | errors (lock/unlock) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			for _, r := range s.res {
				n, el := totals(r)
				a, by := allocsPer(r)
				w("| %s %s | %d | %.0f | %s | %s | %s | %s | %.1f | %.0f | %s | %s | %d / %d |\n", r.c.id, r.c.name, n, rate(n, el),
					fmtDur(r.cycle.q(0.5)), fmtDur(r.cycle.q(0.99)), fmtDur(r.acq.q(0.5)), fmtDur(r.acq.q(0.99)), a, by, fmtDur(cpuPer(r)), ratioCell(r.ratios), r.lockErrs, r.unlockErrs)
			}
			w("\n")
		}
		for _, r := range s.res {
			if r.firstErr != "" {
				w("- %s first error: `%s`\n", r.c.id, truncate(r.firstErr, 300))
			}
		}
		w("\n")
	}
	w("\\* process-wide, through the proxies (see Setup): allocations and CPU time of the in-process proxies, and of background calls still finishing, are included.\n")
	return b.String()
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
