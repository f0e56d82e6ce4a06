package main

import "fmt"

// healthySerial is the hot path: one goroutine, a distinct key per cycle,
// every node up. Run without proxies (the report's headline) and through
// them (to compare with earlier runs, which had only that set-up).
func healthySerial(p params) scenario {
	return scenario{
		id: "healthy-serial", title: "Healthy, serial (1 goroutine, distinct keys)",
		setups:  []string{"direct", "proxied"},
		workers: 1, round: freeRound,
	}
}

// healthyParallel is the hot path under load: p.parallel goroutines
// sharing one client instance, a distinct key per cycle each.
func healthyParallel(p params) scenario {
	return scenario{
		id: "healthy-parallel", title: fmt.Sprintf("Healthy, parallel (%d goroutines, distinct keys)", p.parallel),
		setups:  []string{"direct", "proxied"},
		workers: p.parallel, round: freeRound,
	}
}
