// Command bench measures this Redlock client (over its redigo nodes, and
// over goredis nodes) side by side with go-redsync (default and
// fail-fast) and a raw redigo floor, on five local redis-server processes,
// in three set-ups: every node reached directly (the healthy hot path, the
// report's headline), every node behind an in-process toxiproxy, and only
// the faulty node behind one (the other four reached directly), so that
// the proxies do not compress the ratios.
//
// It is its own module so that the peers stay out of the library's go.mod.
// Run it from this directory:
//
//	go run . -quick                  # ~4 minute smoke run
//	go run . -out results/latest.md  # full run, ~13 minutes on 2 cores
//	go vet ./...
//
// main.go parses the flags, starts the cluster and runs every scenario of
// scenarios (scenario.go; each defined in a scenario_*.go file) in every
// set-up it names; report.go renders the Markdown. See README.md for what
// is measured and how.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
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
	allocCycles  int           // serial cycles of A recorded for its allocation sites
	parallel     int
	contenders   int           // goroutines in the contended scenarios
	clients      int           // separate client instances in the contended-clients scenario
	dieTTL       time.Duration // the dying holder's TTL in the holder-dies scenario
	dieCycles    int           // holder-dies cycles per contender per round
	hold         time.Duration
	preciseHold  bool // hold in a nanosleep system call instead of time.Sleep (-precise-hold)
	latency      time.Duration
	faultNode    int
	faultWorkers int
	setup        setup
	setups       map[string]bool // nil: all
	before       string          // report of the run before a redesign, to compare with
}

// topology is a set-up: how the contenders reach the nodes. Each scenario
// names the set-ups it runs in (scenario.setups).
type topology struct {
	id, title string
	urls      []string
	// hooks gives A and E their counting hooks (what their calls to the
	// faulty node did). Off where the hot path itself is measured: there
	// they run as a user would configure them.
	hooks bool
}

