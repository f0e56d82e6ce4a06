package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The fault scenarios: one node (p.faultNode) slowed or blackholed by its
// toxiproxy, p.faultWorkers goroutines on distinct keys. They run through
// the proxies: all five (proxied) and only the faulty node's (mixed, the
// nearest to the direct set-up a fault can be).

// latencyScenario: every reply of the faulty node comes p.latency late.
func latencyScenario(p params) scenario {
	return scenario{
		id:      "latency",
		title:   fmt.Sprintf("One node +%v latency (node %d of 1–5, %d goroutine(s), distinct keys)", p.latency, p.faultNode+1, p.faultWorkers),
		setups:  []string{"proxied", "mixed"},
		workers: p.faultWorkers, fault: "latency", round: freeRound,
	}
}

// blackholeScenario: the faulty node accepts connections and never
// answers.
func blackholeScenario(p params) scenario {
	return scenario{
		id:      "blackhole",
		title:   fmt.Sprintf("One node blackholed (node %d of 1–5, %d goroutine(s), distinct keys)", p.faultNode+1, p.faultWorkers),
		setups:  []string{"proxied", "mixed"},
		workers: p.faultWorkers, fault: "blackhole", round: freeRound,
	}
}

// applyFault puts the fault of kind ("" for none) on the faulty node's
// proxy.
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

// diagRes is one variant of A's node options in the latency diagnosis.
type diagRes struct {
	name      string
	pooled    bool
	checkIdle time.Duration
	pool      int
	cycles    int
	calls     callStats // to the slow node
}

// latencyDiag runs A alone against the slow node (the current set-up,
// +latency on the fault node) with its default node options (one shared
// connection per node) and with pooled connections, where two suspects
// of timeouts on a node slower than half the node timeout live:
// CheckIdle (once a PING before a command on a connection idle for a
// second: two round trips within one node timeout) and the pool's size
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
		{name: "A as benchmarked (one shared connection per node)", pooled: b.p.setup.pooled, pool: b.p.setup.pool},
		{name: fmt.Sprintf("pooled, CheckIdle 100ms, pool %d", b.p.setup.pool), pooled: true, pool: b.p.setup.pool},
		{name: "pooled, CheckIdle off, pool 256", pooled: true, checkIdle: -1, pool: 256},
	}
	sc := scenario{id: "latency-diag", workers: b.p.faultWorkers, fault: "latency", round: freeRound}
	for k := range variants {
		v := &variants[k]
		s := b.p.setup
		s.stats, s.pooled, s.checkIdle, s.pool = new(ourStats), v.pooled, v.checkIdle, v.pool
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