func main() {
	var (
		quick   = flag.Bool("quick", false, "short smoke run (~4 minutes)")
		out     = flag.String("out", "", "also write the Markdown report to this file")
		rounds  = flag.Int("rounds", 0, "interleaved rounds per scenario (default 16, quick 8)")
		roundD  = flag.Duration("round", 0, "duration per contender per round (default 400ms, quick 120ms)")
		pool    = flag.Int("pool", 64, "MaxIdle = MaxActive per node, for every contender")
		sockT   = flag.Duration("socket-timeout", time.Second, "redigo dial/read/write timeout for every pool (node.Options.Timeout default)")
		pooled  = flag.Bool("pooled", false, "A's node.Options.Pooled: a pooled connection per call instead of one shared connection per node; for diagnosis")
		chkIdle = flag.Duration("check-idle", 0, "A's node.Options.CheckIdle, which applies to pooled connections only (-pooled; 0: the library's default, 100ms; negative: off); for diagnosis")
		precise = flag.Bool("precise-hold", false, "the contended scenarios hold the lock in a nanosleep system call instead of time.Sleep, whose overshoot depends on what else the process does (docs/PERFORMANCE.md); for diagnosis")
		grCtx   = flag.Bool("goredis-ctx-timeout", false, "E's go-redis clients with ContextTimeoutEnabled (go-redis bounds reads and writes and drops late connections; default: the nodes bound calls from goroutines); for diagnosis")
		fault   = flag.Int("fault-node", 4, "index of the node that gets the latency or the blackhole")
		faultW  = flag.Int("fault-workers", 1, "goroutines in the latency and blackholed scenarios")
		maxTime = flag.Duration("max", 0, "watchdog: abort after this long (default 20m, quick 6m)")
		only    = flag.String("scenarios", "", "comma-separated subset of scenarios to run ("+strings.Join(scenarioIDs(), ",")+",shared,election,cluster); default all")
		setups  = flag.String("setups", "", "comma-separated subset of set-ups to run (direct: no proxies; proxied: all nodes behind proxies; mixed: only the faulty node behind one); default all")
		before  = flag.String("before", "results/before-ccc0598.md", "report of an earlier run (its own harness) to compare with; skipped when missing")
		profDir = flag.String("allocprofile", "", "after the scenarios, write per-contender allocation profiles (MemProfileRate=1, direct nodes) to this directory")
		cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (every contender: tell them apart by package; for diagnosis)")
	)
	flag.Parse()
	if *cpuProf != "" {
		stop, err := startCPUProfile(*cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer stop()
	}
	p := params{
		quick: *quick, rounds: 16, roundDur: 400 * time.Millisecond, warmup: 300 * time.Millisecond,
		tail: time.Second, tailBH: 6 * time.Second, settleDur: 300 * time.Millisecond,
		allocCycles: 1000,
		parallel:    32, contenders: 8, clients: 4, dieTTL: 250 * time.Millisecond, dieCycles: 4,
		hold: time.Millisecond, preciseHold: *precise, latency: 30 * time.Millisecond,
		faultNode: *fault, faultWorkers: *faultW, profDir: *profDir, before: *before,
		setup: setup{ttl: 10 * time.Second, pool: *pool, sockTimeout: *sockT, rawTimeout: 50 * time.Millisecond, checkIdle: *chkIdle, pooled: *pooled, goredisCtxTimeout: *grCtx},
	}
	watchdog := 20 * time.Minute
	if p.quick {
		p.rounds, p.roundDur, p.warmup = 8, 120*time.Millisecond, 80*time.Millisecond
		p.tail, p.tailBH, p.settleDur = 300*time.Millisecond, 1500*time.Millisecond, 200*time.Millisecond
		p.allocCycles = 200
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
	p.only = idSet(*only)
	p.setups = idSet(*setups)
	if p.faultNode < 0 || p.faultNode > 4 {
		fmt.Fprintln(os.Stderr, "bench: -fault-node must be in [0, 4]")
		os.Exit(2)
	}
	code := run(p, *out, watchdog)
	if code != 0 {
		os.Exit(code)
	}
}

// startCPUProfile starts a CPU profile into path and returns what stops it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// idSet reads a comma-separated list of ids; nil when it is empty (all).
func idSet(list string) map[string]bool {
	if list == "" {
		return nil
	}
	m := map[string]bool{}
	for _, id := range strings.Split(list, ",") {
		m[strings.TrimSpace(id)] = true
	}
	return m
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

	// The direct set-up first: it is the headline, measured before the
	// fault scenarios have churned through thousands of connections.
	topos := []*topology{
		{id: "direct", title: "all five nodes reached directly, no proxy", urls: direct},
		{id: "proxied", title: "all five nodes behind in-process toxiproxies", urls: proxied, hooks: true},
		{id: "mixed", title: fmt.Sprintf("only the faulty node (node %d) behind a toxiproxy, the other four reached directly", p.faultNode+1), urls: mixed, hooks: true},
	}
	var results []*scenarioRes
	for _, tp := range topos {
		if p.setups != nil && !p.setups[tp.id] {
			continue
		}
		b.urls = tp.urls
		for _, sc := range scenarios(p) {
			if ctx.Err() != nil {
				break
			}
			if p.only != nil && !p.only[sc.id] || !slices.Contains(sc.setups, tp.id) {
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
	var sr *sharedRes
	if ctx.Err() == nil && (p.only == nil || p.only["shared"]) && (p.setups == nil || p.setups["direct"]) {
		logf("shared locks and semaphores pass")
		var err error
		if sr, err = b.sharedPass(direct); err != nil {
			logf("shared pass failed: %v", err)
		}
	}
	var er *electionRes
	if ctx.Err() == nil && (p.only == nil || p.only["election"]) && (p.setups == nil || p.setups["direct"]) {
		logf("election pass")
		var err error
		if er, err = b.electionPass(direct); err != nil {
			logf("election pass failed: %v", err)
		}
	}
	var cr *clusterRes
	if ctx.Err() == nil && (p.only == nil || p.only["cluster"]) && (p.setups == nil || p.setups["direct"]) {
		logf("cluster pass")
		var err error
		if cr, err = b.clusterPass(); err != nil {
			logf("cluster pass failed: %v", err)
		}
	}
	var sites []allocSite
	if ctx.Err() == nil {
		var err error
		sites, err = b.allocPass(direct)
		if err != nil {
			logf("allocation pass failed: %v", err)
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		return 130
	}
	closeCluster()
	total := time.Since(started)

	e.loadEnd = loadAvg()
	report := render(p, topos, results, sites, diag, readBefore(p.before), total, e)
	if sr != nil {
		var sb strings.Builder
		renderShared(&sb, sr)
		report += sb.String()
	}
	if er != nil {
		var sb strings.Builder
		renderElection(&sb, er)
		report += sb.String()
	}
	if cr != nil {
		var sb strings.Builder
		renderCluster(&sb, cr)
		report += sb.String()
	}
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
